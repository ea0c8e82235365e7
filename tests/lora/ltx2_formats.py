"""LoRA files for a tiny LTX-2 DiT in the formats LTX-2 LoRAs are saved in, from one set of low-rank factors.

    factors = low_rank_factors(state, ltx2_modules(state), rank=4, seed=0)   # {diffusers module: (A, B)}
    write_peft(path, factors, alpha=8.0)          # diffusers / PEFT (tests/lora/formats.py): transformer.<diffusers name>
    write_ltx2_original(path, factors)            # LTX-2-Trainer / ComfyUI: diffusion_model.<ltx_core name>.lora_A/B
    write_ltx2_original(path, factors, alpha=2.0, names=("lora_down", "lora_up"))   # + .alpha
    write_ltx2_kohya(path, factors, alpha=6.0)    # lora_unet_<ltx_core name with _ for .>

The ltx_core (official) module names are the LTX-2 spec fixtures' (`DIT_TO_OFFICIAL`), the inverse of
diffusers' single-file converter; its LoRA converter renames the same modules.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.ltx2.references.ltx2_spec_fixtures import DIT_TO_OFFICIAL, rename

# per block: video and audio self/cross attention, both a2v/v2a attentions, both feed-forwards
BLOCK = ("attn1.to_q", "attn1.to_out.0", "attn2.to_k", "attn2.to_v", "audio_attn1.to_v", "audio_attn2.to_q",
         "audio_to_video_attn.to_q", "audio_to_video_attn.to_out.0", "video_to_audio_attn.to_k",
         "ff.net.0.proj", "ff.net.2", "audio_ff.net.0.proj", "audio_ff.net.2")
# top-level linears, the renamed ones above all (proj_in <- patchify_proj, time_embed <- adaln_single, ...)
TOP = ("proj_in", "audio_proj_in", "time_embed.linear", "audio_time_embed.emb.timestep_embedder.linear_1",
       "av_cross_attn_video_scale_shift.linear", "av_cross_attn_audio_v2a_gate.linear", "caption_projection.linear_1",
       "proj_out", "audio_proj_out", "prompt_adaln.linear", "transformer_blocks.1.attn1.to_gate_logits")


def ltx2_modules(state: dict) -> list[str]:
    """The diffusers names of the LoRA'd linears that `state` (an LTX-2 DiT) has."""
    names = [f"transformer_blocks.{i}.{m}" for i in range(2) for m in BLOCK] + list(TOP)
    return [m for m in names if m + ".weight" in state]


def official(module: str) -> str:
    return rename(module + ".weight", DIT_TO_OFFICIAL)[: -len(".weight")]


def write_ltx2_original(path: Path, factors: dict, alpha: float | None = None, names=("lora_A", "lora_B")) -> Path:
    tensors = {}
    for module, (a, b) in factors.items():
        name = f"diffusion_model.{official(module)}"
        tensors[f"{name}.{names[0]}.weight"], tensors[f"{name}.{names[1]}.weight"] = a, b
        if alpha is not None:
            tensors[f"{name}.alpha"] = torch.tensor(alpha)
    save_file(tensors, path)
    return path


def write_ltx2_kohya(path: Path, factors: dict, alpha: float) -> Path:
    tensors = {}
    for module, (a, b) in factors.items():
        name = "lora_unet_" + official(module).replace(".", "_")
        tensors[f"{name}.lora_down.weight"], tensors[f"{name}.lora_up.weight"] = a, b
        tensors[f"{name}.alpha"] = torch.tensor(alpha)
    save_file(tensors, path)
    return path
