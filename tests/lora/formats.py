"""LoRA files for a tiny Wan DiT, written the way each tool saves them, from one set of low-rank factors.

    factors = low_rank_factors(state, wan_modules(2), rank=4, seed=0)  # {official module: (A, B)}
    write_peft(path, factors, alpha=8.0)                 # diffusers / PEFT: transformer.….lora_A/lora_B + metadata
    write_original(path, factors, alpha=2.0)            # ComfyUI / diffusion-pipe: diffusion_model.….lora_down/up + .alpha
    write_musubi(path, factors, alpha=6.0)              # kohya / musubi-tuner: lora_unet_blocks_0_… + .alpha

A LoRA's delta is `alpha / rank · B @ A`; every writer keeps the same A and B, so a test can tell the
formats' scales apart. The official <-> diffusers module names are the translator spec fixtures'.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "translator"))
from wan_transformer_spec_fixtures import official_key, save_diffusers, save_official  # noqa: E402

BLOCK_MODULES = ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k",
                 "attn2.to_v", "attn2.to_out.0", "ffn.net.0.proj", "ffn.net.2")


def wan_modules(layers: int, head: bool = False) -> list[str]:
    """The diffusers names of the linear layers a Wan LoRA trains (musubi's full set per block)."""
    names = [f"blocks.{i}.{m}" for i in range(layers) for m in BLOCK_MODULES]
    return names + (["proj_out"] if head else [])


def spec_fixtures_save(state: dict, root: Path) -> None:
    """`state` as the diffusers repo lays it out (`root/diffusers`) and as the official one (`root/official`)."""
    save_diffusers(state, root / "diffusers")
    save_official(state, root / "official")


def official(module: str) -> str:
    return official_key(module + ".weight")[: -len(".weight")]


def low_rank_factors(state: dict, modules: list[str], rank: int, seed: int, std: float = 0.2) -> dict:
    """{diffusers module: (A [rank, in], B [out, rank])} float32 torch tensors for each module of `state`."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for module in modules:
        rows, cols = state[module + ".weight"].shape
        out[module] = (torch.randn(rank, cols, generator=gen) * std, torch.randn(rows, rank, generator=gen) * std)
    return out


def biases(state: dict, modules: list[str], seed: int, std: float = 0.05) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {m: torch.randn(state[m + ".bias"].shape, generator=gen) * std for m in modules}


def write_peft(path: Path, factors: dict, alpha: float | None = None, bias: dict | None = None) -> Path:
    """diffusers' `save_lora_weights` layout: `transformer.<module>.lora_A/B.weight` (+ `lora_B.bias`) and,
    with an alpha, the LoraConfig in the `lora_adapter_metadata` header entry, prefixed by component."""
    tensors = {}
    for module, (a, b) in factors.items():
        tensors[f"transformer.{module}.lora_A.weight"] = a
        tensors[f"transformer.{module}.lora_B.weight"] = b
    for module, value in (bias or {}).items():
        tensors[f"transformer.{module}.lora_B.bias"] = value
    metadata = {"format": "pt"}
    if alpha is not None:
        rank = next(iter(factors.values()))[0].shape[0]
        config = {"r": rank, "lora_alpha": alpha, "target_modules": sorted(factors), "lora_bias": bool(bias)}
        metadata["lora_adapter_metadata"] = json.dumps({f"transformer.{k}": v for k, v in config.items()})
    save_file(tensors, path, metadata=metadata)
    return path


def write_original(path: Path, factors: dict, alpha: float | None = None, names=("lora_down", "lora_up"),
                   diff_b: dict | None = None, extra: dict | None = None) -> Path:
    """Official module names under `diffusion_model.` (ComfyUI, diffusion-pipe, ai-toolkit)."""
    tensors = {}
    for module, (a, b) in factors.items():
        name = f"diffusion_model.{official(module)}"
        tensors[f"{name}.{names[0]}.weight"] = a
        tensors[f"{name}.{names[1]}.weight"] = b
        if alpha is not None:
            tensors[f"{name}.alpha"] = torch.tensor(alpha)
    for module, value in (diff_b or {}).items():
        tensors[f"diffusion_model.{official(module)}.diff_b"] = value
    save_file({**tensors, **(extra or {})}, path)
    return path


def write_musubi(path: Path, factors: dict, alpha: float) -> Path:
    """kohya / musubi-tuner: `lora_unet_` + the official module name with `_` for `.`, every module with an alpha."""
    tensors = {}
    for module, (a, b) in factors.items():
        name = "lora_unet_" + official(module).replace(".", "_")
        tensors[f"{name}.lora_down.weight"] = a
        tensors[f"{name}.lora_up.weight"] = b
        tensors[f"{name}.alpha"] = torch.tensor(alpha)
    save_file(tensors, path)
    return path


def hand_merge(state: dict, factors: dict, scale: float) -> dict:
    """`state` with `scale · B @ A` added to each module's weight (float32 numpy)."""
    out = {k: v.numpy().astype(np.float32).copy() for k, v in state.items()}
    for module, (a, b) in factors.items():
        out[module + ".weight"] += scale * (b.numpy() @ a.numpy())
    return out
