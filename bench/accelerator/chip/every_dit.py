"""Every registered family's DiT step at its native size on one device: ms per block, MFU, attention share, XLA's
temporaries and the compile, in one table.

The programs are the dry run's own (`dit_programs`: nothing here knows a family, so a model the dry run builds is
a model this bench times): the step at depth 1 (one block of each group) and at depth 0 (embed and head alone),
one block = t(1) - t(0), the native step estimated as t(0) + depth x block (single-group DiTs); FLOPs from the
jaxpr with attention traced as XLA products (so MFU counts attention too); each distinct attention call of the
block alone for the share; XLA's memory analysis of the depth-1 program (what `vidax-gen MODEL --dry-run` reports
for it). The attention kernel and blocks are the table's (`vidax.zoo.compute.kernels.tpu_blocks`): nothing is
timed while a program is traced.

The models run in groups (`GROUPS`), each group in one process that compiles all its programs at once in a
thread pool and then runs them one model at a time, smallest first: one group fits one 10-minute call of a
v5e host (`scripts/bench_tpu.sh dits-N`). Each model's row is a JSON file written as it is measured, so a cut run
keeps what it measured; the parent starts a fresh process for the models a crashed one did not reach.

    python -m bench.accelerator.chip.every_dit all --out-dir OUT [--group wan | --models a,b] [--budget 540]
    python -m bench.accelerator.chip.every_dit one MODEL[@WxHxF] --out JSON
    python -m bench.accelerator.chip.every_dit table OUT          # the markdown table from OUT/dit-*.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.accelerator.chip import dit_programs
from bench.accelerator.chip.dit_programs import count_flops, file_name, jaxpr_flops  # noqa: F401 (the bench's API)

# The table: every family at its native size (Wan2.1-14B and HunyuanVideo-1.5 at 480p and 720p, the sizes
# of their targets), in groups that each fit one device call. `model@WxHxF` overrides the native size; `+NAME=VALUE`
# sets a variable while the model is traced (Wan2.1-14B 480p with heads-major q/k/v, the layout the planner takes at
# 720p, beside the token-major one it takes at 480p).
GROUPS = {
    "wan": ("wan2.1-t2v-1.3b", "wan2.1-vace-1.3b", "wan2.2-ti2v-5b", "wan2.1-t2v-14b@832x480x81",
            "wan2.1-t2v-14b@832x480x81+VIDAX_HEADS_MAJOR=1", "wan2.1-t2v-14b", "wan2.2-t2v-a14b"),
    "hunyuan-cogvideox": ("cogvideox-5b", "hunyuanvideo-1.5", "cogvideox1.5-5b", "hunyuanvideo",
                          "hunyuanvideo-1.5-720p-t2v"),
    "ltx-cosmos": ("ltx-video-2b", "cosmos-predict2.5-2b", "cosmos3-nano", "ltx-2", "ltx-video-13b",
                   "cosmos-predict2.5-14b"),
}
MODELS = tuple(spec for group in GROUPS.values() for spec in group)
GROUPS["toy"] = ("wan-tiny", "wan-tiny@64x64x9")  # the CPU check of the chip script (`TOY=1`)
WORKERS = 4  # compiles at once: 13 host cores, about 2-3 busy per XLA compile, 2-4 GB of host memory each


def measure(spec: str, repeats: int = 2, out: Path | None = None) -> dict:
    """One model through the three phases in this process (tests, and `one`)."""
    row = dit_programs.measure_group([spec], None, repeats, workers=1)[0]
    if out is not None:
        out.write_text(json.dumps(row, indent=1, default=str))
    return row


# --- the table ------------------------------------------------------------------------------------


def table(out_dir: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(out_dir.glob("dit-*.json"))]
    warm_file = out_dir / "warm.json"
    warm = {r["model"]: r for r in json.loads(warm_file.read_text())} if warm_file.exists() else {}
    gib = lambda n: "-" if n is None else f"{n / 2**30:.2f}"  # noqa: E731
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    seconds = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = ["| model | size | ms/block | block MFU | attention share | MFU outside attention | step (est.) | "
             "step MFU | XLA temporaries, 1 block (GiB) | XLA arguments (GiB) | compile cold / warm (s) | "
             "trace + lower (s) | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one = r.get("runs", {}).get("1")
        if one is None:
            lines.append(f"| {r['spec']} | {r.get('size', '-')} | - | - | - | - | - | - | - | - | - | - | "
                         f"{r.get('error', '?')[:160]} |")
            continue
        w = warm.get(r["spec"], {}).get("warm_compile_s")
        step = "-" if "step_ms_estimate" not in r else f"{r['step_ms_estimate'] / 1e3:.2f} s"
        block = "-" if "block_ms" not in r else f"{r['block_ms']:.1f}"
        groups = r.get("depths", {})
        note = r.get("error", "") or ("one block of each group: " + ", ".join(f"{k} x{v}" for k, v in groups.items())
                                      if len(groups) > 1 else f"{next(iter(groups.values()), '?')} blocks")
        beside, phase = one.get("compiled_beside", 1), r.get("compile_phase", {})
        if beside > 1:
            note += (f"; compiled beside up to {beside - 1} others (the group's {phase.get('programs', '?')} programs: "
                     f"{seconds(phase.get('wall_s'))} s, {seconds(phase.get('cpu_s'))} s of CPU)")
        lines.append(
            f"| {r['model']} | {r['size']} | {block} | {pct(r.get('block_mfu'))} | "
            f"{pct(r.get('attention_share'))} | {pct(r.get('outside_attention_mfu'))} | {step} | "
            f"{pct(r.get('step_mfu_estimate'))} | {gib(one['xla_temp'])} | {gib(one['xla_argument'])} | "
            f"{one['compile_s']:.1f} / {seconds(w)} | "
            f"{seconds(one.get('lower_s'))} | {note} |")
    return "\n".join(lines)


# --- the command ----------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"[every_dit {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_all(specs: list[str], out_dir: Path, budget: float, workers: int) -> None:
    """The models in a child process (one group); if it dies with models not reached, a fresh child for those,
    while the budget lasts. Then the table, printed and written beside the rows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, VIDAX_CACHE_DIR=str(out_dir.parent / (out_dir.name + "-cache")))
    deadline = time.time() + budget
    left_to_do = list(specs)
    attempt = 0
    while left_to_do and deadline - time.time() > 60:
        attempt += 1
        log = out_dir / f"group-{attempt}.log"
        cmd = [sys.executable, "-m", "bench.accelerator.chip.every_dit", "group", *left_to_do, "--out-dir",
               str(out_dir), "--workers", str(workers)]
        _log(f"process {attempt}: {', '.join(left_to_do)}")
        try:
            with log.open("w") as sink:
                code = subprocess.run(cmd, env=env, timeout=deadline - time.time(), stdout=sink,
                                      stderr=subprocess.STDOUT).returncode
            why = None if code == 0 else f"exit code {code}"
        except subprocess.TimeoutExpired:
            why = f"cut by the budget ({budget:.0f} s)"
        done = {spec for spec in left_to_do if (out_dir / file_name(spec)).exists()}
        for spec in left_to_do:
            if spec not in done and why:
                row = {"spec": spec, "model": spec, "error": why}
                (out_dir / file_name(spec)).write_text(json.dumps(row, indent=1))
        _log(f"process {attempt}: {why or 'ok'}; {len(done)} of {len(left_to_do)} rows")
        if why is None or "budget" in why:
            break
        left_to_do = [s for s in left_to_do if s not in done]
    text = table(out_dir)
    (out_dir / "every_dit.md").write_text(text + "\n")
    print(text, flush=True)


def warm_compiles(specs: list[str]) -> list[dict]:
    """Every model's depth-1 program compiled again in this process, from the persistent cache the runs filled."""
    rows = []
    for spec in specs:
        try:
            model = dit_programs.plan(spec)
            one = model.programs["1"]
            dit_programs._compile(one)
            rows.append({"model": spec, "warm_lower_s": one.lower_s, "warm_compile_s": one.compile_s})
        except Exception as error:  # noqa: BLE001 - a model that failed its run fails here too; keep going
            rows.append({"model": spec, "error": f"{type(error).__name__}: {str(error)[:300]}"})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("one")
    one.add_argument("spec")
    one.add_argument("--out", required=True)
    one.add_argument("--repeats", type=int, default=3)
    group = sub.add_parser("group", help="the three phases over these models in this process")
    group.add_argument("specs", nargs="+")
    group.add_argument("--out-dir", required=True)
    group.add_argument("--repeats", type=int, default=3)
    group.add_argument("--workers", type=int, default=WORKERS)
    every = sub.add_parser("all")
    every.add_argument("--out-dir", required=True)
    every.add_argument("--group", choices=sorted(GROUPS), default=None)
    every.add_argument("--models", default=None, help="comma-separated; default: the group's, else every model")
    every.add_argument("--budget", type=float, default=540)
    every.add_argument("--workers", type=int, default=WORKERS)
    warm = sub.add_parser("warm")
    warm.add_argument("specs", nargs="+")
    warm.add_argument("--out", required=True)
    show = sub.add_parser("table")
    show.add_argument("out_dir")
    args = parser.parse_args(argv)
    if args.command in ("one", "group", "warm"):
        from vidax.zoo.compute.runtime import configure_compile_cache

        configure_compile_cache(True)
    if args.command == "one":
        try:
            row = measure(args.spec, args.repeats, Path(args.out))
        except Exception as error:  # noqa: BLE001 - the table says what stopped the model, in one line
            row = {"spec": args.spec, "model": args.spec, "error": f"{type(error).__name__}: {str(error)[:400]}"}
            Path(args.out).write_text(json.dumps(row, indent=1, default=str))
        print(json.dumps({k: v for k, v in row.items() if k not in ("runs", "attention_calls")}, default=str))
    elif args.command == "group":
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        dit_programs.measure_group(args.specs, out_dir, args.repeats, args.workers)
    elif args.command == "all":
        specs = (args.models.split(",") if args.models else list(GROUPS[args.group]) if args.group else list(MODELS))
        run_all([m for m in specs if m], Path(args.out_dir), args.budget, args.workers)
    elif args.command == "warm":
        rows = warm_compiles(args.specs)
        Path(args.out).write_text(json.dumps(rows, indent=1))
        print(json.dumps(rows))
    else:
        print(table(Path(args.out_dir)))


if __name__ == "__main__":
    main()
