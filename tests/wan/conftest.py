"""Tiny perturbed diffusers Wan transformers saved in the real repos' folder layouts.

Shared by the Wan DiT and pipeline tests through the `wan_dit` fixture (this module):

    def test_x(wan_dit):
        ref = wan_dit.build_reference(wan_dit.tiny_config("i2v"))  # perturbed WanTransformer3DModel, fp32
        root = wan_dit.save_reference(ref, tmp / "m", "diffusers")  # transformer/ config.json + safetensors
        root = wan_dit.save_reference(ref, tmp / "o", "official")   # official key names and config.json

The official key names come from the translator's spec fixtures (the inverse of diffusers'
single-file converter, checked there against `convert_wan_transformer_to_diffusers`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.oracle import build_perturbed, save_state, state_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "translator"))
import wan_transformer_spec_fixtures as spec_fixtures  # noqa: E402

TEXT_LEN = 512  # the reference splits I2V context assuming exactly 512 text tokens
BASE = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=24, freq_dim=12, ffn_dim=40, num_layers=2, cross_attn_norm=True)
VARIANTS = {
    "t2v": {},
    "i2v": dict(in_channels=9, image_dim=20, added_kv_proj_dim=16),  # 4 latent + 4 condition + 1 mask (tiny)
    "flf2v": dict(in_channels=9, image_dim=20, added_kv_proj_dim=16, pos_embed_seq_len=10),
    "ti2v": dict(in_channels=48, out_channels=48),  # Wan2.2 TI2V-5B: 48-channel VAE latents
}
OFFICIAL_TYPES = {"t2v": "t2v", "i2v": "i2v", "flf2v": "flf2v", "ti2v": "ti2v"}


def tiny_config(variant: str = "t2v", **overrides) -> dict:
    """WanTransformer3DModel kwargs of a tiny model (hidden 16, 2 layers) of `variant`."""
    return {**BASE, **VARIANTS[variant], **overrides}


def build_reference(config: dict, seed: int = 0):
    """A WanTransformer3DModel with every float parameter perturbed by N(0, 0.02), in eval mode."""
    from diffusers import WanTransformer3DModel

    return build_perturbed(WanTransformer3DModel, config, None, init_seed=seed)


def diffusers_config(model) -> dict:
    config = {k: v for k, v in dict(model.config).items() if not k.startswith("_")}
    config = {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
    return {"_class_name": "WanTransformer3DModel", **config}


def official_config(model, model_type: str) -> dict:
    """The official repos' `WanModel` config.json for the same sizes."""
    c = model.config
    return {"_class_name": "WanModel", "model_type": model_type, "patch_size": list(c.patch_size),
            "text_len": TEXT_LEN, "in_dim": c.in_channels, "dim": c.num_attention_heads * c.attention_head_dim,
            "ffn_dim": c.ffn_dim, "freq_dim": c.freq_dim, "text_dim": c.text_dim, "out_dim": c.out_channels,
            "num_heads": c.num_attention_heads, "num_layers": c.num_layers, "eps": c.eps}


def save_reference(model, root: Path, layout: str = "diffusers", subfolder: str | None = None,
                   model_type: str = "t2v") -> Path:
    """Save `model` as the real repo lays it out; returns the model root to pass to `convert`.

    Args:
      layout: "diffusers" (`transformer/` with config.json) or "official" (root files, official keys).
      subfolder: diffusers component folder (`transformer_2` for the A14B low-noise expert) or
        official expert folder (`high_noise_model`); default the usual place.
    """
    state = state_of(model)
    if layout == "diffusers":
        save_state(state, root / (subfolder or "transformer"), diffusers_config(model))
        return root
    folder = root / subfolder if subfolder else root
    spec_fixtures.save_official(state, folder)
    (folder / "config.json").write_text(json.dumps(official_config(model, model_type)))
    return root


@pytest.fixture(scope="session")
def wan_dit():
    """These helpers (a conftest cannot be imported by name reliably)."""
    return sys.modules[__name__]
