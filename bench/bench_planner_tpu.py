"""The DiT step's memory on XLA's TPU compiler without a chip, beside the planner's figure: every registry model
at its native size, full depth, bf16, in the layout the planner picks for the target (its first candidate where
none fits), one process per model (libtpu is loaded once per process).

    VIDAX_LIBTPU=.venv/libtpu python -m bench.bench_planner_tpu [--target v5e] [--out rows.jsonl] [MODEL ...]

Each row: the layout, XLA's arguments / outputs / temporaries and total per device (MiB), the planner's figure
and their ratio, or the compiler's error (a program whose temporaries exceed the chip's memory fails to compile:
its figure is in the message). A compile takes about a minute per model on two cores; rows already in `--out`
are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.protocol import announce_load

MODELS = ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.1-vace-1.3b", "cogvideox1.5-5b", "hunyuanvideo-1.5-480p-t2v",
          "hunyuanvideo", "ltx-video-13b", "ltx-2", "cosmos-predict2.5-2b", "cosmos3-nano")
MIB = 2**20


def worker(model: str, target_name: str) -> dict:
    from vidax.zoo.compute.target import compiling_for, parse_target
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.plan.dry_run import dry_run
    from vidax.zoo.plan.layouts import plan_layouts
    from vidax.zoo.registry import make_pipeline

    target = parse_target(target_name)
    options = GenerateOptions(model=model, prompt="")
    family = make_pipeline(model, options)
    row: dict = {"model": model, "target": target.name}
    with compiling_for(target) as targeted:
        planned = plan_layouts(family, options, len(targeted), target.chip.device_bytes)
        layout = planned.chosen[0] if planned.chosen else planned.rows[0][0]
        row.update(layout=layout.describe(), planner_fits=bool(planned.chosen))
        start = time.perf_counter()
        try:
            (step,) = dry_run(family, options, layout, planned.devices, planned.device_bytes, targeted=targeted,
                              stages=("dit",)).stages
        except Exception as err:  # noqa: BLE001 (the compiler's own error is the row: an out-of-memory names its need)
            message = str(err).splitlines()[0]
            need = re.search(r"HLO temporaries \(([\d.]+)G\)", message)
            row.update(error=message[:300], xla_temp_gb=float(need.group(1)) if need else None)
            from vidax.zoo.compute.planner import predict

            prediction = predict(family.memory_job(options), layout)
            row["planner_mib"] = round((prediction.weights + prediction.activations) / MIB)
            return row
    row.update(stage=step.stage, argument_mib=round(step.argument / MIB), output_mib=round(step.output / MIB),
               temp_mib=round(step.temp / MIB), xla_mib=round(step.total / MIB),
               planner_mib=None if step.planned is None else round(step.planned / MIB),
               ratio=None if step.ratio is None else round(step.ratio, 3),
               compile_s=round(time.perf_counter() - start, 1))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--target", default="v5e")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.target)))
        return 0
    announce_load("the DiT step on XLA's TPU compiler")
    done = set()
    if args.out and args.out.exists():
        done = {json.loads(line)["model"] for line in args.out.read_text().splitlines() if line.strip()}
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.setdefault("VIDAX_NO_COMPILE_CACHE", "1")
    for model in args.models:
        if model in done:
            continue
        result = subprocess.run([sys.executable, "-m", "bench.bench_planner_tpu", "--worker", model,
                                 "--target", args.target], capture_output=True, text=True, env=env)
        lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"model": model, "error": result.stderr.strip()[-300:]}
        print(json.dumps(row), flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
