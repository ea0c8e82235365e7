"""The video VAEs' 3x3(x3) convolutions on large frames compiled for a TPU with the attention kernels' scoped VMEM
limit (64 MiB, what vidax sets for the process) and with libtpu's own (16 MiB, `runtime.xla_only_options`, what the
VAE units get): compile seconds, XLA temporaries and, on a TPU, the warm call. Each contender compiles
COMPILE_ROUNDS times, the contenders alternating (a fresh lowering each time, the persistent compile cache off), and
the median is printed, so that neither compiles at the quieter moment.

    python -m bench vae_conv                                 # deviceless v5e compile (libtpu) on any host
    python -m bench.runtime.bench_vae_conv --json OUT.json   # the same, or on a TPU host compile and time

The shapes are the Wan2.1 decoder's at 480x832 and 720x1280 (one 4-frame chunk plus the two frames of causal past,
96 channels; the up-sampler's 192 -> 96 2D conv), and CogVideoX's last decoder stage at 480x720 (128 channels), as
`time_taps_conv` runs them; bf16 as a generation runs. On a
TPU the contenders' warm calls alternate (ROUNDS rounds, median of each), so neither has the quieter moment; the max
|difference| of their outputs is printed beside. Without a TPU, XLA's TPU compiler compiles for a v5e without a chip
(`vidax.zoo.compute.target`); compile time there is this host's, and the TPU host's within its core count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

CASES = {  # name -> (input [B, T, H, W, C], kernel [kt, kh, kw, C, O])
    "480x832 3x3x3 96->96": ((1, 6, 480, 832, 96), (3, 3, 3, 96, 96)),
    "480x832 3x3 192->96": ((1, 4, 480, 832, 192), (1, 3, 3, 192, 96)),
    "720x1280 3x3x3 96->96": ((1, 6, 720, 1280, 96), (3, 3, 3, 96, 96)),
    "CogVideoX 480x720 3x3x3 128->128": ((1, 6, 480, 720, 128), (3, 3, 3, 128, 128)),
}
ROUNDS = 7
COMPILE_ROUNDS = 3
CONTENDERS = (("64 MiB", None), ("16 MiB", {"xla_tpu_scoped_vmem_limit_kib": "16384"}))  # name, XLA options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here too")
    parser.add_argument("--cases", help="comma-separated case names (substrings); default all")
    args = parser.parse_args(argv)

    import contextlib
    import os

    import jax

    from vidax.zoo.compute.runtime import configure_compile_cache  # sets the kernels' 64 MiB before the backend starts
    from bench.protocol import announce_load
    from vidax.zoo.compute.target import compiling_for, parse_target

    configure_compile_cache(enabled=False)  # every compile a compile, not a load
    on_tpu = jax.default_backend() == "tpu"
    chosen = {k: v for k, v in CASES.items() if not args.cases or any(c in k for c in args.cases.split(","))}
    print(f"{'on ' + jax.devices()[0].device_kind if on_tpu else 'deviceless v5e compile'}, jax {jax.__version__}, "
          f"LIBTPU_INIT_ARGS={os.environ.get('LIBTPU_INIT_ARGS', '')!r}")
    announce_load("bench_vae_conv")
    rows = []
    for name, (x_shape, w_shape) in chosen.items():
        context = contextlib.nullcontext([jax.devices()[0]]) if on_tpu else compiling_for(parse_target("v5e"))
        try:
            with context as devices:
                rows.append(_case(name, x_shape, w_shape, devices[0], on_tpu))
        except Exception as error:  # noqa: BLE001 - no libtpu here: say so, as the other benches do
            print(f"{name}: not compiled ({str(error).splitlines()[0]})")
            continue
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'case':24} {'scoped VMEM':11} {'compile s':>9} {'temp MiB':>9} {'warm ms':>8}")
    for row in rows:
        for form, _ in CONTENDERS:
            r = row[form]
            warm = f"{r['warm_ms']:8.2f}" if "warm_ms" in r else f"{'-':>8}"
            print(f"{row['case']:24} {form:11} {r['compile_s']:9.1f} {r['temp_mib']:9.0f} {warm}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


def _case(name: str, x_shape, w_shape, device, on_tpu: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import SingleDeviceSharding

    from vidax.zoo.parts.vae_layers import time_taps_conv

    sharding = SingleDeviceSharding(device)
    x = jax.ShapeDtypeStruct(x_shape, jnp.bfloat16, sharding=sharding)
    w = jax.ShapeDtypeStruct(w_shape, jnp.bfloat16, sharding=sharding)
    row: dict = {"case": name, "input": list(x_shape), "kernel": list(w_shape)}
    compiled, seconds = {}, {form: [] for form, _ in CONTENDERS}
    for _ in range(COMPILE_ROUNDS):
        for form, options in CONTENDERS:
            start = time.perf_counter()  # a new function each time: jit's own cache cannot answer
            compiled[form] = jax.jit(lambda x, w: time_taps_conv(x, w, 1), compiler_options=options).lower(x, w).compile()
            seconds[form].append(time.perf_counter() - start)
    for form, _ in CONTENDERS:
        row[form] = {"compile_s": round(statistics.median(seconds[form]), 2), "compile_each_s": seconds[form],
                     "temp_mib": compiled[form].memory_analysis().temp_size_in_bytes / 2**20}
    if on_tpu:
        rng = np.random.default_rng(0)
        xs = jax.device_put(jnp.asarray(rng.standard_normal(x_shape), jnp.bfloat16), device)
        ws = jax.device_put(jnp.asarray(rng.standard_normal(w_shape) * 0.05, jnp.bfloat16), device)
        outs = {form: c(xs, ws).block_until_ready() for form, c in compiled.items()}  # warm-up
        times: dict[str, list[float]] = {form: [] for form in compiled}
        for _ in range(ROUNDS):
            for form, c in compiled.items():
                start = time.perf_counter()
                c(xs, ws).block_until_ready()
                times[form].append(time.perf_counter() - start)
        first = CONTENDERS[0][0]
        for form in compiled:
            row[form]["warm_ms"] = statistics.median(times[form]) * 1e3
        row["max_abs_diff"] = {form: float(jnp.max(jnp.abs(outs[first].astype(jnp.float32) - out.astype(jnp.float32))))
                               for form, out in outs.items()}
    return row


if __name__ == "__main__":
    raise SystemExit(main())
