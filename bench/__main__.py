"""Run every benchmark the project has and print their tables.

    .venv/bin/python -m bench            # all of them
    .venv/bin/python -m bench translator # only bench/bench_translator.py (names match substrings)
    .venv/bin/python -m bench wan        # a family's benches (bench_wan_*): a family name selects exactly its own
    .venv/bin/python -m bench --list ltx # the names a run would take, without running them
    .venv/bin/python -m bench --help     # this, and every family with its benches

Each family has a `bench/family/bench_<family>_dit.py` (its DiT forward against the reference); benches reach a family's
pieces only through `bench/families.py` (the registry), never by importing its folder.

Each bench (`bench/bench_*.py`, `bench/family/bench_<family>_*.py`, `bench/runtime/bench_*.py`) defines
`main()` that prints its own table (alternatives side by side in the same run). Benchmarks are not tests: they print figures and never assert timings.
"""

from __future__ import annotations

import importlib
import pkgutil
import platform
import sys
import time
from collections.abc import Collection

import bench


def bench_modules() -> dict[str, str]:
    """Every bench's name -> its module: `bench/bench_*.py` and `bench/<room>/bench_*.py` (`family/`: one
    family's benches; `runtime/`: benches of shared pieces)."""
    found = {}
    for m in pkgutil.walk_packages(bench.__path__, "bench."):
        name = m.name.rpartition(".")[2]
        if name.startswith("bench_"):
            found[name] = m.name
    return found


def bench_names() -> list[str]:
    """Every bench's module name (`bench_*`, wherever its room), sorted."""
    return sorted(bench_modules())


def family_names() -> list[str]:
    """Every family with a generator, as the registry names them."""
    from vidax.zoo.registry import registered_models

    return sorted({m.family for m in registered_models().values()})


def matches(name: str, pattern: str, families: Collection[str] = ()) -> bool:
    """A family name matches its own benches only (`bench_<family>_*`: `cosmos` not `bench_cosmos3_dit`);
    any other pattern is a substring of the name."""
    if pattern in families:
        return name.startswith(f"bench_{pattern}_")
    return pattern in name


def select(names: list[str], patterns: list[str], families: Collection[str] = ()) -> list[str]:
    """The names matching any of `patterns` (all of them when none is given)."""
    return [n for n in names if not patterns or any(matches(n, p, families) for p in patterns)]


def usage(names: list[str], families: list[str]) -> str:
    """The docstring, then each family's benches."""
    rows = [f"  {family:16} {' '.join(select(names, [family], families))}" for family in families]
    return __doc__ + "\nfamilies (python -m bench <family>):\n" + "\n".join(rows)


def main(argv: list[str]) -> int:
    modules = bench_modules()
    names, families = sorted(modules), family_names()
    if "--help" in argv or "-h" in argv:
        print(usage(names, families))
        return 0
    listing = "--list" in argv
    patterns = [a for a in argv if a != "--list"]
    wanted = select(names, patterns, families)
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
        importlib.import_module(modules[name]).main()
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
