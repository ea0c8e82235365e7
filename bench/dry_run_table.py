"""The dry run's full table: every registry model at its native size, cold and warm compiles, one JSON line per stage.

`run_table(out, models)` runs `bench_dry_run`'s worker in a fresh process per (model, devices x GiB, dtype), each
with a fresh compile cache folder (cold), then in a second fresh process from the cache the first left (warm), and
appends the stages to `out` (a rerun skips what `out` already has);
`format_table(out)` turns the lines into the markdown table docs/DRY_RUN.md quotes. Memory figures are
deterministic (XLA's buffer assignment); compile seconds depend on the machine's load, printed with each row.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_dry_run import SEEDS, TARGETS, cold_and_warm
from bench.protocol import load_average

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
