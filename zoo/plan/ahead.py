"""A generation's later programs compiled while its earlier stages run.

Every shape of a run is known once its settings are: the VAE decode's units (the dry run's `DecodeUnit`s, built
as the decode calls them) can be lowered and compiled on abstract arrays in a background thread while the
sampling loop uses the devices. The thread waits for the first denoise step (`Ahead.go`): started with the run,
its lowering holds Python's lock against the encoder's and the DiT's own tracing and its compiles take the cores
their compiles need (the v5e call that started it with the run spent 98.8 s in its encode stage; the call
before, without a pool, 18.7 s: separate calls, not a timed comparison), while after the first step the host
only feeds the chip. JAX keeps what it compiled in the process, keyed by the program,
so when the decode calls the same unit with real arrays it finds the executable and compiles nothing. On a TPU
host, whose CPU cores sit idle while the chip denoises, this takes the decoder's compile (most of the first
video's 206 s decode stage on a v5e) off the critical path; the persistent compile cache then keeps it for the
next process. The units are lowered one after another (tracing holds Python's lock) and compiled in a pool of
threads (XLA's compiler runs without it): on a v5e host the ten units compiled one at a time kept the decode
waiting about 90 s after 50 steps, with the host's 13 cores mostly idle. The pool's threads run niced
(`lower_priority`), so that the run's own threads find a core when they need one.

    ahead = compile_ahead(family, options)   # starts at once; returns before anything is compiled
    ...generate...
    ahead.join()                             # the units compiled (or failed: a unit that cannot compile ahead
                                             # is compiled by its first call, as without this)
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

AHEAD_ENV = "VIDAX_COMPILE_AHEAD"  # "0": compile every program when it is first called
KEEP_CORES = 2  # cores left to the run itself (its own compiles, the host loop, the CPU's work on a CPU run)


@dataclasses.dataclass
class Ahead:
    """A background compile: the units it compiled, their seconds, the first error (None: none)."""

    thread: threading.Thread | None = None
    compiled: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    error: BaseException | None = None
    go: threading.Event = dataclasses.field(default_factory=threading.Event)  # set: lower and compile now
    seconds: float = 0.0  # wall time of the compiles, from `go` to the last one
    waited: float = 0.0  # how long `join` waited for them

    cancelled: bool = False

    def cancel(self) -> None:
        """The run failed: compile nothing more (the thread ends after the unit it is in)."""
        self.cancelled = True
        self.go.set()

    def start(self) -> None:
        """Let the compiles begin (the first denoise step ran, or the decode is next)."""
        self.go.set()

    def join(self, timeout: float | None = None) -> "Ahead":
        self.go.set()  # a run with no denoise step (or one that ended early) still gets its units
        if self.thread is not None:
            start = time.perf_counter()
            self.thread.join(timeout)
            self.waited += time.perf_counter() - start
        return self

    def figures(self) -> dict:
        """For the sidecar: units compiled, their wall seconds, the decode's wait, each unit's compile seconds (in
        a pool of threads: what one compile took beside the others), the first error."""
        return {"units": len(self.compiled), "seconds": round(self.seconds, 2), "waited_s": round(self.waited, 2),
                "unit_s": {name: round(seconds, 2) for name, seconds in self.compiled},
                "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}"[:300]}


def enabled(options: Any) -> bool:
    """On an accelerator unless `VIDAX_COMPILE_AHEAD=0`; on a CPU only when `VIDAX_COMPILE_AHEAD=1` asks: there the
    host is the device, and a background compile takes cores from the run's own work."""
    from vidax.zoo.compute.runtime import platform

    asked = os.environ.get(AHEAD_ENV, "").strip().lower()
    if asked in ("0", "false", "no") or not getattr(options, "compile_ahead", True):
        return False
    return asked in ("1", "true", "yes") or platform() != "cpu"


def compile_ahead(family: Any, options: Any) -> Ahead:
    """Start compiling `family`'s decode units for `options` (its layout chosen) in a daemon thread."""
    ahead = Ahead()
    if not enabled(options) or getattr(options, "no_decode", False):
        return ahead
    ahead.thread = threading.Thread(target=_compile, args=(family, options, ahead), name="vidax-compile-ahead",
                                    daemon=True)
    ahead.thread.start()
    return ahead


COMPILE_NICENESS = 10  # added to the compile threads' nice value: the run's own threads come first on the cores


def lower_priority() -> None:
    """Run this thread at a lower scheduling priority (Linux: each thread has its own nice value). On the v5e host
    the cold denoise took 40 s longer than the warm one while eleven compile threads held the cores, and the host
    loop that feeds the chip needs a core when a step ends."""
    try:
        here = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, here, os.getpriority(os.PRIO_PROCESS, here) + COMPILE_NICENESS)
    except (AttributeError, OSError):  # no per-thread priority here: compile at the same priority
        pass


def compile_threads() -> int:
    """Threads compiling at once: the host's cores less `KEEP_CORES`, at least one."""
    return max(1, (os.cpu_count() or 1) - KEEP_CORES)


def _compile(family: Any, options: Any, ahead: Ahead) -> None:
    import jax

    from vidax.zoo.compute.runtime import xla_only_options
    from vidax.zoo.generator.generation import matmul_precision
    from vidax.zoo.plan.dry_run import FAMILY_STAGES, weight_dtype
    from vidax.zoo.plan.dry_run_units import DecodeUnit

    stages = FAMILY_STAGES.get(family.entry.family)
    if stages is None:
        return

    def compiled(name: str, lowered: Any) -> None:
        start = time.perf_counter()
        lowered.compile()
        ahead.compiled.append((name, time.perf_counter() - start))

    ahead.go.wait()
    if ahead.cancelled:
        return
    began = time.perf_counter()
    try:
        with matmul_precision(options.dtype), ThreadPoolExecutor(compile_threads(), "vidax-compile",
                                                                        initializer=lower_priority) as pool:
            s = family.resolve_settings(options)
            futures = []
            for unit in stages.vae_decode(family, s, weight_dtype(options), jax.devices()[0]):
                unit = DecodeUnit(*unit)
                args = [a if i in unit.static else _unplaced(a) for i, a in enumerate(unit.args)]
                options = xla_only_options() if unit.xla_only else None  # as the decode's own call compiles it
                lowered = jax.jit(unit.fn, donate_argnums=unit.donate, static_argnums=unit.static,
                                  compiler_options=options).lower(*args)
                if ahead.cancelled:
                    break
                futures.append(pool.submit(compiled, unit.name, lowered))
            for future in futures:
                future.result()
    except Exception as error:  # noqa: BLE001 - the decode compiles what is missing itself
        ahead.error = error
    ahead.seconds = time.perf_counter() - began


def _unplaced(tree: Any) -> Any:
    """Abstract arrays without a sharding: arrays on the default device lower without one, and a unit compiled
    ahead must be the very program the decode lowers."""
    import jax

    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if isinstance(a, jax.ShapeDtypeStruct) else a,
                        tree)
