"""The shared dense projection on CPU: one matmul call vs the row blocks `vidax.zoo.compute.layers.project` runs.

DiT layer shapes (rows = tokens): HunyuanVideo 1.0 at 33 frames 240x416 (3510 video tokens; 3574 with
the trimmed text in its single blocks), batch 2 for classifier-free guidance, the 12288-wide MLP and the
single block's fused 21504-wide input projection. Each shape is compiled twice in one process (`jnp.dot`
whole, and `in_row_blocks`, which cuts more than `CPU_ROW_BLOCK` rows into balanced blocks run one after
another, as `project` does on one CPU device where `vidax.zoo.compute.cpu_tuning` found it faster), timed
interleaved, and the two outputs are compared bit for bit.

    .venv/bin/python -m bench matmul
    .venv/bin/python -m bench.runtime.bench_matmul bf16   # bf16: XLA's variants (flags, output dtype) against torch
    .venv/bin/python -m bench.runtime.bench_matmul bf16-dit   # a bf16 Wan DiT forward, default vs fp32-result products
    VIDAX_BENCH_SMOKE=1 ...   # small shapes: checks that the benchmark runs, no figures
"""

from __future__ import annotations

import os
import sys

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

    from vidax.zoo.compute import layers
    from vidax.zoo.compute.kernels.blockwise import balanced_blocks

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


# --- bf16 on CPU: what XLA reaches, flag by flag, against torch's bf16 GEMM ----------------------------------------

# VIDAX_BENCH_BF16_SHAPE=M,K,N: another product (default a projection of the video stream at 3510 tokens)
BF16_SHAPE = (96, 64, 64) if SMOKE else tuple(int(v) for v in os.environ.get("VIDAX_BENCH_BF16_SHAPE",
                                                                              "3510,3072,3072").split(","))
# variant -> (XLA_FLAGS added to the process's, the dot's output dtype). XLA flags are read once per process, so each
# variant is a process of its own, compiled once and then called on request, interleaved with the others.
BF16_VARIANTS = {
    "xla default (bf16 out)": ("", "bfloat16"),
    "xla, fp32 out": ("", "float32"),
    "xla fp32 inputs (reference)": ("", "fp32-inputs"),
    "oneDNN dot fusion": ("--xla_cpu_experimental_onednn_fusion_type=+individual_dot "
                          "--xla_cpu_experimental_ynn_fusion_type=-individual_dot,-dot", "bfloat16"),
    "oneDNN custom call": ("--xla_cpu_experimental_onednn_custom_call=true", "bfloat16"),
    "XNNPACK dot fusion": ("--xla_cpu_experimental_xnn_fusion_type=+individual_dot "
                           "--xla_cpu_experimental_ynn_fusion_type=-individual_dot,-dot", "bfloat16"),
    "no library dot (Eigen)": ("--xla_cpu_experimental_ynn_fusion_type=-individual_dot,-dot", "bfloat16"),
    "fast math": ("--xla_cpu_enable_fast_math=true", "bfloat16"),
}
_WORKER = """
import sys, time
import jax, jax.numpy as jnp, numpy as np
m, k, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = np.random.default_rng(0)
dtype = jnp.float32 if out == "fp32-inputs" else jnp.bfloat16
x = jnp.asarray(rng.standard_normal((m, k), dtype=np.float32), dtype)
w = jnp.asarray(rng.standard_normal((k, n), dtype=np.float32), dtype)
kind = jnp.float32 if out != "bfloat16" else None
dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=kind)).lower(x, w).compile()
dot(x, w).block_until_ready()
print("ready", flush=True)
for line in sys.stdin:
    result = np.asarray(dot(x, w).block_until_ready()[:4, :4], np.float32)
    print(" ".join(map(repr, result.ravel().tolist())), flush=True)
"""


def _bf16_worker(flags: str, out: str):
    """A process compiling the product with `flags`; returns (call, pid): `call()` runs it once there."""
    import subprocess

    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip(), JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, "-c", _WORKER, *map(str, BF16_SHAPE), out], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        return None, proc
    def call():
        proc.stdin.write("run\n")
        proc.stdin.flush()
        return [float(v) for v in proc.stdout.readline().split()]
    return call, proc


def bf16_main() -> None:
    """Each variant's best time on the product, interleaved with torch's bf16 GEMM, the load printed."""
    import numpy as np
    import torch

    from bench.protocol import announce_load, print_table, process_cpu_seconds

    m, k, n = BF16_SHAPE
    announce_load(f"bf16 matmul {m} x {k} x {n} on CPU")
    rng = np.random.default_rng(0)
    x, w = (torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).bfloat16() for shape in ((m, k), (k, n)))
    contenders, procs, failed = {"torch bf16": lambda: (x @ w)[:4, :4].float().ravel().tolist()}, [], []
    for name, (flags, out) in BF16_VARIANTS.items():
        call, proc = _bf16_worker(flags, out)
        procs.append(proc)
        if call is None:
            failed.append(name)
        else:
            contenders[name] = call
    helper = lambda: sum(process_cpu_seconds(p.pid) for p in procs if p.poll() is None)  # noqa: E731
    try:
        timings = interleaved(contenders, REPEATS, flops=2.0 * m * k * n, helper_cpu=helper)
    finally:
        for proc in procs:
            proc.kill()
    print_table(f"bf16 [{m}, {k}] @ [{k}, {n}] (XLA variants each in its own process)", timings,
                reference="torch bf16", note="failed to start: " + ", ".join(failed) if failed else "")


# --- bf16 on CPU: a whole DiT forward with the default products and with fp32 results ----------------------------

# Wan2.1-1.3B layer shapes, 2 blocks, 9 frames 240x416 (3 x 15 x 26 = 1170 video tokens), 512 text tokens
DIT_CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                  out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=2, cross_attn_norm=True)
DIT_LATENT, DIT_TEXT = ((1, 4, 4), 8) if SMOKE else ((3, 30, 52), 512)


def bf16_dit_main() -> None:
    """The same bf16 DiT forward compiled with `VIDAX_CPU_FP32_RESULT=0` (XLA's default bf16 products) and
    `=1` (fp32 results cast back), timed interleaved, the load printed, the outputs compared."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench.families import pieces
    from bench.protocol import announce_load, print_table
    from vidax.zoo.compute import cpu_tuning
    from vidax.zoo.parts.dit import place_resident

    os.environ[cpu_tuning.FP32_RESULT_ENV] = "0"  # nothing measured or written while the model is built
    WanTransformer, WanTransformerConfig = pieces("wan", "WanTransformer", "WanTransformerConfig")
    model = WanTransformer(WanTransformerConfig.from_hf_config(DIT_CONFIG), dtype=jnp.bfloat16)
    params = jax.tree.map(lambda v: v.astype(jnp.bfloat16), model.init_params(jax.random.key(0)))
    params = place_resident(model, params)
    rng = np.random.default_rng(0)
    inputs = (jnp.asarray(rng.standard_normal((1, 16, *DIT_LATENT), np.float32)), jnp.asarray([700.0]),
              jnp.asarray(rng.standard_normal((1, DIT_TEXT, 4096), np.float32)))
    announce_load(f"bf16 Wan DiT forward ({DIT_CONFIG['num_layers']} blocks, latent {DIT_LATENT}) on CPU")
    compiled = {}
    for name, choice in (("bf16 result (XLA default)", "0"), ("fp32 result, cast back", "1")):
        os.environ[cpu_tuning.FP32_RESULT_ENV] = choice  # read while tracing: a fresh function per choice
        compiled[name] = jax.jit(lambda p, *a: model(p, *a)).lower(params, *inputs).compile()
    os.environ.pop(cpu_tuning.FP32_RESULT_ENV)
    timings = interleaved({name: lambda run=run: run(params, *inputs) for name, run in compiled.items()}, REPEATS)
    default, fast = (np.asarray(out, np.float32) for out in timings.outputs.values())
    print_table("bf16 Wan2.1-1.3B-shaped DiT forward (jit, warm), one CPU device", timings,
                reference="bf16 result (XLA default)",
                note=f"max |fp32-result - default| {np.abs(fast - default).max():.3g} (outputs up to "
                     f"{np.abs(default).max():.3g})")


if __name__ == "__main__":
    {"bf16": bf16_main, "bf16-dit": bf16_dit_main}.get(sys.argv[1] if sys.argv[1:] else "", main)()
