"""Shared pieces of the HunyuanVideo-1.5 parity tests: saving references, tree and tensor helpers."""

from __future__ import annotations

import json
from pathlib import Path

import diffusers  # noqa: F401  (the oracle must be installed)
import numpy as np
import torch  # noqa: F401  (re-exported to the tests)


def save_diffusers(module, folder: Path) -> Path:
    """`save_pretrained`-style folder: config.json and diffusion_pytorch_model.safetensors."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
    (folder / "config.json").write_text(json.dumps(dict(module.config), default=list))
    return folder


def save_state_dict(state: dict, folder: Path) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "diffusion_pytorch_model.safetensors")
    return folder


def unflatten(tree: dict) -> dict:
    from flax.traverse_util import unflatten_dict

    return unflatten_dict(dict(tree), sep="/")


def to_np(t) -> np.ndarray:
    return t.detach().float().numpy()
