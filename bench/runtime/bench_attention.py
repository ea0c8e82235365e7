"""CPU attention, 12 heads × 128, fp32: the blockwise kernel's time beside PyTorch's fused
`scaled_dot_product_attention` (flash attention on CPU), and its peak memory beside naive softmax.

Time: q/k/v `[1, S, 12, 128]` at 4k, 8k and 16k tokens, the kernel jitted and warm, SDPA on the
same cores; timed per `bench/protocol.py` (interleaved, best and median wall seconds, CPU seconds,
load average before and after). Memory: each measurement runs in its own subprocess (peak RSS is
per process): it imports jax, builds q/k/v in fp32, runs one jitted attention and reports its peak
RSS and the RSS before the call. The naive path materialises `[B, H, S, S]` logits, so it runs
only at the sizes whose logits fit NAIVE_LOGITS_BUDGET; at 32k tokens its logits alone would take
51.5 GB.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HEADS, HEAD_DIM = 12, 128
NAIVE_LOGITS_BUDGET = 2 << 30  # bytes of fp32 logits the naive path may take on a shared machine
SIZES = (2048, 4096, 8192, 32768)
TIME_SIZES = tuple(int(n) for n in os.environ.get("VIDAX_BENCH_ATTENTION_SIZES", "4096,8192,16384").split(","))
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))
ROOT = Path(__file__).resolve().parents[2]


def _peak_rss_kb() -> int:
    """This process's peak RSS in KiB: VmHWM, which a new program starts afresh (`ru_maxrss` keeps
    the high-water mark of the process that spawned it, e.g. a bench run that timed 16k tokens)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(kind: str, seq: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.zoo.compute.kernels.blockwise import blockwise_attention
    from vidax.zoo.compute.kernels.plain import plain_attention

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, seq, HEADS, HEAD_DIM), np.float32)) for _ in range(3))
    kernel = blockwise_attention if kind == "blockwise" else plain_attention
    run = jax.jit(lambda q, k, v: kernel(q, k, v, None, HEAD_DIM**-0.5))
    before = _peak_rss_kb()
    start = time.perf_counter()
    jax.block_until_ready(run(q, k, v))
    seconds = time.perf_counter() - start
    peak = _peak_rss_kb()
    print(json.dumps({"before_mb": before / 1024, "peak_mb": peak / 1024, "seconds": seconds}))


def _measure(kind: str, seq: int) -> dict:
    cmd = [sys.executable, "-m", "bench.runtime.bench_attention", kind, str(seq)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"JAX_PLATFORMS": "cpu", "VIDAX_NO_COMPILE_CACHE": "1", "PATH": ""})
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_against_sdpa(seq: int) -> None:
    """Blockwise (jit) vs torch SDPA at `seq` tokens, interleaved, in this process."""
    import jax
    import numpy as np
    import torch

    from bench.protocol import interleaved, print_table, reference_flops
    from vidax.zoo.compute.kernels.blockwise import blockwise_attention

    jax.config.update("jax_default_matmul_precision", "highest")
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    rng = np.random.default_rng(0)
    qkv = [rng.standard_normal((1, seq, HEADS, HEAD_DIM), np.float32) for _ in range(3)]
    ours_in = [jax.numpy.asarray(x) for x in qkv]
    torch_in = [torch.from_numpy(x).transpose(1, 2).contiguous() for x in qkv]  # [B, H, S, D], SDPA's layout
    kernel = jax.jit(lambda q, k, v: blockwise_attention(q, k, v, None, HEAD_DIM**-0.5)).lower(*ours_in).compile()

    def sdpa():
        with torch.inference_mode():
            return torch.nn.functional.scaled_dot_product_attention(*torch_in)

    timings = interleaved({"vidax blockwise": lambda: kernel(*ours_in), "torch SDPA": sdpa}, repeats=REPEATS,
                            flops=reference_flops(sdpa))
    ours = np.asarray(timings.outputs["vidax blockwise"])
    err = float(np.abs(ours - timings.outputs["torch SDPA"].transpose(1, 2).numpy()).max())
    cpu_ratio = timings.results["vidax blockwise"].cpu_best / timings.results["torch SDPA"].cpu_best
    print_table(f"attention, B=1, {seq} tokens, H={HEADS}, D={HEAD_DIM}, fp32, {torch.get_num_threads()} torch threads",
                timings, reference="torch SDPA", note=f"CPU s best {cpu_ratio:.2f}x; max |diff| {err:.1e}")


def main() -> None:
    for seq in TIME_SIZES:
        time_against_sdpa(seq)
        print(flush=True)
    print(f"attention on CPU, B=1, H={HEADS}, D={HEAD_DIM}, fp32; peak RSS of a fresh process")
    print(f"{'tokens':>7} | {'blockwise peak':>14} {'(inputs)':>9} {'time':>7} | {'naive peak':>11} {'time':>7}")
    for seq in SIZES:
        block = _measure("blockwise", seq)
        logits = HEADS * seq * seq * 4
        if logits <= NAIVE_LOGITS_BUDGET:
            naive = _measure("naive", seq)
            naive_cells = f"{naive['peak_mb']:>8.0f} MB {naive['seconds']:>6.1f}s"
        else:
            naive_cells = f"not run: logits alone {logits / 2**30:.1f} GB"
        print(f"{seq:>7} | {block['peak_mb']:>11.0f} MB {block['before_mb']:>6.0f} MB {block['seconds']:>6.1f}s | {naive_cells}",
              flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
