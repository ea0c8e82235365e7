"""One TPU attention kernel compiled for a v5e without a chip; its VLIW bundles per region and the busiest unit.

    PYTHONPATH=<libtpu folder>:<checkout> python kernel_bundles.py B,H,SQ,SKV,D[,masked] KERNEL:Q,KV,KC
    PYTHONPATH=... python kernel_bundles.py --maxdiffusion BH,S,D Q,KV,KC,INNER FIXED(0|1)   # its custom kernel

`KERNEL_DUMP` names the dump folder (default /tmp/kernel-bundles; empty it between runs).

The kernel goes through vidax's own wrapper (`pallas_tpu.tpu_attention`: padding, heads-major layout, masks), or
MaxDiffusion's custom kernel from `.bench/maxdiffusion` (scripts/prepare_maxdiffusion.sh). libtpu writes every
program's final bundles (`--xla_jf_dump_to DUMP --xla_jf_dump_llo_text=true`); a kernel's grid step is straight-
line code, so the bundle count of its largest regions (the steady-state body) bounds its cycles from below.
"""
import glob
import json
import os
import re
import sys
import time

dump = os.environ.get("KERNEL_DUMP", "/tmp/kernel-bundles")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("VIDAX_NO_COMPILE_CACHE", "1")
os.environ["LIBTPU_INIT_ARGS"] = (os.environ.get("LIBTPU_INIT_ARGS", "")
                                  + f" --xla_jf_dump_to={dump} --xla_jf_dump_llo_text=true").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from vidax.zoo.compute import runtime  # noqa: E402,F401 - raises the scoped VMEM to 64 MiB
from bench.accelerator.chip import memory_720p  # noqa: E402

# Pallas asks the default device which chip it lowers for (a signed division in an index map, for one)
jax.config.update("jax_default_device", memory_720p._aot_device("v5e"))


def compile_vidax(shape: str, label: str):
    from vidax.zoo.compute.kernels.pallas_tpu import tpu_attention
    from vidax.zoo.compute.kernels.tpu_blocks import parse

    fields = shape.split(",")
    b, h, sq, skv, d = (int(x) for x in fields[:5])
    sharding = jax.sharding.SingleDeviceSharding(memory_720p._aot_device("v5e"))
    q = jax.ShapeDtypeStruct((b, sq, h, d), jnp.bfloat16, sharding=sharding)
    k = jax.ShapeDtypeStruct((b, skv, h, d), jnp.bfloat16, sharding=sharding)
    mask = jax.ShapeDtypeStruct((b, skv), jnp.bool_, sharding=sharding) if fields[-1] == "masked" else None
    choice = parse(label)
    with memory_720p._traced_as_tpu(True):
        return jax.jit(lambda q, k, v, m: tpu_attention(q, k, v, m, d ** -0.5, choice)).lower(q, k, k, mask).compile()


def compile_maxdiffusion(shape: str, tiles: str, fixed: str):
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "../../../.bench/maxdiffusion/src/maxdiffusion/kernels/"
                        "custom_splash_attention.py")
    spec = importlib.util.spec_from_file_location("custom_splash", path)
    custom = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(custom)
    bh, s, d = (int(x) for x in shape.split(","))
    bq, bkv, bkc, inner = (int(x) for x in tiles.split(","))
    sharding = jax.sharding.SingleDeviceSharding(memory_720p._aot_device("v5e"))
    q = jax.ShapeDtypeStruct((bh, -(-s // bq) * bq, d), jnp.bfloat16, sharding=sharding)
    k = jax.ShapeDtypeStruct((bh, -(-s // bkv) * bkv, d), jnp.bfloat16, sharding=sharding)
    mk = jax.ShapeDtypeStruct((2, bh), jnp.float32, sharding=sharding)
    kernel = custom.make_splash_mha(custom._BlockSizes(bq, bkv, bkc, inner), orig_q_seq_len=s, orig_kv_seq_len=s,
                                    use_base2_exp=True, use_experimental_scheduler=True,
                                    vmem_limit_bytes=64 * 2**20, use_fixed_m=fixed == "1")
    return jax.jit(kernel).lower(q, k, k, mk).compile()


def regions(final_bundles: str, utilization: str, top: int = 6) -> list[dict]:
    """The largest regions of a kernel's final bundles, each with the bundles the busiest unit needs."""
    lines = open(utilization).read().splitlines()
    names, caps = lines[1].split(", "), [int(x) for x in lines[2].split()]
    rows = [list(map(int, line.split())) for line in lines[4:] if line.strip() and line[0].isdigit()]
    starts, spans = {}, []
    for line in open(final_bundles):
        address = re.match(r"\s*(0x[0-9a-f]+)", line)
        if not address:
            continue
        at = int(address.group(1), 16)
        for kind, number in re.findall(r"(Start|End) region (\d+)", line):
            if kind == "Start":
                starts[number] = at
            elif number in starts:
                spans.append((at - starts[number] + 1, starts[number], at, number))
    out = []
    for size, first, last, number in sorted(spans, reverse=True)[:top]:
        sums = [sum(r[i] for r in rows[first:last + 1]) for i in range(len(caps))]
        out.append({"region": number, "bundles": size,
                    "busiest": {n: round(t / c) for n, t, c in zip(names, sums, caps) if t}})
    return out


if __name__ == "__main__":
    started = time.process_time()
    if sys.argv[1] == "--maxdiffusion":
        compile_maxdiffusion(*sys.argv[2:5])
    else:
        compile_vidax(sys.argv[1], sys.argv[2])
    cpu = time.process_time() - started
    for final in sorted(glob.glob(f"{dump}/*-final_bundles.txt")):
        name = re.sub(r"^\d+-|-\d+-final_bundles.txt$", "", os.path.basename(final))
        if "schedule-analysis" in final or not any(k in name for k in ("splash", "pallas", "lambda", "kernel", "flash")):
            continue
        prefix = re.sub(r"-\d+-final_bundles\.txt$", "", final)
        found = glob.glob(glob.escape(prefix) + "-*-final_hlo-static-per-bundle-utilization.txt")
        if found:
            print(json.dumps({"kernel": name, "compile_cpu_s": round(cpu, 1), "regions": regions(final, found[0])}))
