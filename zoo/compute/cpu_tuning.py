"""CPU choices that help one processor and hurt another, measured once per machine and cached.

Row blocks (`vidax.zoo.compute.layers.project`): XLA's CPU matmul ran DiT-sized products 5-16% faster cut
into blocks of ~700-1000 rows on a 2-core AMD EPYC (Zen 4) and 3-9% slower on a 2-core Intel Xeon
with AMX (`python -m bench matmul` on each). Both ways give the same bits (each output row is the
same sum in the same order), so the faster one is simply chosen: the first time a CPU run meets a
product big enough to split, both are timed on a 3510 x 3072 x 3072 product in its dtype,
interleaved, and row blocks are chosen when their median is at least 2% lower. The answer is
written to `cpu-tuning.json` in the compile cache folder (`vidax.zoo.compute.runtime.default_cache_dir`),
keyed by the CPU's identity, its core count and the jax / jaxlib versions, so a new machine, a new
jax or a different core count measures again.

fp32 results (`vidax.zoo.compute.layers.project`): a bf16 (or fp16) product with a bf16 result runs on XLA's
CPU at fp32 speed, while the same operands asked for an fp32 result (`preferred_element_type`) reach a
bf16 kernel: 3.7x faster on a 2-core Intel Xeon with AMX (`python -m bench.runtime.bench_matmul bf16`). Its
values are the fp32 product of the operands (closer to the exact product), cast back to the input's
dtype after the bias; the bits differ from the default's in a few rounding places, so it is timed the
same way (the same product, both forms, interleaved) and used only where it wins by the margin.

Overrides, read at every decision:
- `VIDAX_CPU_ROW_BLOCK=N`: blocks of at most N rows (0: always one call); nothing is measured.
- `VIDAX_CPU_FP32_RESULT=1` (or 0): bf16/fp16 CPU products always (never) ask for an fp32 result.
- `VIDAX_NO_CPU_TUNING=1`: the built-in choices (row blocks of `layers.CPU_ROW_BLOCK` rows, the
  product's own dtype as its result); nothing is measured or written (the test suite runs this way).
- deleting the cache file measures again; `python -m vidax.zoo.compute.cpu_tuning` (or `vidax-gen --tune-cpu`)
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
FP32_RESULT_ENV = "VIDAX_CPU_FP32_RESULT"
NO_TUNING_ENV = "VIDAX_NO_CPU_TUNING"
CACHE_NAME = "cpu-tuning.json"
FORMAT = 1
MEASURE_SHAPE = (3510, 3072, 3072)  # a DiT projection at 3510 tokens (HunyuanVideo 1.0 / Wan at 33 x 240x416)
ROUNDS = 5  # timed calls per contender, interleaved, after one warm-up call each
MARGIN = 0.02  # a tuned form must beat the built-in one by 2%: within the noise, the built-in program stays

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


def fp32_result_override() -> bool | None:
    """`VIDAX_CPU_FP32_RESULT` as a choice, or None when unset."""
    value = os.environ.get(FP32_RESULT_ENV, "").strip().lower()
    if not value:
        return None
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise CpuTuningError(f"{FP32_RESULT_ENV}={value!r}: give 1 (bf16 CPU products with an fp32 result) or 0")
    return value in ("1", "true", "yes")


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
    from vidax.zoo.compute.runtime import default_cache_dir

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


def fp32_result_faster(dtype: Any, *, measure: Measure | None = None) -> bool:
    """Whether `dtype` (bf16 / fp16) products run faster on this machine asked for an fp32 result.

    `VIDAX_CPU_FP32_RESULT` says it; else `VIDAX_NO_CPU_TUNING=1`: False (the built-in choice); else the
    cache file's answer for this machine, or a measurement (`measure`, default `measure_fp32_result`).
    """
    override = fp32_result_override()
    if override is not None:
        return override
    if tuning_disabled():
        return False
    import numpy as np

    entry = f"fp32_result {np.dtype(dtype).name}"
    return _decide(entry, lambda: (measure or measure_fp32_result)(np.dtype(dtype)))


def _decide(entry: str, measure: Callable[[], dict[str, Any]]) -> bool:
    path, key = cache_path(), machine_key()
    memo = (str(path), key, entry)
    if memo not in _decided:
        stored = read_tuning_file(path).get("machines", {}).get(key, {}).get(entry)
        if not isinstance(stored, dict) or not isinstance(stored.get("faster"), bool):
            print(f"vidax: timing {entry} on this CPU once (a few seconds; kept in {path})", file=sys.stderr)
            stored = measure()
            write_tuning_entry(path, key, entry, stored)
            _warn_if_busy(stored, path)
        _decided[memo] = stored["faster"]
    return _decided[memo]


def _warn_if_busy(result: dict[str, Any], path: Path) -> None:
    load = result.get("load_average")
    if load is not None and load > (os.cpu_count() or 1):
        print(f"vidax: the machine was busy while timing (load {load:.1f}); to time again when it is quiet, "
              f"delete {path} or run `python -m vidax.zoo.compute.cpu_tuning`", file=sys.stderr)


def forget() -> None:
    """Drop this process's memory of the choices (the file stays): the next decision reads it again."""
    _decided.clear()


# --- the cache file ----------------------------------------------------------------------------


def read_tuning_file(path: Path) -> dict[str, Any]:
    """The file's contents; {} when it is missing, unreadable or not this format (then it is rewritten)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("machines"), dict):
        return {}
    machines = {key: entries for key, entries in data["machines"].items() if isinstance(entries, dict)}
    return {**data, "machines": machines}


def write_tuning_entry(path: Path, key: str, entry: str, result: dict[str, Any]) -> None:
    """Add one result, atomically (a temporary file renamed over the old one): a reader sees the old
    file or the new one, never half of one. A folder that cannot be written keeps the choice in memory."""
    data = read_tuning_file(path) or {"format": FORMAT, "machines": {}}
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
        print(f"vidax: could not write {path} ({error.strerror}); the measured choice holds for this run only",
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
    """Time one `rows x k x n` product of `dtype` in one call and in blocks of `block` rows."""
    from vidax.zoo.compute.products import in_row_blocks

    def blocked(x, w):
        return in_row_blocks(x, w, block=block)

    result = measure_products({"one call": _plain_dot, "row blocks": blocked}, dtype, shape=shape, rounds=rounds,
                              clock=clock)
    return {**result, "block": block}


def measure_fp32_result(dtype: Any, *, shape: tuple[int, int, int] = MEASURE_SHAPE, rounds: int = ROUNDS,
                        clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Time one `rows x k x n` product of `dtype` with its own dtype as the result and with an fp32
    result cast back (what `layers.project` runs when this is chosen)."""
    import jax.numpy as jnp

    def fp32_result(x, w):
        return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype)

    return measure_products({"default": _plain_dot, "fp32 result": fp32_result}, dtype, shape=shape, rounds=rounds,
                            clock=clock)


def _plain_dot(x, w):
    import jax.numpy as jnp

    return jnp.dot(x, w)


def measure_products(forms: dict[str, Callable[[Any, Any], Any]], dtype: Any, *, shape: tuple[int, int, int],
                     rounds: int, clock: Callable[[], float]) -> dict[str, Any]:
    """Time one `rows x k x n` product of `dtype` in two forms (the built-in one first), compiled once
    each and interleaved; `faster`: the second form's median is below the first's by `MARGIN`.

    Runs eagerly even when called while a model is being traced (the first big projection decides).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    rows, k, n = shape
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rng = np.random.default_rng(0)
    with jax.ensure_compile_time_eval():
        x = jnp.asarray(rng.standard_normal((rows, k), np.float32), dtype)
        w = jnp.asarray(rng.standard_normal((k, n), np.float32), dtype)
        compiled = {name: jax.jit(form).lower(x, w).compile() for name, form in forms.items()}
        medians = time_interleaved({name: functools.partial(run, x, w) for name, run in compiled.items()},
                                   rounds, clock)
    built_in, candidate = forms
    faster = medians[candidate] < (1 - MARGIN) * medians[built_in]
    return {"faster": faster, "median_seconds": medians, "shape": list(shape), "rounds": rounds,
            "load_average": load, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def _measure_and_print(entry: str, result: dict[str, Any], path: Path, key: str, chosen: str, kept: str) -> None:
    write_tuning_entry(path, key, entry, result)
    _warn_if_busy(result, path)
    times = ", ".join(f"{contender} {seconds:.3f} s" for contender, seconds in result["median_seconds"].items())
    dtype = entry.split()[1]
    print(f"{dtype} {' x '.join(map(str, result['shape']))}: {times} -> {chosen if result['faster'] else kept}")


def main() -> int:
    """`python -m vidax.zoo.compute.cpu_tuning` (or `vidax-gen --tune-cpu`): measure this machine's choices now
    (again), write and print them."""
    import jax.numpy as jnp

    from vidax.zoo.compute.products import CPU_ROW_BLOCK

    path, key, block = cache_path(), machine_key(), CPU_ROW_BLOCK
    print(f"{key}\n{path}")
    for dtype in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        _measure_and_print(f"row_blocks {dtype.name} {block}", measure_row_blocks(dtype, block), path, key,
                           f"row blocks of {block} rows", "one call")
    bf16 = jnp.dtype(jnp.bfloat16)
    _measure_and_print(f"fp32_result {bf16.name}", measure_fp32_result(bf16), path, key,
                       "fp32 result", "bf16 result")
    if row_block_override() is not None or fp32_result_override() is not None or tuning_disabled():
        print(f"({ROW_BLOCK_ENV}, {FP32_RESULT_ENV} or {NO_TUNING_ENV} is set: it overrides these while it is)")
    forget()  # this process's later decisions read the new file
    return 0


if __name__ == "__main__":
    sys.exit(main())
