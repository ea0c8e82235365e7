"""The shared dense projection on CPU: one matmul call vs the row blocks `vidax.zoo.layers.project` runs.

DiT layer shapes (rows = tokens): HunyuanVideo 1.0 at 33 frames 240x416 (3510 video tokens; 3574 with
the trimmed text in its single blocks), batch 2 for classifier-free guidance, the 12288-wide MLP and the
single block's fused 21504-wide input projection. Each shape is compiled twice in one process (`jnp.dot`
whole, and `in_row_blocks`, which cuts more than `CPU_ROW_BLOCK` rows into balanced blocks run one after
another, as `project` does on one CPU device where `vidax.zoo.cpu_tuning` found it faster), timed
interleaved, and the two outputs are compared bit for bit.

    .venv/bin/python -m bench matmul
    VIDAX_BENCH_SMOKE=1 ...   # small shapes: checks that the benchmark runs, no figures
"""

from __future__ import annotations

import os

from bench.protocol import interleaved

SMOKE = os.environ.get("VIDAX_BENCH_SMOKE") == "1"
SHAPES = ((96, 64, 64),) if SMOKE else (
    (3510, 3072, 3072),    # a projection (q, k, v, out) of the video stream
    (7020, 3072, 3072),    # the same under true CFG (batch 2)
    (3510, 3072, 12288),   # MLP in
    (3510, 12288, 3072),   # MLP out
    (3574, 3072, 21504),   # single block: q, k, v and MLP in, fused
    (3574, 15360, 3072),   # single block: attention and MLP out, fused
)
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "1" if SMOKE else "3"))


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.zoo import layers
    from vidax.zoo.kernels.blockwise import balanced_blocks

    jax.config.update("jax_default_matmul_precision", "highest")
    if SMOKE:
        layers.CPU_ROW_BLOCK = 32
    rng = np.random.default_rng(0)
    print(f"fp32 matmuls on {jax.default_backend()}, rows in blocks of at most {layers.CPU_ROW_BLOCK}; "
          f"{REPEATS} interleaved calls each, best")
    print(f"{'rows x in x out':>22}{'one call':>11}{'row blocks':>12}{'GFLOP/s':>16}{'blocks':>10}  same bits")
    for rows, k, n in SHAPES:
        x = jnp.asarray(rng.standard_normal((rows, k), dtype=np.float32))
        w = jnp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        one_call = jax.jit(jnp.dot).lower(x, w).compile()
        blocked = jax.jit(lambda x, w: layers.in_row_blocks(x, w, block=layers.CPU_ROW_BLOCK)).lower(x, w).compile()
        timings = interleaved({"one call": lambda: one_call(x, w), "row blocks": lambda: blocked(x, w)}, REPEATS)
        whole, split = (timings.results[name].best for name in ("one call", "row blocks"))
        same = np.array_equal(np.asarray(timings.outputs["one call"]), np.asarray(timings.outputs["row blocks"]))
        count, size = balanced_blocks(rows, layers.CPU_ROW_BLOCK)
        rate = f"{2 * rows * k * n / whole / 1e9:.0f} -> {2 * rows * k * n / split / 1e9:.0f}"
        print(f"{f'{rows} x {k} x {n}':>22}{whole:>10.3f}s{split:>11.3f}s{rate:>16}{f'{count} x {size}':>10}  {same}"
              f"   (load {timings.load_before:.2f} -> {timings.load_after:.2f}"
              f"{'' if timings.others is None else f', others {timings.others:.2f} cores'})", flush=True)
