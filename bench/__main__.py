"""Run every benchmark the project has and print their tables.

    .venv/bin/python -m bench            # all of them
    .venv/bin/python -m bench translator # only bench/bench_translator.py (names match substrings)
    .venv/bin/python -m bench wan        # a family's benches: every family name selects its DiT bench
    .venv/bin/python -m bench --list ltx # the names a run would take, without running them

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


def bench_names() -> list[str]:
    """Every `bench/bench_*.py` module name, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))


def select(names: list[str], patterns: list[str]) -> list[str]:
    """The names containing any of `patterns` (all of them when none is given)."""
    return [n for n in names if not patterns or any(p in n for p in patterns)]


def main(argv: list[str]) -> int:
    listing = "--list" in argv
    patterns = [a for a in argv if a != "--list"]
    names = bench_names()
    wanted = select(names, patterns)
    if not wanted:
        print(f"no benchmark matches {patterns}; have: {', '.join(names)}", file=sys.stderr)
        return 2
    if listing:
        print("\n".join(wanted))
        return 0
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    for name in wanted:
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
