"""The measuring protocol every comparative benchmark follows (README figures come from it).

Contenders run interleaved (A, B, A, B, ...) after one warm-up call each, so that a change in the
machine's load hits both alike; each call's wall and CPU seconds are recorded; the table reports
best and median of both, the ratio to the reference contender, the load average before and after,
and the CPU that other processes used while the contenders were timed (from /proc/stat, this
process's own CPU taken out). Timing starts once the 1-minute load, raised by the warm-up and the
previous comparison, is back under 1.0 (at most two minutes' wait). A figure is only quotable when
the load was under 1.5 as timing started and other processes used under 0.25 of a core meanwhile
(a quiet machine); the load after is printed but counts the bench's own threads (near 2 on a
2-core machine whatever else runs).

Given the work a call does (`flops`, counted on the reference with `reference_flops`), the table
also prints each contender's FLOP/s beside this machine's fp32 GEMM peak, measured just before the
timed calls with every library at hand (XLA and torch, the best of two matmul shapes), and the floor: the time
that work takes at that peak, as a ratio to the reference. No implementation doing the reference's
fp32 arithmetic goes under the floor, so it says how far a speed target can be met on the machine.
A contender that skips part of that work (exactly: the same outputs) has its own count (`work`); its
rate is its own work over its time, and the table says so under the floor, which it can go under.

    timings = interleaved({"vidax": run_ours, "diffusers": run_ref}, repeats=3)
    print_table("Wan DiT, 4 blocks", timings, reference="diffusers")
"""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

QUIET_LOAD = 1.5
QUIET_OTHERS = 0.25  # cores other processes may use, on average, during a quotable run
# the longest wait for the load to settle before timing (VIDAX_BENCH_SETTLE_S: 0 for a quick functional run)
SETTLE_S = 120.0


@dataclasses.dataclass(frozen=True)
class Timing:
    wall: tuple[float, ...]  # seconds per timed call
    cpu: tuple[float, ...]  # process CPU seconds per timed call (all threads)

    @property
    def best(self) -> float:
        return min(self.wall)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_best(self) -> float:
        return min(self.cpu)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


@dataclasses.dataclass(frozen=True)
class Timings:
    results: dict[str, Timing]
    load_before: float
    load_after: float
    outputs: dict[str, Any]  # each contender's last return value (for a max |diff| beside the times)
    others: float | None = None  # cores other processes used on average while timing (None: unknown)
    flops: float | None = None  # the work one call does (the reference's count), if given
    gemm_peak: dict[str, float] | None = None  # library -> fp32 GEMM FLOP/s, measured before timing
    work: Mapping[str, float] = dataclasses.field(default_factory=dict)  # contender -> its own count, if less

    def flops_of(self, name: str) -> float | None:
        return self.work.get(name, self.flops)

    @property
    def quiet(self) -> bool:
        """Load under 1.5 when timing starts, and (where known) other processes under 0.25 of a core
        meanwhile; the load after counts the contenders' own threads, so it is printed, not judged."""
        others_quiet = self.others is None or self.others < QUIET_OTHERS
        return self.load_before < QUIET_LOAD and others_quiet


def load_average() -> float:
    """The 1-minute load average (0.0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def own_cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of its children that have ended."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def settle(target: float = 1.0, limit_s: float | None = None) -> float:
    """Wait (at most `limit_s`: `VIDAX_BENCH_SETTLE_S`, else 120 s) until the 1-minute load average,
    raised by the warm-up and the previous comparison's own threads, falls under `target`; returns it."""
    limit_s = float(os.environ.get("VIDAX_BENCH_SETTLE_S", SETTLE_S)) if limit_s is None else limit_s
    deadline = time.monotonic() + limit_s
    while (load := load_average()) >= target and time.monotonic() < deadline:
        time.sleep(2.0)
    return load


def announce_load(what: str) -> float:
    """Print the 1-minute load average as `what` starts, with a warning when it is not quiet (the tables'
    verdict then says NOT quiet too; with VIDAX_BENCH_QUIET_ONLY=1 the bench refuses to run); returns it."""
    load = load_average()
    verdict = "quiet" if load < QUIET_LOAD else (f"NOT quiet (>= {QUIET_LOAD}): no figure of this run is "
                                                 "quotable; run it on a quiet machine")
    print(f"{what}: load average {load:.2f} at start ({verdict})", flush=True)
    if load >= QUIET_LOAD and os.environ.get("VIDAX_BENCH_QUIET_ONLY") == "1":
        raise SystemExit(f"{what}: refused, the load average {load:.2f} is >= {QUIET_LOAD} (VIDAX_BENCH_QUIET_ONLY=1)")
    return load


def busy_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine has spent busy since boot (/proc/stat), or None."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
        ticks = [int(v) for v in fields]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
        return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _block(value: Any) -> Any:
    """Wait for asynchronous (jax) results so that the clock stops after the work."""
    try:
        import jax

        return jax.block_until_ready(value)
    except ImportError:
        return value


# A square GEMM and a DiT-like one (K=4096 into a 12288-wide MLP), each ~0.3 s here: the CPU
# libraries' best blocking differs by shape (XLA reaches ~199 GFLOP/s on the second, ~175 on the first).
GEMM_SHAPES = ((3072, 3072, 3072), (1024, 4096, 12288))


def gemm_peak(shapes: tuple[tuple[int, int, int], ...] = GEMM_SHAPES, repeats: int = 3) -> dict[str, float]:
    """fp32 FLOP/s of the best `[M, K] @ [K, N]` matmul over `shapes`, best of `repeats` each, with
    each library importable here (XLA at highest precision, torch on its intra-op pool): the
    machine's practical fp32 peak."""
    import numpy as np

    rng = np.random.default_rng(0)
    peak: dict[str, float] = {}
    for m, k, n in shapes:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        for name, fn in _matmuls(a, b).items():
            _block(fn())
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                _block(fn())
                best = min(best, time.perf_counter() - start)
            peak[name] = max(peak.get(name, 0.0), 2.0 * m * k * n / best)
    return peak


def _matmuls(a, b) -> dict[str, Callable[[], Any]]:
    """`a @ b` with each library importable here."""
    calls: dict[str, Callable[[], Any]] = {}
    try:
        import jax
        import jax.numpy as jnp

        xa, xb = jnp.asarray(a), jnp.asarray(b)
        xla_dot = jax.jit(lambda x, y: jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST))
        calls["XLA"] = lambda: xla_dot(xa, xb)
    except ImportError:
        pass
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        calls["torch"] = lambda: ta @ tb
    except ImportError:
        pass
    return calls


def reference_flops(fn: Callable[[], Any]) -> float:
    """FLOPs one call of a torch callable does, by torch's own counter (matmuls, convolutions and
    attention; elementwise work is not counted, so the floor it gives is a lower bound). CPU
    attention, which torch's table lacks, counts as the same two matmuls as on GPU."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    def cpu_attention(query, key, value, *args, out_val=None, **kwargs):
        return sdpa_flop_count(query, key, value)

    mapping = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention}
    with torch.inference_mode(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        fn()
    return float(counter.get_total_flops())


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a running process (all its threads, and its children that have ended) has used, from
    /proc (0.0 where there is none): the share of a helper process, such as a server the bench talks to."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return 0.0


def interleaved(contenders: Mapping[str, Callable[[], Any]], repeats: int = 3, warmup: int | Mapping[str, int] = 1,
                flops: float | None = None, work: Mapping[str, float] | None = None,
                helper_cpu: Callable[[], float] | None = None) -> Timings:
    """Time each contender `repeats` times, interleaved, after `warmup` untimed calls each.

    Args:
      contenders: name -> zero-argument callable (compile outside it: only steady calls are timed).
      repeats: timed calls per contender.
      warmup: untimed calls per contender first (allocators, lazy init, jit); a mapping gives each
        contender its own count (a contender that compiles nothing and runs for minutes may need none).
      flops: the work one call does (`reference_flops`); given, the machine's GEMM peak is measured
        once the load settles, and the table prints FLOP/s and the floor.
      work: contender -> the work one of its calls does where it does less than the reference (it skips
        computation whose results are discarded), counted the same way; its FLOP/s use that count.
      helper_cpu: CPU seconds so far of processes that work for the contenders but are not this process's
        ended children (a running server): their share counts as the bench's own, not as other processes'.
    """
    outputs = {}
    for name, fn in contenders.items():
        for _ in range(warmup.get(name, 1) if isinstance(warmup, Mapping) else warmup):
            outputs[name] = _block(fn())
    load_before = settle()
    peak = gemm_peak() if flops else None
    own_cpu = (lambda: own_cpu_seconds() + helper_cpu()) if helper_cpu else own_cpu_seconds
    busy_start, own_start, clock_start = busy_cpu_seconds(), own_cpu(), time.perf_counter()
    wall: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            outputs[name] = _block(fn())
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    results = {name: Timing(tuple(wall[name]), tuple(cpu[name])) for name in contenders}
    busy_end, others = busy_cpu_seconds(), None
    if busy_start is not None and busy_end is not None:
        own = own_cpu() - own_start
        others = max(busy_end - busy_start - own, 0.0) / (time.perf_counter() - clock_start)
    return Timings(results, load_before, load_average(), outputs, others, flops, peak, dict(work or {}))


def print_table(title: str, timings: Timings, reference: str | None = None, note: str = "") -> None:
    """One row per contender: best and median wall seconds, CPU seconds, ratio to `reference`; with
    the work counted, each one's GFLOP/s and share of the GEMM peak, and the floor below the rows."""
    repeats = len(next(iter(timings.results.values())).wall)
    peak = max(timings.gemm_peak.values()) if timings.flops and timings.gemm_peak else None
    print(title)
    ratio_width = max(18, len(reference or "") + 10)
    print(f"{'':28}{'best s':>10}{'median s':>10}{'cpu best s':>12}{'cpu median s':>14}"
          f"{'best / ' + reference if reference else '':>{ratio_width}}" + (f"{'GFLOP/s':>9}{'of peak':>9}" if peak else ""))
    ref = timings.results.get(reference) if reference else None
    for name, t in timings.results.items():
        ratio = f"{t.best / ref.best:.2f}x" if ref is not None else ""
        done = timings.flops_of(name)
        rate = f"{done / t.best / 1e9:>9.0f}{done / t.best / peak:>9.0%}" if peak else ""
        print(f"{name:28}{t.best:>10.3f}{t.median:>10.3f}{t.cpu_best:>12.2f}{t.cpu_median:>14.2f}{ratio:>{ratio_width}}{rate}")
    if peak:
        libraries = ", ".join(f"{lib} {rate / 1e9:.0f}" for lib, rate in timings.gemm_peak.items())
        floor = timings.flops / peak
        versus = f" = {floor / ref.best:.2f}x {reference}'s best" if ref is not None else ""
        print(f"floor: {timings.flops / 1e12:.3f} TFLOP per call (the reference's count) at this machine's fp32 "
              f"GEMM peak {peak / 1e9:.0f} GFLOP/s (best matmul: {libraries}) take {floor:.3f} s{versus}")
        for name, done in timings.work.items():
            print(f"{name} does {done / 1e12:.3f} TFLOP per call ({done / timings.flops:.0%} of the reference's; "
                  f"its own count, used for its GFLOP/s), so the floor does not bound it")
    others = "" if timings.others is None else f", other processes used {timings.others:.2f} cores"
    quiet = "quiet" if timings.quiet else (f"NOT quiet (load before >= {QUIET_LOAD} or other processes >= "
                                           f"{QUIET_OTHERS} cores): figures not quotable")
    quiet += others
    print(f"{repeats} interleaved calls each; load average {timings.load_before:.2f} before, "
          f"{timings.load_after:.2f} after ({quiet}){'; ' + note if note else ''}")

