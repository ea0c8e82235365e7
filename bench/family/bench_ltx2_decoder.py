"""LTX-2.5 diffusion decoder: compile time and memory at the release's layer shapes, two grid sizes.

The decoder's risk is not speed but compilation: a naive neighborhood attention (one window mask or
gather per query) compiled for 45+ minutes and needed 147 GB on a tiny shape. Here the blocks of a
stage are one `nn.scan` and the attention is a `lax.map` over query blocks, so compile time should
not grow with the grid and memory should grow linearly with it. For each latent size the table
gives the compile time and XLA's own memory analysis (arguments + outputs + temporaries) of the two
compiled units (context stages 1-4, one stage-5 step), and with `VIDAX_BENCH_RUN=1` one timed decode
(minutes on a CPU). Random weights at the release config (~0.4 B parameters), bf16 weights and
activations as a real run would use them on an accelerator.

    .venv/bin/python -m bench ltx2_decoder
"""

from __future__ import annotations

import os
import time

# latent [C=128, F', H', W'] -> pixels [3, 1 + 8 (F' - 1), 32 H', 32 W']
# 17 frames 224x224 and 25 frames 256x320 (stage 1 needs 7x7 latents, stage 5 an 11-frame window), and
# the native 121 frames 704x1216 (compiled and analysed only: its decode is the pipeline's tiled job)
SHAPES = ((3, 7, 7), (4, 8, 10), (16, 22, 38))
RUN = os.environ.get("VIDAX_BENCH_RUN", "0") == "1"


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench.families import pieces
    from vidax.zoo.compute.runtime import configure_compile_cache

    DiffusionDecoderConfig, LTX2DiffusionDecoder = pieces("ltx2", "DiffusionDecoderConfig", "LTX2DiffusionDecoder")

    configure_compile_cache(enabled=False)  # the compile column must be real compiles, not cache hits

    cfg = DiffusionDecoderConfig()  # diffusers' defaults = the LTX-2.5 release
    dtype = jnp.bfloat16
    decoder = LTX2DiffusionDecoder(cfg, dtype=dtype, blocks_per_step=4)
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, dtype),
                            jax.eval_shape(decoder.init_params, jax.random.key(0)))  # compiles need shapes only
    params = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), abstract) if RUN else abstract
    count = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(abstract))
    print(f"LTX-2.5 diffusion decoder, release shapes ({count / 1e9:.2f} B params, bf16), "
          f"{jax.device_count()} {jax.default_backend()} device(s), query block (4, 8, 8) x 4 per step")
    header = f"{'latent F x H x W':18}{'pixels':>16}{'unit':>9}{'compile s':>11}{'args GiB':>10}{'temp GiB':>10}{'out GiB':>9}"
    print(header + (f"{'decode s':>10}" if RUN else ""))
    for f, h, w in SHAPES:
        z = jax.ShapeDtypeStruct((1, f, h, w, cfg.latent_channels), dtype)
        noise_shape = decoder.noise_shape((1, cfg.latent_channels, f, h, w))
        rows = []
        start = time.perf_counter()
        ctx_exe = decoder._context.lower(abstract, z).compile()
        rows.append(("context", time.perf_counter() - start, ctx_exe.memory_analysis()))
        ctx_shape = jax.eval_shape(decoder._context, abstract, z)
        x = jax.ShapeDtypeStruct((1, *noise_shape[2:], cfg.out_channels), dtype)
        t = jax.ShapeDtypeStruct((1,), jnp.float32)
        start = time.perf_counter()
        step_exe = decoder._step.lower(abstract, ctx_shape, x, t).compile()
        rows.append(("step", time.perf_counter() - start, step_exe.memory_analysis()))
        decode_s = None
        if RUN and f * h * w < 1000:  # the release's one x0 step: context, then one stage-5 step (the compiled units above)
            start = time.perf_counter()
            zeros = lambda a: jnp.zeros(a.shape, a.dtype)  # noqa: E731
            jax.block_until_ready(step_exe(params, ctx_exe(params, zeros(z)), zeros(x), jnp.ones((1,), jnp.float32)))
            decode_s = time.perf_counter() - start
        pixels = f"{noise_shape[2]}x{noise_shape[3]}x{noise_shape[4]}"
        for i, (unit, seconds, mem) in enumerate(rows):
            line = (f"{f'{f} x {h} x {w}' if i == 0 else '':18}{pixels if i == 0 else '':>16}{unit:>9}{seconds:>11.1f}"
                    f"{_gib(mem.argument_size_in_bytes):>10}{_gib(mem.temp_size_in_bytes):>10}"
                    f"{_gib(mem.output_size_in_bytes):>9}")
            if RUN:
                line += f"{decode_s:>10.1f}" if i == 0 and decode_s is not None else f"{'':>10}"
            print(line)
    print("compile time stays flat across grids (scanned stages, one attention body); temp memory grows with the grid.")


if __name__ == "__main__":
    main()
