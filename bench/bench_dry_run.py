"""Every stage the dry run builds, at native size and full depth: XLA's bytes per device beside the planner's.

For each model and layout (the planner's choice for 4 x 30.75 GiB, the seeds' TPU v4 chip, and 8 x 80 GiB; the
seeds' own layout where they name one) and each weights dtype, one process compiles every stage on fake CPU
devices with a fresh persistent compile cache (cold), and a second process compiles the same stages from that
cache (warm). Printed per stage: XLA's total bytes per device (arguments + outputs + temporaries, donated
buffers once), the planner's figure, their ratio, and the compile seconds cold and warm. The seeds' measured
whole-run peak per chip is printed beside each model for reference (their runs: TPU v4, bf16, flash attention;
these compiles: CPU, the blockwise kernel), not as an expectation.

    python -m bench dry_run                 # the whole table (minutes; run it on a quiet machine)
    python -m bench.bench_dry_run --worker MODEL DEVICES GIB DTYPE CACHE [DP TP SP [CHUNK]]   # one process
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

# the seeds' measured peak per chip (GB), from their post-mortem; None where no dry run builds the family yet
SEEDS = {
    "cosmos3-nano": ("Cosmos3 Nano", 29.5),
    "hunyuanvideo-1.5-720p-t2v": ("HunyuanVideo-1.5 720p", 30.3),
    "cogvideox1.5-5b": ("CogVideoX1.5 SP=4", 31.5),
    "wan2.1-t2v-14b": ("Wan2.1 14B 720p offload", 23.0),
    "wan2.1-t2v-1.3b": (None, None),
}
# (dp, tp, sp[, offload chunk]) the seeds ran (Wan2.1 14B's is not stated: sequence parallel with chunk-1 offload)
SEED_LAYOUTS = {"cogvideox1.5-5b": (1, 1, 4), "wan2.1-t2v-14b": (1, 1, 4, 1)}
TARGETS = ((4, 30.75), (8, 80.0))
DTYPES = ("bfloat16", "float32")


def worker(model: str, devices: int, gib: float, dtype: str, cache: str, layout: tuple[int, ...] | None) -> None:
    """One process: compile the stages and print one JSON line per stage."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from vidax.zoo.dry_run import dry_run
    from vidax.zoo.pipeline import GenerateOptions
    from vidax.zoo.planner import GIB, Layout, plan
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.runtime import configure_compile_cache

    configure_compile_cache(True, cache, min_compile_secs=0)
    options = GenerateOptions(model=model, prompt="", dtype=dtype)
    family = make_pipeline(model, options)
    if layout is None:
        _, chosen = plan(family.memory_job(options), devices, int(gib * GIB))
        if chosen is None:
            print(json.dumps({"error": "nothing fits"}))
            return
        layout = chosen[0]
    else:
        layout = Layout(*layout)
    result = dry_run(family, options, layout, devices, int(gib * GIB))
    for s in result.stages:
        print(json.dumps({"layout": layout.describe(), "size": result.size, "stage": s.stage, "xla": s.total,
                          "planned": s.planned, "seconds": s.compile_seconds}), flush=True)


def _run(model: str, devices: int, gib: float, dtype: str, cache: str, layout) -> list[dict]:
    command = [sys.executable, "-m", "bench.bench_dry_run", "--worker", model, str(devices), str(gib), dtype, cache,
               *(map(str, layout) if layout else ())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        return [{"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _rows(model: str, devices: int, gib: float, dtype: str, layout) -> list[tuple]:
    with tempfile.TemporaryDirectory() as cache:
        cold = _run(model, devices, gib, dtype, cache, layout)
        warm = _run(model, devices, gib, dtype, cache, layout)
    if "error" in cold[0]:
        return [(f"{devices} x {gib:g}", dtype, cold[0]["error"])]
    rows = []
    for first, second in zip(cold, warm):
        ratio = f"{first['planned'] / first['xla']:.2f}" if first["planned"] else "-"
        rows.append((f"{devices} x {gib:g} {first['layout']}", dtype, first["stage"], f"{first['xla'] / 2**30:.2f}",
                     f"{(first['planned'] or 0) / 2**30:.2f}", ratio, f"{first['seconds']:.1f}",
                     f"{second.get('seconds', float('nan')):.1f}"))
    return rows


def main() -> None:
    print(f"{'layout':<42}{'dtype':<10}{'stage':<26}{'XLA GiB':>9}{'planner':>9}{'ratio':>7}{'cold s':>8}{'warm s':>8}")
    for model, (seed, measured) in SEEDS.items():
        reference = f" (seeds: {seed}, {measured} GB per chip measured)" if seed else ""
        print(f"\n{model}{reference}", flush=True)
        layouts = [(d, g, None) for d, g in TARGETS]
        if model in SEED_LAYOUTS:
            layouts.append((4, 30.75, SEED_LAYOUTS[model]))
        for devices, gib, layout in layouts:
            for dtype in DTYPES:
                for row in _rows(model, devices, gib, dtype, layout):
                    print("".join(f"{str(c):<{w}}" if i < 3 else f"{str(c):>{w}}"
                                  for i, (c, w) in enumerate(zip(row, (42, 10, 26, 9, 9, 7, 8, 8)))), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        model, devices, gib, dtype, cache, *layout = sys.argv[2:]
        worker(model, int(devices), float(gib), dtype, cache, tuple(map(int, layout)) or None)
    else:
        main()
