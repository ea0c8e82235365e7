"""Choosing a layout with and without the planner's shapes kept on disk (`compute.shape_memo`): one process each,
alternating, over a fresh compile-cache folder ("traced": the first process, which traces and keeps) and over that
folder ("kept": a later process, which reads them). Wan2.1-1.3B at 480x832x81 by default; no weights are read.

    python -m bench.bench_plan_start [--model wan2.1-t2v-1.3b] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench.protocol import announce_load

CHILD = """
import json, sys, time
from vidax.zoo.compute.runtime import configure_compile_cache
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.plan.layouts import plan_layouts
from vidax.zoo.registry import make_pipeline
configure_compile_cache(True)
options = GenerateOptions(model=sys.argv[1], prompt="", height=480, width=832, frames=81)
family = make_pipeline(options.model, options)
start = time.perf_counter()
planned = plan_layouts(family, options)
print(json.dumps({"seconds": time.perf_counter() - start, "layout": planned.chosen[0].describe()}))
"""


def _plan(model: str, cache: str) -> dict:
    env = {**os.environ, "VIDAX_CACHE_DIR": cache}
    env.pop("VIDAX_NO_COMPILE_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, model], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="wan2.1-t2v-1.3b")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    announce_load("planning with and without kept shapes")
    times: dict[str, list[float]] = {"traced": [], "kept": []}
    layouts = set()
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            for name in ("traced", "kept"):  # the kept run needs the traced run's folder first
                row = _plan(args.model, cache)
                times[name].append(row["seconds"])
                layouts.add(row["layout"])
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.3f} s ({', '.join(f'{v:.3f}' for v in values)})")
    print(f"layouts chosen: {sorted(layouts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
