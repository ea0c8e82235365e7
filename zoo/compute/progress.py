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
from pathlib import Path
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
        self.resident_parts: dict[str, dict] = {}  # the same by kind (`resident_parts`): what a stage left
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
        self.mark(f"{name} begins")
        start = time.perf_counter()
        programs = ProgramCount(thread=threading.get_ident())  # not a background compile's
        try:
            with programs:
                yield
        finally:
            seconds = time.perf_counter() - start
            self.times[name] = self.times.get(name, 0.0) + seconds
            self.resident[name] = _resident_bytes()
            self.resident_parts[name] = resident_parts()
            self.mark(f"{name} ends")
            earlier = self.programs.get(name, {"compiled": 0, "loaded": 0, "seconds": 0.0, "longest_s": 0.0})
            self.programs[name] = {key: round(max(earlier[key], value) if key == "longest_s" else earlier[key] + value, 2)
                                   for key, value in programs.figures().items()}
            self.progress.end(name, seconds)


def _resident_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def resident_parts() -> dict[str, int]:
    """The process's resident bytes by kind, from /proc/self/status on Linux: `anon` (the process's own
    allocations, the runtime's staging buffers among them), `file` (mapped checkpoint pages, which the kernel
    can drop) and `shmem`; `total` alone where the kernel does not tell them apart; `{}` off Linux."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    kinds = {"RssAnon": "anon", "RssFile": "file", "RssShmem": "shmem"}
    if not kinds.keys() & fields.keys():  # a kernel that keeps the total alone (gVisor, the TPU hosts' sandbox)
        kinds = {"VmRSS": "total"}
    return {name: int(fields[key].split()[0]) * 1024 for key, name in kinds.items() if key in fields}


class ResidentPeak:
    """The largest resident set seen while the block runs, by kind, and when (epoch seconds): sampled every
    `interval` seconds in a thread. The kernel's own peak (`ru_maxrss`) says how much, not what it held or
    when, and a host peak inside a stage (staging buffers during a transfer) is gone by the stage's end.

        with ResidentPeak() as peak: ...
        peak.figures()   # {"bytes": ..., "anon": ..., "file": ..., "shmem": ..., "at": ...}
    """

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.peak: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        parts = resident_parts()
        total = sum(parts.values())
        if parts and total > self.peak.get("bytes", -1):
            self.peak = {"bytes": total, **parts, "at": time.time()}

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "ResidentPeak":
        self.sample()
        self._thread = threading.Thread(target=self._watch, name="vidax-resident-peak", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def figures(self) -> dict:
        return dict(self.peak)


def release(tree: Any) -> None:
    """Free the device buffers of a finished stage's weights now, not when Python gets to them."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted():
            leaf.delete()
