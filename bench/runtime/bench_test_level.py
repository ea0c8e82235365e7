"""The test suite's XLA CPU flags: a compile-bound and a run-bound piece of it at level 0 with XLA's legacy
fusion emitters (the tests' flags), at level 0, and at the default level, interleaved, each call a fresh
process with the persistent compile cache off.

- compile-bound: `pytest tests/wan/test_pipeline.py` (tiny programs, each compiled about once);
- run-bound: the semantic test's 96 generations of the embedded `wan-tiny` (its fixed sample of the grid,
  `tests/embedded/grid.py`).

tests/backend_level.py explains what the tests do with the answer.

    python -m bench.runtime.bench_test_level [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from bench.protocol import announce_load, interleaved, print_table

ROOT = Path(__file__).resolve().parents[2]
DEVICES = "--xla_force_host_platform_device_count=8"
LEVELS = {"level 0, legacy fusion emitters (the tests' flags)":
          f"{DEVICES} --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false",
          "level 0": f"{DEVICES} --xla_backend_optimization_level=0", "default level": DEVICES}
GENERATIONS = ("import sys; sys.path[:0] = ['.']; from tests.embedded import grid; from bench.quality import tiny_folder; "
               "grid.generate(grid.fixed_sample(grid.held_out(tiny_folder())))")
PIECES = {"pytest tests/wan/test_pipeline.py": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/wan/test_pipeline.py"],
          "the semantic test's 96 generations": ["-c", GENERATIONS]}


def _run(arguments: list[str], flags: str):
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "VIDAX_TEST_COMPILE_CACHE": "off",
           "VIDAX_NO_COMPILE_CACHE": "1", "VIDAX_NO_CPU_TUNING": "1", "HF_HUB_OFFLINE": "1"}
    return lambda: subprocess.run([sys.executable, *arguments], cwd=ROOT, env=env, check=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    announce_load("bench_test_level")
    for piece, arguments in PIECES.items():
        timings = interleaved({name: _run(arguments, flags) for name, flags in LEVELS.items()},
                              repeats=args.repeats, warmup=0)
        print_table(piece, timings, reference="default level", note="fresh process per call, compile cache off")


if __name__ == "__main__":
    main()
