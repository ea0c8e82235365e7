"""CPU choices measured on the machine, not assumed.

Some choices help one CPU and hurt another: running a large projection as row blocks of at most 1024 rows
(`layers.project`) made DiT-sized fp32 products 5-15% faster on an AMD EPYC machine and 3-9% slower on an
Intel Xeon with AMX. Such a choice is measured once per machine (`python -m vidax.zoo.cpu_tuning`, a few
seconds), stored in `cpu_tuning.json` beside the compile cache (`runtime.default_cache_dir()`'s parent),
keyed by the CPU model, core count and jax version, and read at trace time.

Order of precedence for each choice: the environment (`VIDAX_CPU_ROW_BLOCK`: a row count, or `off` for one
call), then the stored measurement for this machine, then the built-in default. With the compile cache
switched off (`VIDAX_NO_COMPILE_CACHE=1`, as the test suite runs) the stored file is not read, so runs are
reproducible from the code and the environment alone.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROW_BLOCK_ENV = "VIDAX_CPU_ROW_BLOCK"
FILE_NAME = "cpu_tuning.json"
OFF = ("off", "0", "none", "no")
MARGIN = 0.02  # row blocks are kept only when at least 2% faster than one call (timing noise)
SHAPES = ((3510, 3072, 3072), (7020, 1536, 1536))  # DiT projections: HunyuanVideo 1.0 and Wan 1.3B sized
REPEATS = 3


class TuningError(ValueError):
    """A malformed override (one line)."""


def tuning_file() -> Path:
    from vidax.zoo.runtime import default_cache_dir

    return default_cache_dir().parent / FILE_NAME


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`), else what `platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key() -> str:
    import jax

    return f"{cpu_model()} | {os.cpu_count()} cores | jax {jax.__version__}"


def _cache_enabled() -> bool:
    return os.environ.get("VIDAX_NO_COMPILE_CACHE", "").lower() not in ("1", "true", "yes")


@functools.lru_cache(maxsize=None)
def stored(path: Path | None = None) -> dict[str, Any]:
    """This machine's stored choices (empty when none, or when the compile cache is off)."""
    if not _cache_enabled():
        return {}
    file = path or tuning_file()
    try:
        table = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return dict(table.get(machine_key(), {}))


def parse_row_block(text: str) -> int | None:
    """`VIDAX_CPU_ROW_BLOCK`'s value: a positive row count, or off (one call)."""
    if text.strip().lower() in OFF:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise TuningError(f"{ROW_BLOCK_ENV}={text!r}: give a positive row count, or 'off' for one matmul call")
    return value


def row_block(default: int) -> int | None:
    """The most rows one CPU matmul call takes (`layers.project`); None: every product in one call."""
    given = os.environ.get(ROW_BLOCK_ENV)
    if given:
        return parse_row_block(given)
    choices = stored()
    return choices["row_block"] if "row_block" in choices else default


def choose_row_block(one_call: float, blocked: float, block: int) -> int | None:
    """Row blocks when they beat one call by `MARGIN` (seconds summed over the shapes measured)."""
    return block if blocked < (1 - MARGIN) * one_call else None


def measure_row_block(block: int, shapes=SHAPES, repeats: int = REPEATS,
                      clock: Callable[[], float] = time.perf_counter) -> tuple[int | None, float, float]:
    """Time one call against row blocks of `block` on DiT-sized fp32 products (interleaved, best of
    `repeats` each); returns the choice and the two summed times."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.zoo import layers

    rng = np.random.default_rng(0)
    totals = {"one call": 0.0, "row blocks": 0.0}
    for rows, k, n in shapes:
        x = jnp.asarray(rng.standard_normal((rows, k), dtype=np.float32))
        w = jnp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        with forced_row_block(block):
            blocked = jax.jit(lambda a, b: layers.project(a, b)).lower(x, w).compile()
        units = {"one call": jax.jit(jnp.dot).lower(x, w).compile(), "row blocks": blocked}
        best = {name: float("inf") for name in units}
        for _ in range(repeats):
            for name, unit in units.items():
                start = clock()
                unit(x, w).block_until_ready()
                best[name] = min(best[name], clock() - start)
        for name in totals:
            totals[name] += best[name]
    return choose_row_block(totals["one call"], totals["row blocks"], block), totals["one call"], totals["row blocks"]


class forced_row_block:
    """Within the block, `row_block` answers `value` (the environment override, restored after)."""

    def __init__(self, value: int | None):
        self.value = value

    def __enter__(self):
        self.saved = os.environ.get(ROW_BLOCK_ENV)
        os.environ[ROW_BLOCK_ENV] = "off" if self.value is None else str(self.value)

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop(ROW_BLOCK_ENV, None)
        else:
            os.environ[ROW_BLOCK_ENV] = self.saved


def save(choices: dict[str, Any], path: Path | None = None) -> Path:
    """Store `choices` for this machine (other machines' entries kept) and forget the read-back copy."""
    file = path or tuning_file()
    try:
        table = json.loads(file.read_text())
    except (OSError, ValueError):
        table = {}
    table[machine_key()] = {**table.get(machine_key(), {}), **choices}
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_suffix(".tmp")
    temporary.write_text(json.dumps(table, indent=1, sort_keys=True))
    temporary.replace(file)  # nothing half-written
    stored.cache_clear()
    return file


def main() -> None:
    """`python -m vidax.zoo.cpu_tuning`: measure this machine's choices and store them."""
    from vidax.zoo import layers

    choice, whole, blocked = measure_row_block(layers.CPU_ROW_BLOCK)
    file = save({"row_block": choice})
    verdict = f"row blocks of {choice}" if choice else "one call"
    print(f"{machine_key()}: one call {whole:.3f} s, row blocks of {layers.CPU_ROW_BLOCK} {blocked:.3f} s "
          f"-> {verdict} (stored in {file}; override with {ROW_BLOCK_ENV}=N or off)")


if __name__ == "__main__":
    main()
