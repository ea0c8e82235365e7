"""The dry run's compiled stages kept as serialized executables, found again without tracing.

jax's persistent compilation cache is keyed by the lowered program, so a second process still traces and
lowers every stage before it can find the executable: for `wan2.1-t2v-1.3b` that Python work is most of
what is left of a warm compile (a warm run took 18% of the cold one's seconds with jax's cache alone). Here
each stage's executable is also written, serialized (`jax.experimental.serialize_executable`), into a
folder of jax's cache, under a key made without tracing: what the run was asked (`run_context`: the
model, its options and resolved settings, the layout, the depth), the stage's name, its abstract arguments
(shapes, dtypes, shardings), its static arguments, the devices, the XLA flags and matmul precision, the CPU
row-block choices (`cpu_tuning`'s overrides and measured answers), the jax and jaxlib versions, and a digest
of vidax's own model code and specs (a changed module is a new key).
A later process with the same key loads the executable instead of tracing, lowering and compiling; what
the dry run reads (XLA's memory and cost analyses) comes from the loaded executable.

On only where jax's persistent cache is (`runtime.configure_compile_cache`); the folder is the user's own,
trusted as jax's cache is (loading an executable runs code). Any failure to read or write an entry falls
back to compiling.

A process that keeps no executables can instead be given a `FigureBook`: XLA's memory and cost figures
of programs compiled before, keyed by the lowered program's text (and the jax version, devices and XLA
flags). A stage whose lowered program is in the book takes its figures from there without compiling: the
figures of one program text are XLA's, whoever compiled it. The test suite keeps one (its planner-vs-XLA
checks compile dozens of native-size programs).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax

FOLDER = "vidax-dry-run"  # inside jax's compilation cache folder
_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("vidax_dry_run_context", default=None)


@contextlib.contextmanager
def run_context(description: str) -> Iterator[None]:
    """Stages compiled inside are cached under `description` (everything about the run that the stages'
    arguments do not show: model, options, settings, layout, depth)."""
    token = _RUN.set(description)
    try:
        yield
    finally:
        _RUN.reset(token)


def cache_folder() -> Path | None:
    """The folder inside jax's persistent cache, or None when that cache is off or has no folder."""
    if not jax.config.jax_enable_compilation_cache or not jax.config.jax_compilation_cache_dir:
        return None
    return Path(jax.config.jax_compilation_cache_dir) / FOLDER


def stage_key(stage: str, args: tuple, *, donate: tuple, static: tuple, keep_unused: bool,
              options: dict[str, str] | None = None) -> str | None:
    """The entry's name for a stage compiled in the current run context (None: no context, no caching)."""
    run = _RUN.get()
    if run is None:
        return None
    settings = repr((donate, static, keep_unused, sorted((options or {}).items())))
    parts = (run, stage, _describe(args, static), settings, _environment(), _code_digest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load(key: str | None) -> Any:
    """The compiled stage stored under `key`, or None (no entry, or one this process cannot load)."""
    from jax.experimental.serialize_executable import deserialize_and_load

    folder = cache_folder()
    if key is None or folder is None or not (folder / key).is_file():
        return None
    try:
        blob, inputs, outputs = pickle.loads((folder / key).read_bytes())
        return deserialize_and_load(blob, _flat(inputs), _flat(outputs))
    except Exception:  # noqa: BLE001 (a stale or foreign entry: compile instead)
        return None


def store(key: str | None, compiled: Any) -> None:
    """Write `compiled` under `key` (atomically: a reader never sees half an entry); failures are ignored."""
    from jax.experimental.serialize_executable import serialize

    folder = cache_folder()
    if key is None or folder is None:
        return
    try:
        blob, inputs, outputs = serialize(compiled)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{key}.{os.getpid()}"
        # leaf counts only: what the dry run reads (memory and cost analyses) does not need the pytrees
        partial.write_bytes(pickle.dumps((blob, inputs.num_leaves, outputs.num_leaves)))
        partial.replace(folder / key)
    except Exception:  # noqa: BLE001 (an executable that does not serialize is compiled again next time)
        return


def _flat(count: int) -> Any:
    return jax.tree.structure([0] * count)


def _describe(args: tuple, static: tuple) -> str:
    """Every argument's shape, dtype and sharding (static arguments: their repr), with the tree's structure."""
    def leaf(x: Any) -> str:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return f"{tuple(x.shape)} {x.dtype} {getattr(x, 'sharding', None)!r}"
        return repr(x)

    shown = tuple(repr(a) if i in static else a for i, a in enumerate(args))
    leaves, tree = jax.tree.flatten(shown)
    return f"{tree}\n" + "\n".join(map(leaf, leaves))


def _environment() -> str:
    import jaxlib

    from vidax.zoo.compute.runtime import device_kind, platform

    devices = jax.devices()
    return repr((jax.__version__, jaxlib.__version__, len(devices), devices[0].platform, devices[0].device_kind,
                 platform(), device_kind(),  # the chip compiled for (`--target`), else the local one's
                 jax.device_count("cpu") if devices[0].platform != "cpu" else 0,
                 os.environ.get("XLA_FLAGS", ""), str(jax.config.jax_default_matmul_precision), _cpu_choices()))


def _cpu_choices() -> str:
    """What decides the CPU's row blocks and bf16 result type (`cpu_tuning`: its overrides and its measured answers), which change
    the programs a CPU run compiles without changing any source."""
    from vidax.zoo.compute import cpu_tuning

    names = (cpu_tuning.ROW_BLOCK_ENV, cpu_tuning.NO_TUNING_ENV, cpu_tuning.FP32_RESULT_ENV)
    overrides = sorted((k, v) for k, v in os.environ.items() if k in names)
    path = cpu_tuning.cache_path()
    measured = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return repr((overrides, measured))


@functools.cache
def _code_digest() -> str:
    """A digest of vidax's model code and specs (the folders beside zoo/): a changed module, a new key."""
    root = Path(__file__).resolve().parents[2]  # zoo/plan/ -> the folder that holds zoo/, translator/ ...
    digest = hashlib.sha256()
    for folder in ("zoo", "translator", "conversion_specs"):
        for path in sorted(p for p in (root / folder).rglob("*") if p.suffix in (".py", ".toml", ".json")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# --- XLA's figures of programs compiled before ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Figures:
    """What the dry run reads of a compiled program: XLA's bytes per device and its FLOP count."""

    argument: int
    output: int
    temp: int
    alias: int
    flops: float | None

    @classmethod
    def of(cls, compiled: Any) -> "Figures":
        memory = compiled.memory_analysis()
        cost = compiled.cost_analysis()
        if isinstance(cost, (list, tuple)):  # older jax: one dict per computation
            cost = cost[0] if cost else None
        return cls(int(memory.argument_size_in_bytes), int(memory.output_size_in_bytes),
                   int(memory.temp_size_in_bytes), int(memory.alias_size_in_bytes),
                   None if not cost else float(cost.get("flops", 0.0)))


class FigureBook:
    """XLA's figures of lowered programs, keyed by the program's text and what else decides what XLA makes
    of it (`_book_environment`). `entries` maps keys to `Figures` fields; `added` holds what this process
    compiled that the book did not have."""

    def __init__(self, entries: dict[str, dict] | None = None):
        self.entries = dict(entries or {})
        self.added: dict[str, dict] = {}
        self.hits = self.misses = 0

    @classmethod
    def read(cls, path: str | os.PathLike) -> "FigureBook":
        path = Path(path)
        return cls(json.loads(path.read_text()) if path.is_file() else {})

    @staticmethod
    def key(lowered: Any, options: dict[str, str] | None = None) -> str:
        text = lowered.as_text()  # no source locations: the same program from any checkout has the same text
        # the XLA options it compiles with are not in the text (`runtime.xla_only_options`: another memory plan)
        chosen = f"\n{sorted(options.items())}" if options else ""
        return hashlib.sha256(f"{_book_environment()}{chosen}\n{text}".encode()).hexdigest()

    def get(self, key: str) -> Figures | None:
        entry = self.entries.get(key)
        self.hits, self.misses = self.hits + (entry is not None), self.misses + (entry is None)
        return None if entry is None else Figures(**entry)

    def put(self, key: str, figures: Figures) -> None:
        self.entries[key] = self.added[key] = dataclasses.asdict(figures)


_BOOK: FigureBook | None = None


def use_figure_book(book: FigureBook | None) -> None:
    """Read (and add to) `book` in every stage compiled from now on where no executable cache is open."""
    global _BOOK
    _BOOK = book


def figure_book() -> FigureBook | None:
    return _BOOK


def book_key(lowered: Any, options: dict[str, str] | None = None) -> str | None:
    """The book's key of this lowered program compiled with `options` (None: no book, or an executable cache is open
    instead)."""
    if _BOOK is None or cache_folder() is not None:
        return None
    return FigureBook.key(lowered, options)


def figures_of(key: str | None) -> Figures | None:
    """The book's figures under `key` (None: no key, or a program the book has not seen)."""
    return None if key is None or _BOOK is None else _BOOK.get(key)


def remember(key: str | None, figures: Figures) -> None:
    if key is not None and _BOOK is not None:
        _BOOK.put(key, figures)


def _book_environment() -> str:
    import jaxlib

    devices = jax.devices()
    return repr((jax.__version__, jaxlib.__version__, len(devices), devices[0].platform, devices[0].device_kind,
                 os.environ.get("XLA_FLAGS", "")))

