"""The family pieces the benches measure on purpose, as data in one table, reached through the registry.

A bench that times one family-internal piece (its DiT forward, its memory job, LTX-2's diffusion
decoder) names the piece here, `pieces("wan", "WanTransformer", "WanTransformerConfig")`, instead of
importing the family's folder: the family's package comes from the registry's `family_class` (the
contract every generator is reached through) and the piece by its place in that package. So no bench
imports a family folder (tests/bench checks it), a renamed piece is one row here, and each family's
benches are what `python -m bench <family>` selects.

Pieces of shared modules (the Wan VAE that Wan and Cosmos ship, `vidax.zoo.parts.wan_vae`) are no family's
and are imported directly.
"""

from __future__ import annotations

import importlib
from typing import Any

# family -> piece name -> "module:attribute" inside the family's package ("module" alone: the module)
PIECES: dict[str, dict[str, str]] = {
    "wan": {
        "WanTransformer": "transformer:WanTransformer", "WanTransformerConfig": "config:WanTransformerConfig",
        "WanCondition": "family:WanCondition", "WanPredict": "family:WanPredict",
    },
    "cogvideox": {
        "CogVideoXTransformer": "transformer:CogVideoXTransformer",
        "CogVideoXTransformerConfig": "config:CogVideoXTransformerConfig", "memory_job": "family:memory_job",
    },
    "cosmos": {"CosmosTransformer": "transformer:CosmosTransformer",
               "CosmosTransformerConfig": "config:CosmosTransformerConfig"},
    "cosmos3": {"Cosmos3Transformer": "transformer:Cosmos3Transformer",
                "Cosmos3TransformerConfig": "config:Cosmos3TransformerConfig", "rope": "rope"},
    "hunyuan_video": {
        "HunyuanVideoTransformer": "transformer:HunyuanVideoTransformer", "TransformerConfig": "config:TransformerConfig",
        "VAEConfig": "config:VAEConfig", "HunyuanVideoSettings": "family:HunyuanVideoSettings",
        "memory_job": "family:memory_job", "trim_text_padding": "family:trim_text_padding",
    },
    "hunyuan_video15": {
        "HunyuanVideo15Transformer": "transformer:HunyuanVideo15Transformer",
        "TransformerConfig": "config:TransformerConfig", "VAEConfig": "config:VAEConfig",
        "HunyuanVideo15VAE": "vae:HunyuanVideo15VAE", "memory_job": "family:memory_job",
    },
    "ltx_video": {"LTXVideoTransformer": "transformer:LTXVideoTransformer",
                  "TransformerConfig": "config:TransformerConfig", "rope": "rope"},
    "ltx2": {
        "LTX2Transformer": "transformer:LTX2Transformer", "DiTInputs": "transformer:DiTInputs",
        "TransformerConfig": "config:TransformerConfig", "rope": "rope",
        "LTX2DiffusionDecoder": "decoding.diffusion_decoder:LTX2DiffusionDecoder",
        "DiffusionDecoderConfig": "config:DiffusionDecoderConfig",
    },
}


def family_package(family: str) -> str:
    """The package of a family's generator, as the registry finds it (`vidax.zoo.<family>`)."""
    from vidax.zoo.registry import family_class

    return family_class(family).__module__.rpartition(".")[0]


def piece(family: str, name: str) -> Any:
    """One piece of `family` by its name in `PIECES` (a KeyError names what the family has)."""
    table = PIECES[family]
    if name not in table:
        raise KeyError(f"bench/families.py has no piece {name!r} of {family} (has: {', '.join(table)})")
    module, _, attribute = table[name].partition(":")
    found = importlib.import_module(f"{family_package(family)}.{module}")
    return getattr(found, attribute) if attribute else found


def pieces(family: str, *names: str) -> tuple[Any, ...]:
    """Several pieces of `family`, in the order named."""
    return tuple(piece(family, name) for name in names)
