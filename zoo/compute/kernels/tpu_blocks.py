"""Which TPU attention kernel and blocks to run: a table per chip, measurements only when asked, overridable.

On a TPU v5e the same attention (Wan2.1 at 480p: 2 x 40 heads x 32,760 tokens x 128) ran at 8.8% of
the chip's peak with JAX's flash kernel at 128-blocks and 80% with its splash kernel at
q 2048 / kv 4096 / kv-compute 1024 (scoped VMEM raised to 64 MiB, below). Blocks that
suit one chip generation, sequence length and head count can fail or crawl on another, so:

1. `VIDAX_TPU_ATTENTION=splash:1024,2048,1024` (or `flash:...`, `exp2:...`, `exp2_bounded:...`) decides;
   `VIDAX_TPU_ATTENTION_LONG=...` the same for long keys only (more than SHORT_KEYS: self and joint attention),
   in place of the table's row;
2. else `VIDAX_NO_TPU_TUNING=1`: the table below for this chip, nothing else (the test suite runs this way);
3. else a measurement kept in `tpu-attention.json` in the compile cache folder
   (`vidax.zoo.compute.runtime.default_cache_dir`) for this chip, jax version, scoped VMEM and shape;
4. else the table (`TABLE`): rows measured on a chip (v5e), or derived from published figures for chips not
   measured yet (marked so). Nothing is timed: a first run never waits on a measurement.

Measurements are made only when asked: `python -m vidax.zoo.compute.kernels.tpu_blocks B,H,SQ,SKV,D[,masked]
...` times every candidate of `candidates()` at those shapes and keeps the fastest, and `VIDAX_TPU_TUNING=1`
times a shape not yet measured the first time a run meets it (interleaved, median of a few calls, in a thread of
its own so that it runs eagerly while a model is traced; a candidate that does not compile is dropped; timing
memory the chip no longer has falls back to the table).

Scoped VMEM: libtpu lets a kernel use 16 MiB of v5e's 128 MiB VMEM unless told otherwise, and
splash's larger blocks need more (2048/1024/1024 failed to compile at the default; with 64 MiB,
2048/4096/1024 ran the Wan 480p shape at 80% of peak, 1024/2048/1024 at 75%). `tpu_vmem.raise_scoped_vmem()`
(called when `vidax.zoo.compute.runtime` is imported, before JAX starts its backend) adds
`--xla_tpu_scoped_vmem_limit_kib=65536` to `LIBTPU_INIT_ARGS` unless the variable already sets it
or `VIDAX_TPU_SCOPED_VMEM_KIB=0`; the table's rows say which limit they hold for, and the limit in effect is
part of the measurements' key.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

from vidax.translator import VidaxError
from vidax.zoo.compute.kernels.pallas_tpu import KERNELS as KERNEL_NAMES, TpuAttention, _round_up
from vidax.zoo.compute.kernels.tpu_vmem import LARGE_VMEM_KIB, scoped_vmem_kib

CHOICE_ENV = "VIDAX_TPU_ATTENTION"
LONG_CHOICE_ENV = "VIDAX_TPU_ATTENTION_LONG"
NO_TUNING_ENV = "VIDAX_NO_TPU_TUNING"
TUNING_ENV = "VIDAX_TPU_TUNING"
CACHE_NAME = "tpu-attention.json"
ROUNDS = 3
SHORT_KEYS = 1024  # keys up to this: cross-attention to text, one key block


@dataclasses.dataclass(frozen=True)
class TableRow:
    """One entry of the built-in table: a chip (`device_kind` substring), the keys it covers ("short": up to
    SHORT_KEYS, "long": more), whether it needs the scoped VMEM at 64 MiB, the choice, and where it comes from."""

    chip: str
    keys: str
    large_vmem: bool
    choice: TpuAttention
    source: str


_V5E = "measured on a TPU v5e, jax 0.10.2"
TABLE: tuple[TableRow, ...] = (
    # v5e ("TPU v5 lite"), bf16, the CFG pair: Wan 480p self-attention (2 x 40 x 32,760^2 x 128) splash
    # 2048/4096/1024 80.2% of peak, 1024/4096/1024 80%, 2048/2048/1024 76%, 1024/2048/1024 75% (2026-12-06, runs I
    # and M); HunyuanVideo-1.5's joint 480p shape (2 x 16 x 51,275^2, text padding masked) 1024/4096/1024 76.6%,
    # 2048/4096/1024 76.2% (run Q: `choose_long` takes the block_q that pads less); Wan's cross-attention to 512
    # text keys flash 1024/512/512 13.95 ms against splash's 15.9 ms (run M).
    *(TableRow(chip, "long", True, TpuAttention("splash", 2048, 4096, 1024), _V5E + ", 64 MiB scoped VMEM")
      for chip in ("TPU v5 lite", "TPU v5e")),
    *(TableRow(chip, "short", False, TpuAttention("flash", 1024, 1024, 512), _V5E) for chip in ("TPU v5 lite", "TPU v5e")),
    # at libtpu's default scoped VMEM (16 MiB on v5e): splash 1024/2048/1024 75% at the Wan shape, 2048/1024/1024
    # out of VMEM at compile (2026-12-05)
    *(TableRow(chip, "long", False, TpuAttention("splash", 1024, 2048, 1024), _V5E + ", 16 MiB scoped VMEM")
      for chip in ("TPU v5 lite", "TPU v5e")),
    # not measured: the v5e rows scaled by each chip's VMEM (v6e and v7 have twice v5e's 128 MiB, v4 and v5p as
    # much; the 64 MiB rows are v5e's own, untimed elsewhere)
    TableRow("TPU v6", "long", False, TpuAttention("splash", 2048, 2048, 1024), "untimed: v5e's scaled by VMEM"),
    TableRow("TPU7", "long", False, TpuAttention("splash", 2048, 2048, 1024), "untimed: v5e's scaled by VMEM"),
    TableRow("TPU v5", "long", False, TpuAttention("splash", 1024, 2048, 1024), "untimed: v5e's (same VMEM)"),
    TableRow("TPU v4", "long", False, TpuAttention("splash", 1024, 1024, 512), "untimed: half v5e's blocks"),
    *(TableRow(chip, "short", False, TpuAttention("flash", 1024, 1024, 512), "untimed: v5e's")
      for chip in ("TPU v6", "TPU7", "TPU v5", "TPU v4")),
)
FALLBACK = TpuAttention("splash", 512, 1024, 512)  # any other chip (and Pallas' interpreter on CPU)

# Timed when asked: the table's choice first (it stays unless another is faster).
CANDIDATES = (
    TpuAttention("splash", 2048, 4096, 1024),
    TpuAttention("splash", 1024, 4096, 1024),
    TpuAttention("splash", 2048, 2048, 1024),
    TpuAttention("splash", 1024, 2048, 1024),
    TpuAttention("splash", 2048, 1024, 1024),
    TpuAttention("splash", 1024, 1024, 1024),
    TpuAttention("splash", 512, 1024, 512),
    TpuAttention("flash", 1024, 1024, 512),
    # vidax's own kernels (`pallas_exp2`): keys on the sublanes, base-2 exponentials, the fixed bound
    TpuAttention("exp2", 2048, 4096, 1024),
    TpuAttention("exp2_bounded", 2048, 4096, 1024),
    TpuAttention("exp2_bounded", 4096, 2048, 1024),
    TpuAttention("exp2_bounded", 1024, 4096, 1024),
)


_decided: dict[tuple[str, str], TpuAttention] = {}


class TpuAttentionChoiceError(VidaxError, ValueError):
    """An override that names no valid choice (one line)."""


def parse(text: str, variable: str = CHOICE_ENV) -> TpuAttention:
    """`splash:1024,2048,1024` -> TpuAttention; a clear one-line error otherwise."""
    kernel, _, numbers = text.strip().partition(":")
    try:
        sizes = [int(n) for n in numbers.split(",")]
        if len(sizes) != 3:
            raise ValueError("three block sizes")
        return TpuAttention(kernel.strip(), *sizes)
    except ValueError as error:
        raise TpuAttentionChoiceError(
            f"{variable}={text!r}: give KERNEL:Q,KV,KV_COMPUTE, e.g. splash:1024,2048,1024 ({error})") from None


def override(variable: str = CHOICE_ENV) -> TpuAttention | None:
    value = os.environ.get(variable, "").strip()
    return parse(value, variable) if value else None


def tuning_disabled() -> bool:
    return os.environ.get(NO_TUNING_ENV, "").strip().lower() in ("1", "true", "yes")


def table_row(device_kind: str, keys: str = "long") -> TableRow | None:
    """The table's row for a chip and kind of keys at the scoped VMEM in effect (None: a chip it does not know)."""
    large = (scoped_vmem_kib() or 0) >= LARGE_VMEM_KIB
    for wanted in ((True, False) if large else (False,)):
        for row in TABLE:
            if row.keys == keys and row.large_vmem == wanted and row.chip.lower() in device_kind.lower():
                return row
    return None


def default_for(device_kind: str) -> TpuAttention:
    """The table's choice for long keys on a chip named `device_kind` (FALLBACK for one it does not know)."""
    row = table_row(device_kind)
    return FALLBACK if row is None else row.choice


def table_choice(device_kind: str, q, k, kv_mask) -> TpuAttention:
    """The table's choice for these inputs: short keys their row; long keys the row's blocks, block_q halved
    where that pads the queries less (51,275 queries: 52,224 at 1024 against 53,248 at 2048)."""
    del kv_mask
    sq, skv = q.shape[1], k.shape[1]
    row = table_row(device_kind, "short" if skv <= SHORT_KEYS else "long")
    long_choice = override(LONG_CHOICE_ENV) if skv > SHORT_KEYS else None
    if row is None and long_choice is None:
        return default_for(device_kind)
    if long_choice is not None:
        row = dataclasses.replace(row or TableRow(device_kind, "long", False, long_choice, ""), choice=long_choice)
    choice = row.choice
    half = choice.block_q // 2
    if row.keys == "long" and half >= 512 and _round_up(sq, half) < _round_up(sq, choice.block_q):
        choice = dataclasses.replace(choice, block_q=half)
    return choice


def shape_entry(q, k, kv_mask) -> str:
    """The cache entry for one call's shapes: what the timing depends on."""
    b, sq, h, d = q.shape
    return f"b{b} h{h} sq{sq} skv{k.shape[1]} d{d} {q.dtype} {'masked' if kv_mask is not None else 'open'}"


def timing_asked() -> bool:
    return os.environ.get(TUNING_ENV, "").strip().lower() in ("1", "true", "yes")


def choose(q, k, kv_mask) -> TpuAttention:
    """The choice for these (per-device) inputs on this process's TPU: the override, a kept measurement, or the
    table; timed now only when `VIDAX_TPU_TUNING=1` asks."""
    from vidax.zoo.compute.runtime import device_kind as targeted_kind, target_memory

    chosen = override()
    if chosen is not None:
        return chosen
    device_kind = targeted_kind()
    if tuning_disabled() or target_memory() is not None:  # compiling for chips not here (`--target`): the table
        return table_choice(device_kind, q, k, kv_mask)
    return _decide(device_kind, shape_entry(q, k, kv_mask), q, k, kv_mask)


def _decide(device_kind: str, entry: str, q, k, kv_mask) -> TpuAttention:
    from vidax.zoo.compute import cpu_tuning

    path, key = cache_path(), machine_key(device_kind)
    memo = (key, entry)
    if memo in _decided:
        return _decided[memo]
    stored = cpu_tuning.read_tuning_file(path).get("machines", {}).get(key, {}).get(entry)
    if isinstance(stored, dict) and isinstance(stored.get("choice"), str):
        _decided[memo] = parse(stored["choice"])
        return _decided[memo]
    if not timing_asked():  # the table: a first run never waits on a measurement
        _decided[memo] = table_choice(device_kind, q, k, kv_mask)
        return _decided[memo]
    print(f"vidax: timing TPU attention blocks for {entry} once (seconds; kept in {path})", file=sys.stderr)
    try:
        result = _outside_the_trace(measure, q.shape, k.shape[1], q.dtype, kv_mask is not None,
                                    candidates(table_choice(device_kind, q, k, kv_mask)))
    except Exception as error:  # noqa: BLE001 - out of memory beside a placed model: the table serves
        print(f"vidax: could not time TPU attention ({type(error).__name__}); using the built-in blocks",
              file=sys.stderr)
        _decided[memo] = table_choice(device_kind, q, k, kv_mask)
        return _decided[memo]
    cpu_tuning.write_tuning_entry(path, key, entry, result)
    _decided[memo] = parse(result["choice"])
    return _decided[memo]


def _outside_the_trace(fn, *args):
    """Run `fn` in a thread of its own: jax's trace state is per thread, so the timing runs eagerly even
    when the first call of a shape comes while a model is being traced."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


def candidates(built_in: TpuAttention) -> list[TpuAttention]:
    """The built-in choice first, then the other candidates (each once)."""
    return [built_in] + [c for c in CANDIDATES if c != built_in]


def machine_key(device_kind: str) -> str:
    import jax
    import jaxlib

    vmem = scoped_vmem_kib()
    return (f"{device_kind} | jax {jax.__version__} jaxlib {jaxlib.__version__}"
            + (f" | scoped vmem {vmem} KiB" if vmem else ""))


def cache_path():
    from vidax.zoo.compute.runtime import default_cache_dir

    return default_cache_dir() / CACHE_NAME


def forget() -> None:
    """Drop this process's memory of the choices (the file stays)."""
    _decided.clear()


def measure(q_shape: tuple[int, ...], skv: int, dtype: Any, masked: bool, contenders: list[TpuAttention], *,
            rounds: int = ROUNDS, interpret: bool = False) -> dict[str, Any]:
    """Time each contender on random inputs of one shape; the fastest that compiles is the choice.

    Call it outside any trace (`choose` runs it in a thread of its own).
    """
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.zoo.compute.cpu_tuning import time_interleaved
    from vidax.zoo.compute.kernels.pallas_tpu import tpu_attention

    b, sq, h, d = q_shape
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((b, sq, h, d), np.float32), dtype)
    k, v = (jnp.asarray(rng.standard_normal((b, skv, h, d), np.float32), dtype) for _ in range(2))
    mask = jnp.asarray(np.broadcast_to(np.arange(skv) < max(skv - 7, 1), (b, skv))) if masked else None
    compiled, failed = {}, {}
    fitted = dict.fromkeys(choice.fitted(sq, skv) for choice in contenders)  # small shapes: fewer distinct
    for choice in fitted:
        run = functools.partial(tpu_attention, scale=d ** -0.5, choice=choice, interpret=interpret)
        try:
            compiled[choice.label()] = jax.jit(run).lower(q, k, v, mask).compile()
        except Exception as error:  # noqa: BLE001 - VMEM too small for these blocks on this chip
            failed[choice.label()] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    if not compiled:
        raise RuntimeError(f"no TPU attention candidate compiled: {failed}")
    medians = time_interleaved({label: functools.partial(fn, q, k, v, mask) for label, fn in compiled.items()},
                               rounds)
    choice = min(medians, key=medians.get)
    return {"choice": choice, "median_seconds": medians, "failed": failed, "rounds": rounds,
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    """`python -m vidax.zoo.compute.kernels.tpu_blocks B,H,SQ,SKV,D[,masked] ... [splash:Q,KV,KC ...] [--only]`: time
    each shape now, print, keep. Choices named on the line are timed beside the built-in candidates (`--only`:
    beside the table's choice alone)."""
    from vidax.zoo.compute.kernels.tpu_vmem import raise_scoped_vmem

    raise_scoped_vmem()  # as importing vidax.zoo.compute.runtime would, before JAX starts its backend
    import jax
    import jax.numpy as jnp

    from vidax.zoo.compute import cpu_tuning

    args = list(sys.argv[1:] if argv is None else argv)
    only = "--only" in args  # time the table's choice and the choices named, not every candidate
    args = [a for a in args if a != "--only"]
    extra = [parse(a) for a in args if a.split(":")[0] in KERNEL_NAMES]
    args = [a for a in args if a.split(":")[0] not in KERNEL_NAMES]
    if not args:
        print("usage: python -m vidax.zoo.compute.kernels.tpu_blocks B,H,SQ,SKV,D[,masked] ... [splash:Q,KV,KC ...] "
              "[--only]", file=sys.stderr)
        return 2
    device_kind = jax.devices()[0].device_kind
    on_tpu = jax.default_backend() == "tpu"
    for arg in args:
        fields = arg.split(",")
        masked = fields[-1] == "masked"
        b, h, sq, skv, d = (int(n) for n in fields[:5])
        q = jax.ShapeDtypeStruct((b, sq, h, d), jnp.bfloat16)
        entry = shape_entry(q, jax.ShapeDtypeStruct((b, skv, h, d), jnp.bfloat16), True if masked else None)
        k = jax.ShapeDtypeStruct((b, skv, h, d), jnp.bfloat16)
        built_in = table_choice(device_kind, q, k, True if masked else None)
        contenders = [built_in] if only else candidates(built_in)
        contenders += [c for c in extra if c not in contenders]
        result = measure(q.shape, skv, jnp.bfloat16, masked, contenders,
                         interpret=not on_tpu)
        if on_tpu:
            cpu_tuning.write_tuning_entry(cache_path(), machine_key(device_kind), entry, result)
        print(f"{entry} ({device_kind})")
        for label, seconds in sorted(result["median_seconds"].items(), key=lambda item: item[1]):
            print(f"  {label:28s} {seconds * 1e3:9.2f} ms  {4 * b * h * sq * skv * d / seconds / 1e12:7.1f} TFLOP/s")
        for label, why in result["failed"].items():
            print(f"  {label:28s} failed: {why}")
        print(f"  -> {result['choice']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
