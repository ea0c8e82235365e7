"""Compile time of the tiny Wan-shaped DiT stack at 2 and 40 layers: lax.scan vs an unrolled loop.

`zoo.parts.dit.scan_blocks` compiles one block body whatever the depth over a stacked tree; over the
per-layer trees `zoo.parts.dit.place_resident` gives one CPU device it loops (what that placement costs
in compile time); the unrolled loop over slices of the stack is the alternative the scan replaced.
Persistent cache off, a fresh function per measurement.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from vidax.zoo.parts.dit import per_layer, scan_blocks
from vidax.zoo.compute.runtime import configure_compile_cache


def _unrolled(block, stacked, hidden, ctx):
    depth = jax.tree.leaves(stacked)[0].shape[0]
    for index in range(depth):
        hidden = block.apply({"params": jax.tree.map(lambda a, i=index: a[i], stacked)}, hidden, ctx)
    return hidden


def _compile_seconds(runner, depth: int, split: bool = False) -> float:
    from tests.runtime.tiny_dit import TinyConfig, TinyDiT

    model = TinyDiT(TinyConfig(dim=64, heads=8, ffn_dim=256, layers=depth))
    params = model.random_host_tree()
    if split:
        params = per_layer(model, params)
    b, s, t = 1, 256, 16
    inputs = (
        np.zeros((b, s, 4), np.float32), np.zeros((b,), np.float32),
        np.zeros((b, t, 16), np.float32), np.ones((b, t), bool),
    )
    fn = jax.jit(lambda p, *a: model.head(p, runner(model.block, p["blocks"], *model.embed(p, *a)), None))
    start = time.perf_counter()
    fn.lower(params, *inputs).compile()
    return time.perf_counter() - start


def main() -> None:
    configure_compile_cache(False)
    print("tiny DiT stack (dim 64, 8 heads, 256 tokens): trace + compile seconds")
    print(f"{'runner':>10} | {'2 layers':>9} | {'40 layers':>9} | {'40 / 2':>6}")
    for name, runner, split in (("lax.scan", scan_blocks, False), ("per-layer", scan_blocks, True),
                                ("unrolled", _unrolled, False)):
        shallow = _compile_seconds(runner, 2, split)
        deep = _compile_seconds(runner, 40, split)
        print(f"{name:>10} | {shallow:>8.2f}s | {deep:>8.2f}s | {deep / shallow:>5.2f}x", flush=True)
