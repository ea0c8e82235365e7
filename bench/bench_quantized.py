"""`--weights-dtype`: a DiT projection with its kernel in bf16 against the same kernel kept 8-bit (int8, fp8
e4m3) with per-output-channel scales and widened inside the product, as `vidax.zoo.layers.Dense` runs it.

Wan2.1-14B's layer shapes (width 5120, FFN 13824) at 1560 tokens (480x832, 21 frames), computing in bf16.
Each contender is one compiled `Dense` apply; they run interleaved (bench/protocol.py). On CPU the
widening is extra work per call, so no speed target here: the figure is what it costs. The table also
prints each contender's weight bytes and its output's distance from the bf16 one.

    .venv/bin/python -m bench quantized
    VIDAX_BENCH_SMOKE=1 ...   # small shapes: checks that the benchmark runs, no figures
"""

from __future__ import annotations

import os

from bench.protocol import interleaved, print_table

SMOKE = os.environ.get("VIDAX_BENCH_SMOKE") == "1"
SHAPES = ((64, 64, 96),) if SMOKE else ((1560, 5120, 5120), (1560, 5120, 13824), (1560, 13824, 5120))
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "1" if SMOKE else "3"))


def _contenders(rows: int, k: int, n: int):
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    from vidax.zoo.layers import Dense
    from vidax.zoo.quantize import quantize_kernel

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((rows, k), dtype=np.float32), jnp.bfloat16)
    kernel = (rng.standard_normal((1, k, n), dtype=np.float32) * 0.02)
    bias = jnp.zeros((n,), jnp.bfloat16)
    dense = Dense(n, dtype=jnp.bfloat16)
    apply = jax.jit(lambda params, x: dense.apply({"params": params}, x))
    params = {"bf16": {"kernel": jnp.asarray(kernel[0].astype(ml_dtypes.bfloat16)), "bias": bias}}
    for choice in ("int8", "fp8"):
        q, scale = quantize_kernel(kernel, choice)
        params[choice] = {"kernel": jnp.asarray(q[0]), "kernel_scale": jnp.asarray(scale[0]), "bias": bias}
    return {name: (lambda p=p: apply(p, x)) for name, p in params.items()}, params


def main() -> None:
    import jax
    import numpy as np

    for rows, k, n in SHAPES:
        contenders, params = _contenders(rows, k, n)
        timings = interleaved(contenders, REPEATS)
        reference = np.asarray(timings.outputs["bf16"], np.float32)
        notes = []
        for name, tree in params.items():
            weight = sum(leaf.nbytes for leaf in jax.tree.leaves(tree))
            out = np.asarray(timings.outputs[name], np.float32)
            distance = float(np.linalg.norm(out - reference) / np.linalg.norm(reference))
            notes.append(f"{name}: {weight / 2**20:.1f} MiB of weights, output {distance:.4f} from bf16")
        print_table(f"Dense {rows} x {k} x {n}, bf16 compute", timings, reference="bf16", note="; ".join(notes))
