"""Tiny Wan VACE transformers in both layouts, with their expected trees computed without the spec.

Registered for the spec `wan/vace_transformer` (the translator's mutation test) and used by this folder's
parity tests. The official layout is the Wan DiT's inverse rename table (the translator's Wan fixtures)
plus VACE's own names (`before_proj`, `after_proj`); `test_transformer.py` checks that diffusers' own
`convert_wan_transformer_to_diffusers` maps it back exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests import oracle
from tests.oracle import build_perturbed, save_state, state_of
from tests.translator import wan_transformer_spec_fixtures as wan_fixtures
from vidax.translator.testing import SpecCase, register_spec_fixture

# hidden 16, 3 main layers with hints after layers 0 and 2 (a layer without one in between)
TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=24, freq_dim=12, ffn_dim=40, num_layers=3, cross_attn_norm=True, vace_layers=[0, 2],
            vace_in_channels=12)
TEXT_LEN = 512

_VACE_TO_OFFICIAL = [(r"^(vace_blocks\.0)\.proj_in\.", r"\1.before_proj."),
                     (r"^(vace_blocks\.\d+)\.proj_out\.", r"\1.after_proj.")]


def tiny_config(**overrides) -> dict:
    """`WanVACETransformer3DModel` kwargs of a tiny model."""
    return {**TINY, **overrides}


def build_reference(config: dict, seed: int = 0):
    """A `WanVACETransformer3DModel` with every float parameter perturbed by N(0, 0.02), in eval mode."""
    from diffusers import WanVACETransformer3DModel

    return build_perturbed(WanVACETransformer3DModel, config, None, init_seed=seed)


def official_key(key: str) -> str:
    for pattern, repl in _VACE_TO_OFFICIAL:
        key = re.sub(pattern, repl, key)
    return wan_fixtures.official_key(key)


def diffusers_config(model) -> dict:
    config = {k: list(v) if isinstance(v, tuple) else v for k, v in dict(model.config).items() if not k.startswith("_")}
    return {"_class_name": "WanVACETransformer3DModel", **config}


def official_config(model) -> dict:
    """The official repos' `VaceWanModel` config.json for the same sizes."""
    c = model.config
    return {"_class_name": "VaceWanModel", "model_type": "vace", "patch_size": list(c.patch_size),
            "text_len": TEXT_LEN, "in_dim": c.in_channels, "dim": c.num_attention_heads * c.attention_head_dim,
            "ffn_dim": c.ffn_dim, "freq_dim": c.freq_dim, "text_dim": c.text_dim, "out_dim": c.out_channels,
            "num_heads": c.num_attention_heads, "num_layers": c.num_layers, "eps": c.eps,
            "vace_layers": list(c.vace_layers), "vace_in_dim": c.vace_in_channels}


def save_reference(model, root: Path, layout: str = "diffusers", subfolder: str | None = None) -> Path:
    """Save `model` as the real repo lays it out (diffusers: `transformer/`; official: the root)."""
    from safetensors.torch import save_file

    state = state_of(model)
    if layout == "diffusers":
        save_state(state, root / (subfolder or "transformer"), diffusers_config(model))
        return root
    folder = root / subfolder if subfolder else root
    folder.mkdir(parents=True, exist_ok=True)
    save_file({official_key(k): v for k, v in state.items()}, folder / "diffusion_pytorch_model.safetensors")
    (folder / "config.json").write_text(json.dumps(official_config(model)))
    return root


def expected_tree(state: dict) -> dict:
    """The converted tree from the diffusers state dict alone: block 0's `proj_in` is its own module."""
    proj_in = {k: v for k, v in state.items() if k.startswith("vace_blocks.0.proj_in.")}
    tree = oracle.expected_tree({k: v for k, v in state.items() if k not in proj_in},
                                {"blocks": "blocks", "vace_blocks": "vace_blocks"})
    for key, value in proj_in.items():
        path, array = oracle.torch_leaf(key.replace("vace_blocks.0.", ""), oracle.to_np(value))
        tree[f"vace_blocks_0/{path}"] = array
    return tree


@register_spec_fixture("wan/vace_transformer")
def wan_vace_transformer_cases(tmp_path: Path) -> list[SpecCase]:
    model = build_reference(tiny_config())
    expected = expected_tree(state_of(model))
    return [SpecCase("diffusers", save_reference(model, tmp_path / "d", "diffusers"), expected),
            SpecCase("official", save_reference(model, tmp_path / "o", "official"), expected)]
