"""Time `vidax-train lora`'s step on a registered Wan DiT at its real layer shapes, with random bf16 weights (nothing
downloaded: the registry's config): compile time, step time, peak device memory and MFU.

    python -m vidax.train.bench wan2.1-t2v-1.3b --height 480 --width 832 --frames 81 --rank 32 --out bench.json

MFU counts the useful FLOPs of a step with a frozen base: the forward (`F = F_linear + F_attention`) and its
backward to the activations (one product per forward product of the linear layers, two per product of
attention: dQ/dK and dV/dP); the frozen weights have no gradients, the LoRA's own products (rank r against
width D: under 2% at rank 32 on a 1536-wide DiT) are left out, and `jax.checkpoint`'s recomputed forward is
work, not model FLOPs. So model FLOPs = 2·F_linear + 3·F_attention per step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from typing import Any

import jax
import jax.numpy as jnp

from vidax.train.lora import LoraConfig, init_lora
from vidax.train.objective import AdamW, Objective, train_step

PEAK_BF16 = {"TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v6 lite": 918e12, "TPU v5p": 459e12, "TPU v4": 275e12}


def wan_flops(cfg, tokens: int, text: int, batch: int) -> tuple[float, float]:
    """(F_linear, F_attention) of one Wan forward (follows `bench/accelerator/families.py`'s count)."""
    d, h, hd, ffn = cfg.inner_dim, cfg.num_attention_heads, cfg.attention_head_dim, cfg.ffn_dim
    s, t = batch * tokens, batch * text
    linear = cfg.num_layers * (6 * 2 * s * d * d + 2 * 2 * t * d * d + 2 * 2 * s * d * ffn)
    linear += 2 * s * d * cfg.in_channels * math.prod(cfg.patch_size) + 2 * t * d * (cfg.text_dim + d)
    linear += 2 * s * d * cfg.out_channels * math.prod(cfg.patch_size)
    attention = cfg.num_layers * 4 * batch * h * tokens * (tokens + text) * hd
    return float(linear), float(attention)


@dataclasses.dataclass
class StepSetup:
    """One training step's program and its inputs: `inputs()` draws them on the device; `jax.eval_shape(
    setup.inputs)` gives their shapes alone (an ahead-of-time compile for a chip this host does not have)."""

    model: Any
    cfg: Any
    objective: Objective
    adamw: AdamW
    config: LoraConfig
    latent: tuple[int, ...]
    text_shape: tuple[int, ...]
    tokens: int

    def inputs(self):
        base = jax.tree.map(lambda x: x.astype(jnp.bfloat16), self.model.init_params(jax.random.key(0)))
        lora = init_lora(jax.random.key(1), base["blocks"], self.config)
        latents = jax.random.normal(jax.random.key(2), self.latent, jnp.float32)
        text = jax.random.normal(jax.random.key(3), self.text_shape, jnp.float32)
        return base, lora, self.adamw.init(lora), latents, text


def step_setup(model_name: str, height: int, width: int, frames: int, rank: int, batch: int = 1,
               text: int = 512) -> StepSetup:
    """The registry model's DiT in bf16 with a rank-`rank` LoRA, as `vidax-train` steps it on a bf16 base."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.wan.transformer import WanTransformer

    family = make_pipeline(model_name, GenerateOptions(model=model_name, prompt=""))
    cfg, vae = family.model.transformer, family.model.vae
    latent = (batch, cfg.in_channels, (frames - 1) // vae.scale_factor_temporal + 1,
              height // vae.scale_factor_spatial, width // vae.scale_factor_spatial)
    tokens = math.prod(n // p for n, p in zip(latent[2:], cfg.patch_size))
    config = LoraConfig(rank=rank)
    objective = Objective(scale=config.scale, carry_dtype="bfloat16")  # as vidax-train's bf16 base
    return StepSetup(WanTransformer(cfg, dtype=jnp.bfloat16), cfg, objective, AdamW(1e-4), config, latent,
                     (batch, text, cfg.text_dim), tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--text", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    setup = step_setup(args.model, args.height, args.width, args.frames, args.rank, args.batch, args.text)
    model, objective, adamw, tokens, cfg = setup.model, setup.objective, setup.adamw, setup.tokens, setup.cfg
    base, lora, opt_state, latents, text = jax.jit(setup.inputs)()  # drawn on the device in one program
    began = time.perf_counter()
    lora, opt_state, loss = train_step(model, objective, adamw, base, lora, opt_state, latents, text, jax.random.key(4))
    loss.block_until_ready()
    first = time.perf_counter() - began
    times = []
    for step in range(args.steps):
        began = time.perf_counter()
        lora, opt_state, loss = train_step(model, objective, adamw, base, lora, opt_state, latents, text,
                                           jax.random.key(5 + step))
        loss.block_until_ready()
        times.append(time.perf_counter() - began)
    linear, attention = wan_flops(cfg, tokens, args.text, args.batch)
    model_flops = 2 * linear + 3 * attention
    device = jax.devices()[0]
    peak = PEAK_BF16.get(device.device_kind)
    stats = device.memory_stats() or {}
    best = min(times)
    result = {"model": args.model, "device": device.device_kind, "latents": setup.latent, "tokens": tokens, "rank": args.rank,
              "first_step_s": first, "step_s": times, "best_step_s": best, "loss": float(loss),
              "model_tflop_per_step": model_flops / 1e12, "forward_tflop": (linear + attention) / 1e12,
              "tflop_s": model_flops / best / 1e12, "mfu": model_flops / best / peak if peak else None,
              "peak_bytes": stats.get("peak_bytes_in_use"), "bytes_limit": stats.get("bytes_limit")}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
