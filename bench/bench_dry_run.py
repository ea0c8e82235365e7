"""Every stage the dry run builds, at native size and full depth: XLA's bytes per device beside the planner's,
and the compile seconds cold and warm.

For each model and layout (the planner's choice for 4 x 30.75 GiB, the seeds' TPU v4 chip, and 8 x 80 GiB; the
seeds' own layout where they name one) and each weights dtype, one process compiles every stage on fake CPU
devices with a fresh persistent compile cache (cold), and a second process compiles the same stages from that
cache (warm: each stage's executable loaded serialized, `vidax.zoo.plan.dry_run_cache`, without tracing). Printed per
stage: XLA's total bytes per device (arguments + outputs + temporaries, donated buffers once), the planner's
figure, their ratio, and the compile seconds cold and warm; then the warm run's share of the cold one, with the
load average as the pair started (both processes run under the same load, one after the other). The seeds'
measured whole-run peak per chip is printed beside each model for reference (their runs: TPU v4, bf16, flash
attention; these compiles: CPU, the blockwise kernel), not as an expectation.

    python -m bench dry_run                 # the seeds' models (minutes; run it on a quiet machine)
    python -m bench.bench_dry_run --warm MODEL [DEVICES GIB DTYPE]    # cold vs warm for one model
    python -m bench.bench_dry_run --table OUT.jsonl [MODEL ...]       # every registry model (default), cold
        and warm, 4 x 30.75 and 8 x 80 GiB, both dtypes (--dtype float32: one), one JSON line per stage appended to OUT (a rerun skips the
        rows OUT has); --format OUT.jsonl prints it as a markdown table, --summary OUT.jsonl one row per run
    python -m bench.bench_dry_run --worker MODEL DEVICES GIB DTYPE CACHE [DP TP SP [CHUNK]]   # one process
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.protocol import announce_load, load_average

# the seeds' measured peak per chip (GB), from their post-mortem; None where no dry run builds the family yet
SEEDS = {
    "ltx-video-13b": ("LTX-Video 13B", 15.3),
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
    """One process: compile the stages and print one JSON line per stage, then the dry run's wall seconds."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from vidax.zoo.plan.dry_run import dry_run
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.planner import GIB, Layout, plan
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.compute.runtime import configure_compile_cache

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
    start = time.perf_counter()
    result = dry_run(family, options, layout, devices, int(gib * GIB))
    for s in result.stages:
        print(json.dumps({"layout": layout.describe(), "size": result.size, "stage": s.stage, "xla": s.total,
                          "planned": s.planned, "seconds": s.compile_seconds, "loaded": s.loaded}), flush=True)
    print(json.dumps({"wall": time.perf_counter() - start}), flush=True)


def _run(model: str, devices: int, gib: float, dtype: str, cache: str, layout) -> tuple[list[dict], float | None]:
    """One fresh process's stage rows and the wall seconds of its dry run (None when it failed)."""
    command = [sys.executable, "-m", "bench.bench_dry_run", "--worker", model, str(devices), str(gib), dtype, cache,
               *(map(str, layout) if layout else ())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        return [{"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}], None
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    wall = next((line["wall"] for line in lines if "wall" in line), None)
    return [line for line in lines if "wall" not in line], wall


def cold_and_warm(model: str, devices: int, gib: float, dtype: str, layout) -> tuple[list, list, float | None,
                                                                                     float | None]:
    """The same stages compiled by two fresh processes, one after the other: the first with a fresh (empty)
    cache folder, the second from what the first left there."""
    with tempfile.TemporaryDirectory() as cache:
        cold, cold_wall = _run(model, devices, gib, dtype, cache, layout)
        warm, warm_wall = _run(model, devices, gib, dtype, cache, layout)
    return cold, warm, cold_wall, warm_wall


def _rows(model: str, devices: int, gib: float, dtype: str, layout) -> list[tuple]:
    cold, warm, cold_wall, warm_wall = cold_and_warm(model, devices, gib, dtype, layout)
    if "error" in cold[0]:
        return [(f"{devices} x {gib:g}", dtype, cold[0]["error"])]
    rows = []
    for first, second in zip(cold, warm):
        ratio = f"{first['planned'] / first['xla']:.2f}" if first["planned"] else "-"
        loaded = " (loaded)" if second.get("loaded") else ""
        rows.append((f"{devices} x {gib:g} {first['layout']}", dtype, first["stage"], f"{first['xla'] / 2**30:.2f}",
                     f"{(first['planned'] or 0) / 2**30:.2f}", ratio, f"{first['seconds']:.1f}",
                     f"{second.get('seconds', float('nan')):.1f}{loaded}"))
    cold_s, warm_s = (sum(row.get("seconds", float("nan")) for row in rows) for rows in (cold, warm))
    rows.append((f"{devices} x {gib:g}", dtype, "all stages: warm / cold", "", "", f"{warm_s / cold_s:.1%}",
                 f"{cold_s:.1f}", f"{warm_s:.1f}"))
    if cold_wall and warm_wall:
        rows.append((f"{devices} x {gib:g}", dtype, "whole dry run: warm / cold", "", "",
                     f"{warm_wall / cold_wall:.1%}", f"{cold_wall:.1f}", f"{warm_wall:.1f}"))
    return rows


COLUMNS = (("layout", 42), ("dtype", 10), ("stage", 28), ("XLA GiB", 9), ("planner", 9), ("ratio", 7),
           ("cold s", 8), ("warm s", 16))


def _print_row(row: tuple) -> None:
    print("".join(f"{str(c):<{w}}" if i < 3 else f"{str(c):>{w}}" for i, (c, (_, w)) in enumerate(zip(row, COLUMNS))),
          flush=True)


def warm_start(model: str, devices: int = 4, gib: float = 30.75, dtype: str = "bfloat16") -> None:
    """Cold against warm for one model, side by side, with the load as the pair starts."""
    announce_load(f"dry run of {model}, cold then warm")
    _print_row(tuple(name for name, _ in COLUMNS))
    for row in _rows(model, devices, gib, dtype, None):
        _print_row(row)


def main() -> None:
    announce_load("dry run bench")
    _print_row(tuple(name for name, _ in COLUMNS))
    for model, (seed, measured) in SEEDS.items():
        reference = f" (seeds: {seed}, {measured} GB per chip measured)" if seed else ""
        print(f"\n{model}{reference}", flush=True)
        layouts = [(d, g, None) for d, g in TARGETS]
        if model in SEED_LAYOUTS:
            layouts.append((4, 30.75, SEED_LAYOUTS[model]))
        for devices, gib, layout in layouts:
            for dtype in DTYPES:
                announce_load(f"{model} {devices} x {gib:g} {dtype}")
                for row in _rows(model, devices, gib, dtype, layout):
                    _print_row(row)



# --- the full table ------------------------------------------------------------------------------------------
# The dry run's full table: every registry model at its native size, cold and warm compiles, one JSON line per stage.
#
# `run_table(out, models)` runs `worker` in a fresh process per (model, devices x GiB, dtype), each
# with a fresh compile cache folder (cold), then in a second fresh process from the cache the first left (warm), and
# appends the stages to `out` (a rerun skips what `out` already has);
# `format_table(out)` turns the lines into the markdown table docs/DRY_RUN.md quotes. Memory figures are
# deterministic (XLA's buffer assignment); compile seconds depend on the machine's load, printed with each row.


TABLE_DTYPES = ("bfloat16", "float32")


def _done(out: Path) -> set[tuple]:
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["model"], r["devices"], r["gib"], r["dtype"]) for r in rows}


def run_table(out: str, models: list[str], dtypes: tuple[str, ...] = TABLE_DTYPES) -> None:
    from vidax.zoo.registry import registered_models

    path = Path(out)
    seeds_first = [m for m in SEEDS if m in registered_models()]
    models = models or seeds_first + [m for m in registered_models() if m not in seeds_first]
    done = _done(path)
    for dtype in dtypes:
        for model in models:
            for devices, gib in TARGETS:
                if (model, devices, gib, dtype) in done:
                    continue
                load = load_average()
                stages, warm, wall, warm_wall = cold_and_warm(model, devices, gib, dtype, None)
                with path.open("a") as f:
                    for stage, second in zip(stages, warm + [{}] * len(stages)):
                        row = {"model": model, "devices": devices, "gib": gib, "dtype": dtype, "load": load,
                               "wall": wall, "warm_wall": warm_wall, **stage,
                               "warm_seconds": second.get("seconds"), "warm_loaded": second.get("loaded")}
                        f.write(json.dumps(row) + "\n")
                print(model, devices, gib, dtype, "done", flush=True)


def format_table(out: str) -> str:
    rows = [json.loads(line) for line in Path(out).read_text().splitlines() if line.strip()]
    lines = ["| model | devices x GiB | dtype | layout | stage | XLA GiB | planner GiB | planner / XLA | compile s "
             "(load) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| `{r['model']}` | {r['devices']} x {r['gib']:g} | {r['dtype']} | - | {r['error']} "
                         "| | | | |")
            continue
        planned = r["planned"] or 0
        ratio = f"{planned / r['xla']:.2f}" if planned else "-"
        lines.append(f"| `{r['model']}` | {r['devices']} x {r['gib']:g} | {r['dtype']} | {r['layout']} | {r['stage']} "
                     f"| {r['xla'] / 2**30:.2f} | {planned / 2**30:.2f} | {ratio} | {r['seconds']:.1f} "
                     f"({r['load']:.1f}) |")
    return "\n".join(lines)



def format_summary(out: str) -> str:
    """One row per (model, devices x GiB, dtype): the layout, each kind of stage's XLA and planner GiB (the VAE's
    widest unit), the stages' compile seconds summed, cold and warm (from the first process's persistent cache;
    "-" for rows written before the table ran warm), and the load as the pair started; the seeds' measured
    per-chip peak where they give one."""
    rows = [json.loads(line) for line in Path(out).read_text().splitlines() if line.strip()]
    runs: dict[tuple, list[dict]] = {}
    for r in rows:
        runs.setdefault((r["model"], r["devices"], r["gib"], r["dtype"]), []).append(r)
    lines = ["| model | devices x GiB | dtype | layout | text encoder XLA / planner GiB | DiT step XLA / planner GiB "
             "| VAE widest unit XLA / planner GiB | compile s cold / warm (load) | seeds' measured peak per chip |",
             "|---|---|---|---|---|---|---|---|---|"]
    gib = lambda n: f"{n / 2**30:.1f}"  # noqa: E731
    for (model, devices, size, dtype), stages in runs.items():
        seed = SEEDS.get(model, (None, None))
        measured = f"{seed[1]} GB ({seed[0]})" if seed[0] else ""
        if "error" in stages[0]:
            lines.append(f"| `{model}` | {devices} x {size:g} | {dtype} | {stages[0]['error']} | | | | | {measured} |")
            continue
        kinds = {kind: [s for s in stages if s["stage"].startswith(kind)] for kind in ("text", "dit", "vae")}
        cell = lambda found: "-" if not found else (  # noqa: E731
            f"{gib(max(s['xla'] for s in found))} / {gib(max(s['planned'] or 0 for s in found))}")
        seconds = sum(s["seconds"] for s in stages)
        warm = [s.get("warm_seconds") for s in stages]
        warm_cell = "-" if None in warm else f"{sum(warm):.1f}"
        lines.append(f"| `{model}` | {devices} x {size:g} | {dtype} | {stages[0]['layout']} | {cell(kinds['text'])} "
                     f"| {cell(kinds['dit'])} | {cell(kinds['vae'])} | {seconds:.0f} / {warm_cell} "
                     f"({stages[0]['load']:.1f}) | {measured} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        model, devices, gib, dtype, cache, *layout = sys.argv[2:]
        worker(model, int(devices), float(gib), dtype, cache, tuple(map(int, layout)) or None)
    elif sys.argv[1:2] == ["--warm"]:
        model, *rest = sys.argv[2:]
        warm_start(model, *(kind(value) for kind, value in zip((int, float, str), rest)))
    elif sys.argv[1:2] == ["--table"]:
        out, *models = sys.argv[2:]
        dtypes = TABLE_DTYPES
        if models[:1] == ["--dtype"]:
            dtypes, models = (models[1],), models[2:]
        run_table(out, models, dtypes)
    elif sys.argv[1:2] == ["--format"]:
        print(format_table(sys.argv[2]))
    elif sys.argv[1:2] == ["--summary"]:
        print(format_summary(sys.argv[2]))
    else:
        main()
