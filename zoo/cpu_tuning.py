"""CPU choices that help one processor and hurt another, measured once per machine and cached.

Row blocks (`vidax.zoo.layers.project`): XLA's CPU matmul ran DiT-sized products 5-16% faster cut
into blocks of ~700-1000 rows on a 2-core AMD EPYC (Zen 4) and 3-9% slower on a 2-core Intel Xeon
with AMX (`python -m bench matmul` on each). Both ways give the same bits (each output row is the
same sum in the same order), so the faster one is simply chosen: the first time a CPU run meets a
product big enough to split, both are timed on a 3510 x 3072 x 3072 product in its dtype,
interleaved, and row blocks are chosen when their median is at least 2% lower. The answer is
written to `cpu-tuning.json` in the compile cache folder (`vidax.zoo.runtime.default_cache_dir`),
keyed by the CPU's identity, its core count and the jax / jaxlib versions, so a new machine, a new
jax or a different core count measures again.

Overrides, read at every decision:
- `VIDAX_CPU_ROW_BLOCK=N`: blocks of at most N rows (0: always one call); nothing is measured.
- `VIDAX_NO_CPU_TUNING=1`: the built-in choice (row blocks of `layers.CPU_ROW_BLOCK` rows); nothing is
  measured or written (the test suite runs this way).
- deleting the cache file measures again; `python -m vidax.zoo.cpu_tuning` (or `vidax-gen --tune-cpu`)
  measures now and prints.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vidax.translator import VidaxError

ROW_BLOCK_ENV = "VIDAX_CPU_ROW_BLOCK"
NO_TUNING_ENV = "VIDAX_NO_CPU_TUNING"
CACHE_NAME = "cpu-tuning.json"
FORMAT = 1
MEASURE_SHAPE = (3510, 3072, 3072)  # a DiT projection at 3510 tokens (HunyuanVideo 1.0 / Wan at 33 x 240x416)
ROUNDS = 5  # timed calls per contender, interleaved, after one warm-up call each
MARGIN = 0.02  # row blocks must beat the one call by 2%: within the noise, the one call (the plain program) stays

Measure = Callable[..., dict[str, Any]]

# (cache path, machine key, entry) -> the choice, so a process reads the file once per choice.
_decided: dict[tuple[str, str, str], bool] = {}


class CpuTuningError(VidaxError, ValueError):
    """An override that is not a choice (one line)."""


# --- overrides ---------------------------------------------------------------------------------


def row_block_override() -> int | None:
    """`VIDAX_CPU_ROW_BLOCK` as rows per block (0: one call), or None when unset."""
    value = os.environ.get(ROW_BLOCK_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise CpuTuningError(f"{ROW_BLOCK_ENV}={value!r}: give the most rows per CPU matmul block, or 0 for one call")
    return int(value)


def tuning_disabled() -> bool:
    return os.environ.get(NO_TUNING_ENV, "").strip().lower() in ("1", "true", "yes")


# --- the machine -------------------------------------------------------------------------------


def machine_key() -> str:
    """What a measurement holds for: the CPU (model string, vendor/family/model/stepping and the matrix
    extensions XLA may use), the cores this process may run on, and the jax / jaxlib versions."""
    import jax
    import jaxlib

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{_this_cpu()} | {cores} cores | jax {jax.__version__} jaxlib {jaxlib.__version__}"


@functools.cache
def _this_cpu() -> str:  # read once: every big projection of every trace asks for the key
    try:
        return cpu_identity(Path("/proc/cpuinfo").read_text())
    except OSError:
        return f"{platform.processor() or platform.machine()} ({platform.system()})"


def cpu_identity(cpuinfo: str) -> str:
    """`Intel(R) Xeon(R) Processor (GenuineIntel 6/167/1; avx512f amx_bf16)` from /proc/cpuinfo's text; a
    VM's model string can be generic, so the numbers and extensions are part of it."""
    first = cpuinfo.split("\n\n")[0]
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {name.strip(): value.strip() for name, value in fields.items()}
    model = fields.get("model name") or fields.get("Model") or platform.machine()
    numbers = "/".join(fields.get(name, "?") for name in ("cpu family", "model", "stepping"))
    extensions = [f for f in fields.get("flags", "").split() if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")]
    return f"{model} ({fields.get('vendor_id', '?')} {numbers}; {' '.join(extensions) or 'no avx2'})"


def cache_path() -> Path:
    """`cpu-tuning.json` in the compile cache folder (jax's cache ignores files not named `*-cache`)."""
    from vidax.zoo.runtime import default_cache_dir

    return default_cache_dir() / CACHE_NAME


# --- the choice --------------------------------------------------------------------------------


def row_blocks_faster(dtype: Any, block: int, *, measure: Measure | None = None) -> bool:
    """Whether `dtype` products run faster in blocks of `block` rows on this machine than in one call.

    `VIDAX_NO_CPU_TUNING=1`: True (the built-in choice). Else the cache file's answer for this machine,
    or a measurement (`measure`, default `measure_row_blocks`) written to it.
    """
    if tuning_disabled():
        return True
    import numpy as np

    entry = f"row_blocks {np.dtype(dtype).name} {block}"
    return _decide(entry, lambda: (measure or measure_row_blocks)(np.dtype(dtype), block))


def _decide(entry: str, measure: Callable[[], dict[str, Any]]) -> bool:
    path, key = cache_path(), machine_key()
    memo = (str(path), key, entry)
    if memo not in _decided:
        stored = _read(path).get("machines", {}).get(key, {}).get(entry)
        if not isinstance(stored, dict) or not isinstance(stored.get("faster"), bool):
            print(f"vidax: timing {entry} on this CPU once (a few seconds; kept in {path})", file=sys.stderr)
            stored = measure()
            _write(path, key, entry, stored)
            _warn_if_busy(stored, path)
        _decided[memo] = stored["faster"]
    return _decided[memo]


def _warn_if_busy(result: dict[str, Any], path: Path) -> None:
    load = result.get("load_average")
    if load is not None and load > (os.cpu_count() or 1):
        print(f"vidax: the machine was busy while timing (load {load:.1f}); to time again when it is quiet, "
              f"delete {path} or run `python -m vidax.zoo.cpu_tuning`", file=sys.stderr)


def forget() -> None:
    """Drop this process's memory of the choices (the file stays): the next decision reads it again."""
    _decided.clear()


# --- the cache file ----------------------------------------------------------------------------


def _read(path: Path) -> dict[str, Any]:
    """The file's contents; {} when it is missing, unreadable or not this format (then it is rewritten)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("machines"), dict):
        return {}
    machines = {key: entries for key, entries in data["machines"].items() if isinstance(entries, dict)}
    return {**data, "machines": machines}


def _write(path: Path, key: str, entry: str, result: dict[str, Any]) -> None:
    """Add one result, atomically (a temporary file renamed over the old one): a reader sees the old
    file or the new one, never half of one. A folder that cannot be written keeps the choice in memory."""
    data = _read(path) or {"format": FORMAT, "machines": {}}
    data["machines"].setdefault(key, {})[entry] = result
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(data, out, indent=1, sort_keys=True)
            os.replace(temporary, path)
        finally:
            Path(temporary).unlink(missing_ok=True)  # left only when the write or the rename failed
    except OSError as error:
        print(f"vidax: could not write {path} ({error.strerror}); the CPU choice holds for this run only",
              file=sys.stderr)


# --- measuring ---------------------------------------------------------------------------------


def time_interleaved(contenders: dict[str, Callable[[], Any]], rounds: int,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds of each contender over `rounds` calls taken in turn (A B A B ...), after one
    untimed call each: a change in the machine's load falls on both alike."""
    import jax

    for run in contenders.values():
        jax.block_until_ready(run())
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            start = clock()
            jax.block_until_ready(run())
            seconds[name].append(clock() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def measure_row_blocks(dtype: Any, block: int, *, shape: tuple[int, int, int] = MEASURE_SHAPE,
                       rounds: int = ROUNDS, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Time one `rows x k x n` product of `dtype` in one call and in blocks of `block` rows.

    Runs eagerly even when called while a model is being traced (the first big projection decides).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.zoo import layers

    rows, k, n = shape
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rng = np.random.default_rng(0)
    with jax.ensure_compile_time_eval():
        x = jnp.asarray(rng.standard_normal((rows, k), np.float32), dtype)
        w = jnp.asarray(rng.standard_normal((k, n), np.float32), dtype)
        one_call = jax.jit(jnp.dot).lower(x, w).compile()
        blocked = jax.jit(lambda x, w: layers.in_row_blocks(x, w, block=block)).lower(x, w).compile()
        medians = time_interleaved({"one call": lambda: one_call(x, w), "row blocks": lambda: blocked(x, w)},
                                   rounds, clock)
    faster = medians["row blocks"] < (1 - MARGIN) * medians["one call"]
    return {"faster": faster, "median_seconds": medians, "block": block,
            "shape": list(shape), "rounds": rounds, "load_average": load,
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main() -> int:
    """`python -m vidax.zoo.cpu_tuning` (or `vidax-gen --tune-cpu`): measure this machine's choices now
    (again), write and print them."""
    import jax.numpy as jnp

    from vidax.zoo import layers

    path, key, block = cache_path(), machine_key(), layers.CPU_ROW_BLOCK
    print(f"{key}\n{path}")
    for dtype in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        result = measure_row_blocks(dtype, block)
        _write(path, key, f"row_blocks {dtype.name} {block}", result)
        _warn_if_busy(result, path)
        times = ", ".join(f"{contender} {seconds:.3f} s" for contender, seconds in result["median_seconds"].items())
        print(f"{dtype.name} {' x '.join(map(str, result['shape']))}: {times} -> "
              f"{f'row blocks of {block} rows' if result['faster'] else 'one call'}")
    if row_block_override() is not None or tuning_disabled():
        print(f"({ROW_BLOCK_ENV} or {NO_TUNING_ENV} is set: it overrides these while it is)")
    forget()  # this process's later decisions read the new file
    return 0


if __name__ == "__main__":
    sys.exit(main())
