"""The first-video table (`scripts/tpu_e2e.sh`): one model's cold and warm `vidax-gen` runs as README's row.

    python -m bench.accelerator.chip.e2e_table record --name cold --began EPOCH --code 0 --sidecar v.json \
        --time-log cold.log --json cold.json         # one process: its sidecar and /usr/bin/time's figures
    python -m bench.accelerator.chip.e2e_table table --model M --cold cold.json --warm warm.json \
        --markdown table.md --json e2e.json          # the row: stages, s/step, programs, first step, memory

"First step" is the time from the process's start (the shell's clock just before it) to the end of its first
denoise step (the sidecar's `moments`); "s/step" is the warm run's denoise stage over its steps (no compile in
it); "compiled" counts the programs each run compiled, with their seconds, and those it loaded from the cache.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

STAGES = ("load", "encode", "denoise", "decode", "write")


def record(args) -> dict:
    """One run's figures from its sidecar and /usr/bin/time's report."""
    text = Path(args.time_log).read_text(errors="replace") if Path(args.time_log).exists() else ""
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    row = {"name": args.name, "exit_code": args.code, "host_rss_bytes": int(rss.group(1)) * 1024 if rss else None,
           "wall_s": _seconds(wall.group(1)) if wall else None}
    sidecar = Path(args.sidecar)
    if sidecar.exists():
        settings = json.loads(sidecar.read_text())
        first = settings.get("moments", {}).get("denoise first step")
        row.update(stages=settings.get("stage_seconds", {}), programs=settings.get("programs"),
                   memory=settings.get("memory_peaks"), layout=settings.get("layout_choice"),
                   steps=settings.get("steps"), size=f"{settings.get('width')}x{settings.get('height')}x"
                                                       f"{settings.get('frames')}",
                   first_step_s=None if first is None else first - args.began, version=settings.get("vidax_version"),
                   programs_by_stage=settings.get("programs_by_stage"), compile_ahead=settings.get("compile_ahead"),
                   resident_after_stage=settings.get("resident_after_stage"),
                   resident_parts_after_stage=settings.get("resident_parts_after_stage"),
                   moments_s={name: round(at - args.began, 2) for name, at in settings.get("moments", {}).items()})
        sampled = (row.get("memory") or {}).get("host_resident_sampled") or {}
        if "at" in sampled:  # the host's peak, as seconds from the process's start like `moments_s`
            sampled["at_s"] = round(sampled["at"] - args.began, 2)
    else:
        row["error"] = text.strip().splitlines()[-1] if text.strip() else "no sidecar"
    Path(args.json).write_text(json.dumps(row, indent=1))
    return row


def _seconds(clock: str) -> float:
    parts = [float(p) for p in clock.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def table(args) -> str:
    cold, warm = (json.loads(Path(p).read_text()) for p in (args.cold, args.warm))
    gib = lambda b: "-" if not b else f"{b / 2**30:.1f}"  # noqa: E731
    programs = lambda r: "-" if not r.get("programs") else (  # noqa: E731
        f"{r['programs']['compiled']} compiled, {r['programs']['loaded']} loaded ({r['programs']['seconds']:.0f} s)")
    warm_steps = warm.get("steps") or 0
    longest = lambda r: max([(r.get("programs") or {}).get("longest_s", 0.0),  # noqa: E731
                             *((r.get("compile_ahead") or {}).get("unit_s") or {}).values()])
    per_step = warm.get("stages", {}).get("denoise", 0) / warm_steps if warm_steps else None
    machine = cold.get("memory") or {}
    row = {
        "model": args.model, "size": cold.get("size"), "steps": cold.get("steps"), "layout": cold.get("layout"),
        "cold_stages_s": {s: round(cold.get("stages", {}).get(s, 0), 1) for s in STAGES},
        "cold_wall_s": cold.get("wall_s"), "warm_wall_s": warm.get("wall_s"), "warm_steps": warm_steps,
        "warm_stages_s": {s: round(warm.get("stages", {}).get(s, 0), 1) for s in STAGES},
        "s_per_step_warm": per_step, "programs_cold": cold.get("programs"), "programs_warm": warm.get("programs"),
        "longest_program_s_cold": longest(cold), "longest_program_s_warm": longest(warm),
        "first_step_s_cold": cold.get("first_step_s"), "first_step_s_warm": warm.get("first_step_s"),
        "device_peak_bytes": (cold.get("memory") or {}).get("device_bytes"),
        "host_rss_bytes": max(r.get("host_rss_bytes") or 0 for r in (cold, warm)),
        "chip": machine.get("device_kind"), "jax": machine.get("jax"), "exit_codes": [cold["exit_code"], warm["exit_code"]],
        # where the time to the first step goes, and what the host's peak held (anon: the runtime's own
        # buffers; file: mapped checkpoint pages), per run
        "moments_s": {"cold": cold.get("moments_s"), "warm": warm.get("moments_s")},
        "host_resident_sampled": {r["name"]: (r.get("memory") or {}).get("host_resident_sampled") for r in (cold, warm)},
    }
    Path(args.json).write_text(json.dumps(row, indent=1))
    stages = " / ".join(f"{row['cold_stages_s'][s]:.1f}" for s in STAGES)
    fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)  # noqa: E731
    line = (f"| {args.model} | {row['size']}, {row['steps']} steps | {row['layout']} | {stages} | "
            f"{fmt(row['cold_wall_s'])} | {fmt(row['warm_wall_s'])} ({warm_steps} steps) | {fmt(per_step, '{:.2f}')} | "
            f"{programs(cold)} / {programs(warm)} | {fmt(row['longest_program_s_cold'])} / "
            f"{fmt(row['longest_program_s_warm'])} | {fmt(row['first_step_s_warm'])} | "
            f"{gib(row['device_peak_bytes'])} | {gib(row['host_rss_bytes'])} |")
    header = ("| model | size, steps | layout | cold load / encode / denoise / decode / write, s | cold wall, s | "
              "warm wall, s | s/step warm | programs cold / warm | longest program cold / warm, s | "
              "first step after start (warm), s | peak HBM, GiB | host peak RSS, GiB |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|")
    text = f"{row['chip']}, jax {row['jax']}\n\n{header}\n{line}\n"
    Path(args.markdown).write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--name", required=True)
    rec.add_argument("--began", type=float, required=True)
    rec.add_argument("--code", type=int, required=True)
    rec.add_argument("--sidecar", required=True)
    rec.add_argument("--time-log", required=True)
    rec.add_argument("--json", required=True)
    tab = sub.add_parser("table")
    tab.add_argument("--model", required=True)
    tab.add_argument("--cold", required=True)
    tab.add_argument("--warm", required=True)
    tab.add_argument("--markdown", required=True)
    tab.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    if args.command == "record":
        print(json.dumps(record(args)))
    else:
        print(table(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
