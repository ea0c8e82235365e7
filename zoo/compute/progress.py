"""Progress hooks, stage timing, and freeing a finished stage's device buffers.

    timer = StageTimer(progress)
    with timer.stage("text encode"): ...
    release(device_tree)                                            # before the next stage needs memory
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import jax


class Progress:
    """Progress hooks a pipeline calls; the default does nothing (the CLI shows rich bars).

    `begin(stage, total)` opens a stage (total: steps or bytes, None when unknown), `advance(stage,
    amount, note)` moves it, `end(stage, seconds)` closes it.
    """

    def begin(self, stage: str, total: int | None = None) -> None:
        pass

    def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
        pass

    def end(self, stage: str, seconds: float) -> None:
        pass


class StageTimer:
    """Wall time per named stage, reported through `Progress`; results are blocked on before the clock stops."""

    def __init__(self, progress: Progress | None = None):
        self.progress = progress or Progress()
        self.times: dict[str, float] = {}
        self.marks: dict[str, float] = {}  # moments (epoch seconds) of a run's firsts: "denoise first step"
        self.resident: dict[str, int] = {}  # the process's resident bytes as each stage ended
        self.programs: dict[str, dict] = {}  # programs each stage's own thread obtained (`compiles.ProgramCount`)
        self.on_mark: list = []  # callbacks(name) for each first mark (a background compile waits for one)

    def mark(self, name: str) -> None:
        """Note the first time `name` happened (later calls keep the first)."""
        if name not in self.marks:
            self.marks[name] = time.time()
            for callback in self.on_mark:
                callback(name)

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[None]:
        from vidax.zoo.compute.compiles import ProgramCount

        self.progress.begin(name, total)
        start = time.perf_counter()
        programs = ProgramCount(thread=threading.get_ident())  # not a background compile's
        try:
            with programs:
                yield
        finally:
            seconds = time.perf_counter() - start
            self.times[name] = self.times.get(name, 0.0) + seconds
            self.resident[name] = _resident_bytes()
            earlier = self.programs.get(name, {"compiled": 0, "loaded": 0, "seconds": 0.0, "longest_s": 0.0})
            self.programs[name] = {key: round(max(earlier[key], value) if key == "longest_s" else earlier[key] + value, 2)
                                   for key, value in programs.figures().items()}
            self.progress.end(name, seconds)


def _resident_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def release(tree: Any) -> None:
    """Free the device buffers of a finished stage's weights now, not when Python gets to them."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted():
            leaf.delete()
