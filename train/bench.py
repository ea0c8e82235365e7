"""`vidax-train lora`'s step at a registered model's real layer shapes with random weights (nothing downloaded: the
registry's configs): compile time, step time, peak device memory and MFU on the chip; or, with `--aot v5e`, XLA's
TPU compiler without a chip (libtpu on `PYTHONPATH`): the step's memory plan and compile time on any host.

    python -m vidax.train.bench wan2.1-t2v-1.3b --height 480 --width 832 --frames 81 --rank 32 --out bench.json
    python -m vidax.train.bench wan2.1-t2v-14b --height 480 --width 832 --frames 81 --weights-dtype int8 --offload --aot v5e
    python -m vidax.train.bench chip --out-dir DIR --budget 570     # every case of the chip run, each in its process

Families: Wan (text-to-video), HunyuanVideo-1.5, LTX-2 (its video) and CogVideoX; `--depth N` times a DiT of N
blocks (the step of the whole model is N-independent per block: its per-block time and MFU are the figures).

MFU counts the useful FLOPs of a step with a frozen base: the forward (`F = F_linear + F_attention`) and its
backward to the activations (one product per forward product of the linear layers, two per product of
attention: dQ/dK and dV/dP); the frozen weights have no gradients, the LoRA's own products (rank r against
width D: under 2% at rank 32 on a 1536-wide DiT) are left out, and `jax.checkpoint`'s recomputed forward is
work, not model FLOPs. So model FLOPs = 2·F_linear + 3·F_attention per step (Wan and HunyuanVideo-1.5; the
others report step times alone).
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
import numpy as np

from flax import traverse_util

from vidax.train.lora import LoraConfig, init_lora
from vidax.train.objective import AdamW, Objective, targeting, train_step
from vidax.train.placement import split_blocks

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


def hv15_flops(cfg, tokens: int, text: int, batch: int) -> tuple[float, float]:
    """(F_linear, F_attention) of the HunyuanVideo-1.5 blocks over `tokens` video and `text` joint text tokens
    (the embedders and the token refiner left out: under 1% at 480p)."""
    d, h, hd = cfg.inner_dim, cfg.num_attention_heads, cfg.attention_head_dim
    s = tokens + text
    mlp = cfg.mlp_dim
    linear = cfg.num_layers * batch * (2 * 4 * s * d * d + 2 * 2 * s * d * mlp)
    attention = cfg.num_layers * 4 * batch * h * s * s * hd
    return float(linear), float(attention)


FLOPS = {"wan": wan_flops, "hunyuan_video15": hv15_flops}


@dataclasses.dataclass
class StepSetup:
    """One training step's program and its inputs: `inputs()` draws them (on the device, or the base's blocks in
    host memory with `stream`); `abstract(device)` gives their shapes alone for an ahead-of-time compile."""

    model: Any
    inputs_builder: Any
    objective: Objective
    adamw: AdamW
    config: LoraConfig
    batch_shapes: dict
    tokens: int
    flops: tuple[float, float] | None
    weights_dtype: str | None = None

    def _base(self, key):
        base = jax.tree.map(lambda x: x.astype(jnp.bfloat16), self.model.init_params(key))
        if self.weights_dtype in ("int8", "fp8"):
            base = _quantized(base, self.weights_dtype)
        return base

    def _batch(self, key):
        out = {}
        for i, (name, shape) in enumerate(sorted(self.batch_shapes.items())):
            k = jax.random.fold_in(key, i)
            out[name] = (jnp.ones(shape.shape, shape.dtype) if shape.dtype == jnp.bool_
                         else jax.random.normal(k, shape.shape, shape.dtype))
        return out

    def draws(self):
        """(base, lora, opt_state, batch) drawn in one device program."""
        base = self._base(jax.random.key(0))
        lora = init_lora(jax.random.key(1), base["blocks"], self.config)
        return base, lora, self.adamw.init(lora), self._batch(jax.random.key(2))

    def inputs(self):
        if not self.objective.stream:
            return jax.jit(self.draws)()
        return self.streamed_inputs()

    def streamed_inputs(self):
        """The base's blocks drawn on the host, one layer at a time, into the device's pinned host memory (a base
        larger than the chip is never whole on it)."""
        from jax.sharding import SingleDeviceSharding

        from vidax.train.objective import host_memory

        shapes = jax.eval_shape(self._base, jax.random.key(0))
        device = jax.devices()[0]
        host = SingleDeviceSharding(device, memory_kind=host_memory())
        rng = np.random.default_rng(0)

        def host_leaf(leaf):
            if leaf.dtype == jnp.int8:
                values = rng.integers(-127, 128, leaf.shape, dtype=np.int8)
            else:
                values = (rng.standard_normal(leaf.shape, np.float32) * 0.02).astype(leaf.dtype)
            return jax.device_put(values, host)

        kernels, _ = split_blocks(shapes["blocks"])
        drawn = jax.jit(lambda k: _without(self._base(k), set(kernels)))(jax.random.key(0))
        blocks = {**traverse_util.flatten_dict(drawn["blocks"], sep="/"), **{p: host_leaf(a) for p, a in kernels.items()}}
        lora = init_lora(jax.random.key(1), shapes["blocks"], self.config)
        base = {**drawn, "blocks": traverse_util.unflatten_dict(blocks, sep="/")}
        return base, lora, self.adamw.init(lora), jax.jit(self._batch)(jax.random.key(2))

    def abstract(self, device):
        """The step's arguments as shapes placed on `device` (the blocks in its host memory with `stream`)."""
        from jax.sharding import SingleDeviceSharding

        on_chip = SingleDeviceSharding(device)
        base, lora, opt_state, batch = jax.eval_shape(self.draws)
        place = lambda tree, sharding: jax.tree.map(  # noqa: E731
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), tree)
        host = SingleDeviceSharding(device, memory_kind="pinned_host")
        kernels, small = split_blocks(base["blocks"]) if self.objective.stream else ({}, base["blocks"])
        blocks = {**traverse_util.flatten_dict(place(small, on_chip), sep="/"), **place(kernels, host)}
        base = {**place({k: v for k, v in base.items() if k != "blocks"}, on_chip),
                "blocks": traverse_util.unflatten_dict(blocks, sep="/")}
        key = jax.eval_shape(lambda: jax.random.key(4))
        return (base, place(lora, on_chip), place(opt_state, on_chip), place(batch, on_chip),
                jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=on_chip))


def _without(base: dict, kernels: set[str]) -> dict:
    """`base` with the block leaves `kernels` (flat paths) left out (drawn on the host instead)."""
    flat = {k: v for k, v in traverse_util.flatten_dict(base["blocks"], sep="/").items() if k not in kernels}
    return {**base, "blocks": traverse_util.unflatten_dict(flat, sep="/")}


def _quantized(base: dict, choice: str) -> dict:
    """The blocks' kernels 8-bit with one scale per output channel (as `vidax.zoo.weights.quantize`, on device)."""
    flat = dict(traverse_util.flatten_dict(base["blocks"], sep="/"))
    largest, storage = (127.0, jnp.int8) if choice == "int8" else (448.0, jnp.float8_e4m3fn)
    for path in [p for p, a in flat.items() if p.endswith("/kernel") and a.ndim == 3]:
        wide = flat[path].astype(jnp.float32)
        scale = jnp.maximum(jnp.abs(wide).max(axis=-2), 1e-12) / largest
        scaled = wide / scale[..., None, :]
        flat[path] = jnp.clip(jnp.rint(scaled), -127, 127).astype(storage) if choice == "int8" else scaled.astype(storage)
        flat[path[:-len("kernel")] + "kernel_scale"] = scale
    return {**base, "blocks": traverse_util.unflatten_dict(flat, sep="/")}


def step_setup(model_name: str, height: int, width: int, frames: int, rank: int, batch: int = 1,
               text: int | None = None, depth: int | None = None, remat: str = "full",
               weights_dtype: str | None = None, offload: bool = False) -> StepSetup:
    """The registry model's DiT in bf16 with a rank-`rank` LoRA on its family's default targets, as `vidax-train`
    steps it on a bf16 base; `depth` blocks (None: all); `offload` as `vidax-train --offload`."""
    from vidax.train.families import train_family
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model=model_name, prompt="", height=height, width=width, frames=frames)
    zoo_family = make_pipeline(model_name, options)
    family = train_family(zoo_family)
    s = zoo_family.resolve_settings(options)
    model = family.dit_model(s)
    if depth is not None:
        model = type(model)(dataclasses.replace(model.cfg, num_layers=depth), **_dtypes(model))
    text = text or {"wan": 512, "cogvideox": 226, "ltx2": 256}.get(zoo_family.entry.family, 256)
    latent = (batch, *zoo_family.latent_shape(s)[1:])
    shapes = {"latents": jax.ShapeDtypeStruct(latent, jnp.float32),
              "first_frame": jax.ShapeDtypeStruct((batch,), jnp.float32),
              **family.example_conditions(s, batch, text)}
    patch = getattr(model.cfg, "patch", None) or getattr(model.cfg, "patch_size", 1)  # CogVideoX's (t, h, w): `patch`
    patch = (1, patch, patch) if isinstance(patch, int) else tuple(p or 1 for p in patch)
    tokens = math.prod(n // p for n, p in zip(latent[2:], patch))
    config = LoraConfig(rank=rank, targets=family.default_targets)
    objective = Objective(scale=config.scale, sampling=family.default_sampling, loss=family.loss(s),
                          carry_dtype="bfloat16", remat="offload" if offload else remat, stream=offload)
    counter = FLOPS.get(zoo_family.entry.family)
    flops = counter(model.cfg, tokens, text, batch) if counter else None
    return StepSetup(model, family.inputs(model, s), objective, AdamW(1e-4), config, shapes, tokens, flops,
                     weights_dtype)


def _dtypes(model) -> dict:
    return {name: getattr(model, name) for name in ("dtype", "residual_dtype", "use_cross_timestep") if hasattr(model, name)}


def aot_plan(setup: StepSetup, target: str = "v5e") -> dict:
    """XLA's plan of the step for one `target` chip, compiled here without it (libtpu importable)."""
    from jax.experimental import topologies

    from vidax.zoo.compute import planner

    topology = topologies.get_topology_desc(platform="tpu", topology_name=f"{target}:1x1", chip_config_name="default",
                                            chips_per_host_bounds=(1, 1, 1), num_slices=1)
    device = topology.devices[0]
    saved_backend, saved_memory = jax.default_backend, planner.device_memory_bytes
    jax.default_backend = lambda: "tpu"  # the model code's backend checks (kernels, FFN chunks, RoPE) answer tpu
    planner.device_memory_bytes = lambda: (1, int(15.75 * 2**30))
    try:
        with targeting(device):
            args = setup.abstract(device)
            began = time.perf_counter()
            compiled = train_step.lower(setup.model, setup.inputs_builder, setup.objective, setup.adamw, *args).compile()
            seconds = time.perf_counter() - began
    finally:
        jax.default_backend, planner.device_memory_bytes = saved_backend, saved_memory
    memory = compiled.memory_analysis()
    gib = lambda name: getattr(memory, name, 0) / 2**30  # noqa: E731
    return {"target": target, "compile_s": seconds, "temp_gib": gib("temp_size_in_bytes"),
            "argument_gib": gib("argument_size_in_bytes"), "output_gib": gib("output_size_in_bytes"),
            "alias_gib": gib("alias_size_in_bytes"), "host_argument_gib": gib("host_argument_size_in_bytes"),
            "host_temp_gib": gib("host_temp_size_in_bytes"), "pallas_calls": compiled.as_text().count("tpu_custom_call")}


def timed(setup: StepSetup, steps: int) -> dict:
    """The step on this process's device: the first (compile included), then `steps` more."""
    base, lora, opt_state, batch = setup.inputs()
    run = lambda lora, opt_state, key: train_step(setup.model, setup.inputs_builder, setup.objective,  # noqa: E731
                                                  setup.adamw, base, lora, opt_state, batch, key)
    began = time.perf_counter()
    lora, opt_state, loss = run(lora, opt_state, jax.random.key(4))
    loss.block_until_ready()
    first = time.perf_counter() - began
    times = []
    for step in range(steps):
        began = time.perf_counter()
        lora, opt_state, loss = run(lora, opt_state, jax.random.key(5 + step))
        loss.block_until_ready()
        times.append(time.perf_counter() - began)
    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    best = min(times)
    out = {"device": device.device_kind, "first_step_s": first, "step_s": times, "best_step_s": best,
           "loss": float(loss), "peak_bytes": stats.get("peak_bytes_in_use"), "bytes_limit": stats.get("bytes_limit")}
    if setup.flops is not None:
        linear, attention = setup.flops
        model_flops = 2 * linear + 3 * attention
        peak = PEAK_BF16.get(device.device_kind)
        out.update(model_tflop_per_step=model_flops / 1e12, forward_tflop=(linear + attention) / 1e12,
                   tflop_s=model_flops / best / 1e12, mfu=model_flops / best / peak if peak else None)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--text", type=int, default=None, help="prompt tokens (default: the family's padded length)")
    p.add_argument("--depth", type=int, default=None, help="blocks of the DiT (default: all)")
    p.add_argument("--remat", default="full", choices=("full", "attention", "offload", "attention_offload"))
    p.add_argument("--weights-dtype", default=None, choices=("int8", "fp8"))
    p.add_argument("--offload", action="store_true", help="the base's blocks and each block's input in host memory")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--aot", default=None, help="compile for this TPU (v5e) without one: the memory plan")
    p.add_argument("--out", default=None)
    return p


def main(argv: list[str] | None = None) -> dict:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["chip"]:
        from vidax.train.chip import main as chip

        return chip(argv[1:])
    args = parser().parse_args(argv)
    setup = step_setup(args.model, args.height, args.width, args.frames, args.rank, args.batch, args.text, args.depth,
                       args.remat, args.weights_dtype, args.offload)
    result = {"model": args.model, "size": [args.height, args.width, args.frames], "rank": args.rank,
              "depth": args.depth or setup.model.cfg.num_layers, "remat": setup.objective.remat,
              "weights_dtype": args.weights_dtype, "offload": args.offload, "latents": setup.batch_shapes["latents"].shape,
              "tokens": setup.tokens, "jax": jax.__version__}
    result.update(aot_plan(setup, args.aot) if args.aot else timed(setup, args.steps))
    if result.get("best_step_s"):
        result["per_block_s"] = result["best_step_s"] / result["depth"]
    print(json.dumps(result, indent=1, default=str))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
    return result


if __name__ == "__main__":
    main()
