"""Timing and budget helpers shared by both sides (no jax or torch import here).

Both sides time the same way: one untimed warm-up call, then up to `repeats` calls, each
bracketed by a device synchronisation and read off the host's monotonic clock (`perf_counter`);
the figure quoted is the median. Repeats stop early once `cap_s` seconds of timed calls have run
or the run's deadline has passed, so one slow case cannot eat the whole budget.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def time_calls(fn: Callable[[], Any], sync: Callable[[Any], Any], repeats: int, *, cap_s: float = 20.0,
               deadline: float | None = None, warmup: int = 1) -> dict:
    """`{"first": s, "times": [s, ...], "median": s, "best": s}` of `fn`, synchronised by `sync(result)`."""
    start = time.perf_counter()
    for _ in range(warmup):
        sync(fn())
    first = time.perf_counter() - start
    times: list[float] = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - start)
        if sum(times) > cap_s or (deadline is not None and time.time() > deadline):
            break
    return {"first": first, "times": times, "median": statistics.median(times), "best": min(times)}


class Budget:
    """A wall-clock budget for the whole run; parts ask before they start and are skipped if late."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.start = clock()
        self.seconds = float(seconds)
        self.deadline = self.start + self.seconds
        self.skipped: list[str] = []

    def left(self) -> float:
        return self.deadline - self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def allows(self, name: str, estimate_s: float) -> bool:
        """True if `estimate_s` more seconds fit; else the part is recorded as skipped."""
        left = self.left()
        if estimate_s <= left:
            return True
        self.skipped.append(f"{name}: needs ~{estimate_s:.0f} s, {max(left, 0):.0f} s left of {self.seconds:.0f} s")
        return False
