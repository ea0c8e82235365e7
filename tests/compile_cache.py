"""The test run's shared persistent compile cache, opened the one way every test process opens it (the pytest
workers through tests/conftest.py, the multi-process children through tests/multihost/worker.py)."""

from __future__ import annotations

import os

COMPILE_CACHE_ENV = "VIDAX_TEST_COMPILE_CACHE"


def open_shared_compile_cache() -> None:
    """Point jax's persistent cache at the run's folder (`VIDAX_TEST_COMPILE_CACHE`; unset or "off": nothing)
    and open it with one trivial compile, then switch jax's flag off again.

    jax decides once per process, at its first compile, whether its cache is used; after that
    `jax_enable_compilation_cache` no longer changes it. So the tests see vidax's own setting as before
    (`VIDAX_NO_COMPILE_CACHE=1`) while every compile of the process goes through the shared folder."""
    folder = os.environ.get(COMPILE_CACHE_ENV)
    if not folder or folder == "off":
        return
    import jax

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.jit(lambda x: x + 1)(0)
    jax.config.update("jax_enable_compilation_cache", False)  # vidax sets it from VIDAX_NO_COMPILE_CACHE anyway


# What the run's programs cost: compiled (a persistent-cache miss, written to the folder) or loaded (a hit: a
# program some test of the run had compiled before, in this process or another). Each process counts its
# own; tests/conftest.py sums the workers' counts into the run's summary.
_EVENTS = {"/jax/compilation_cache/cache_misses": "compiled", "/jax/compilation_cache/cache_hits": "loaded"}
COUNTS = {"compiled": 0, "loaded": 0}


def count_programs() -> None:
    """Count this process's compiles through the shared cache from jax's own monitoring events."""
    from jax import monitoring

    def listen(event: str, **_) -> None:
        if event in _EVENTS:
            COUNTS[_EVENTS[event]] += 1

    monitoring.register_event_listener(listen)


def summary(counts: dict[str, int]) -> str:
    """One line on the run's programs; with the cache folder at hand, also how many distinct programs it holds
    (a compile beyond those compiled a program twice: two workers at once, before either had written it)."""
    line = (f"{counts['compiled'] + counts['loaded']} programs through the run's compile cache: "
            f"{counts['compiled']} compiled, {counts['loaded']} loaded (compiled earlier in the run)")
    folder = os.environ.get(COMPILE_CACHE_ENV)
    if folder and os.path.isdir(folder):
        distinct = sum(name.endswith("-cache") for name in os.listdir(folder))
        line += f"; {distinct} distinct programs in the cache, {counts['compiled'] - distinct} compiled twice"
    return line
