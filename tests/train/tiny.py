"""The tiny perturbed diffusers Wan DiT the training tests share, saved in the diffusers layout and converted
through the real spec `wan/transformer` (as tests/wan's references are built)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flax import traverse_util

from tests.oracle import build_perturbed, save_diffusers
from vidax.translator import convert
from vidax.zoo.wan.config import WanTransformerConfig
from vidax.zoo.wan.transformer import WanTransformer

CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
              text_dim=24, freq_dim=12, ffn_dim=40, num_layers=2, cross_attn_norm=True)


def build(root: Path, seed: int = 0):
    """(the perturbed `WanTransformer3DModel`, the vidax model, its fp32 params) with `root/transformer` saved."""
    from diffusers import WanTransformer3DModel

    ref = build_perturbed(WanTransformer3DModel, CONFIG, seed=seed)
    save_diffusers(ref, root / "transformer")
    cfg = WanTransformerConfig.from_hf_config(json.loads((root / "transformer" / "config.json").read_text()))
    model = WanTransformer(cfg)
    tree = convert("wan/transformer", root, model.param_shapes(), dtype="float32")
    return ref, model, traverse_util.unflatten_dict(dict(tree), sep="/")


def rel(got, want) -> float:
    """Relative error of a whole tensor (its norm): elementwise rtol is meaningless for entries near zero."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def one_clip(root: Path) -> Path:
    """A folder of one 9-frame 32x48 random clip and its caption (the image-conditioned and expert tests' data)."""
    from vidax.zoo.video_io import write_mp4

    write_mp4(root / "clip.mp4", np.random.default_rng(0).random((9, 32, 48, 3)).astype(np.float32), 16)
    (root / "clip.txt").write_text("a red kite over a grey sea")
    return root
