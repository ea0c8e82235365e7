"""What a stretch of work cost in programs: compiled by XLA, or loaded from the persistent compile cache.

JAX reports every program it obtains from its backend (an XLA compile, or a load from the persistent cache)
as one `/jax/core/compile/backend_compile_duration` event, and each load as a `cache_hits` event besides; a
program found in the process's own caches (the same function at the same shapes called again) reports
nothing. So a `ProgramCount` opened around a request tells a warm request (nothing obtained), a request
served from disk (loaded only) and a cold one (compiled), with the seconds each took.

    with ProgramCount() as count:
        generate(options)
    print(count.line())   # "3 programs compiled (41.2 s), 2 loaded from the compile cache (0.8 s)"
"""

from __future__ import annotations

import dataclasses
import threading

_BACKEND = "/jax/core/compile/backend_compile_duration"
_HIT = "/jax/compilation_cache/cache_hits"

_lock = threading.Lock()
_open: list["ProgramCount"] = []
_registered = False


def _counting() -> list["ProgramCount"]:
    """The open counts this thread's event belongs to (JAX reports a compile in the thread that asked for it)."""
    here = threading.get_ident()
    return [count for count in _open if count.thread is None or count.thread == here]


def _on_duration(event: str, duration: float, **_) -> None:
    if event == _BACKEND:
        with _lock:
            for count in _counting():
                count.obtained += 1
                count.seconds += duration
                count.longest = max(count.longest, duration)


def _on_event(event: str, **_) -> None:
    if event == _HIT:
        with _lock:
            for count in _counting():
                count.loaded += 1


def _register() -> None:
    global _registered
    if _registered:
        return
    from jax import monitoring

    monitoring.register_event_duration_secs_listener(_on_duration)
    monitoring.register_event_listener(_on_event)
    _registered = True


@dataclasses.dataclass
class ProgramCount:
    """Programs obtained from the backend while open: by every thread of the process (a background compile too),
    or by one thread alone (`thread`, its `threading.get_ident()`)."""

    obtained: int = 0  # compiled or loaded
    loaded: int = 0  # of those, from the persistent compile cache
    seconds: float = 0.0
    longest: float = 0.0  # the one program that took longest (a compile, or a load)
    thread: int | None = None

    @property
    def compiled(self) -> int:
        return self.obtained - self.loaded

    def __enter__(self) -> "ProgramCount":
        _register()
        with _lock:
            _open.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            if self in _open:
                _open.remove(self)

    def line(self) -> str:
        """One line: what the stretch compiled and loaded ("no program compiled or loaded" when warm)."""
        if not self.obtained:
            return "no program compiled or loaded (every one was in memory)"
        return (f"{self.compiled} program(s) compiled, {self.loaded} loaded from the compile cache "
                f"({self.seconds:.1f} s)")

    def figures(self) -> dict:
        return {"compiled": self.compiled, "loaded": self.loaded, "seconds": round(self.seconds, 2),
                "longest_s": round(self.longest, 2)}
