"""Run every benchmark the project has and print their tables.

    .venv/bin/python -m bench            # all of them
    .venv/bin/python -m bench translator # only bench/bench_translator.py (names match substrings)

Each `bench/bench_*.py` defines `main()` that prints its own table (alternatives side by side in the
same run). Benchmarks are not tests: they print figures and never assert timings.
"""

from __future__ import annotations

import importlib
import pkgutil
import platform
import sys
import time

import bench


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    wanted = [n for n in names if not argv or any(a in n for a in argv)]
    if not wanted:
        print(f"no benchmark matches {argv}; have: {', '.join(names)}", file=sys.stderr)
        return 2
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    for name in wanted:
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
