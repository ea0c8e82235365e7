"""The test run's shared persistent compile cache, opened the one way every test process opens it (the pytest
workers through tests/conftest.py, the multi-process children through tests/multihost/worker.py)."""

from __future__ import annotations

import logging
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
# program some test of the run had compiled before, in this process or another), from jax's own monitoring
# events; and the keys this process wrote, from jax's cache log, so that the run can tell a program two
# workers compiled (at once, before either had written it) from distinct ones. Each test process counts its
# own; tests/conftest.py sums the workers' counts into the run's summary. Processes a test starts are not
# counted.
_EVENTS = {"/jax/compilation_cache/cache_misses": "compiled", "/jax/compilation_cache/cache_hits": "loaded"}
COUNTS = {"compiled": 0, "loaded": 0}
WRITTEN: list[str] = []
_CACHE_LOGGER = "jax._src.compilation_cache"  # jax writes "Writing <module> to persistent compilation cache
# with key <key>" there at DEBUG (at WARNING with jax_explain_cache_misses)


class _KeysWritten(logging.Filter):
    """Notes each key the cache writes and lets only warnings on: the DEBUG records the logger now makes for
    this filter go no further (no test's captured log fills with them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Writing ") and len(record.args or ()) == 2:
            WRITTEN.append(str(record.args[1]))
        return record.levelno >= logging.WARNING


def count_programs() -> None:
    """Count this process's compiles through the shared cache and note the keys it writes."""
    from jax import monitoring

    def listen(event: str, **_) -> None:
        if event in _EVENTS:
            COUNTS[_EVENTS[event]] += 1

    monitoring.register_event_listener(listen)
    logger = logging.getLogger(_CACHE_LOGGER)
    logger.addFilter(_KeysWritten())
    logger.setLevel(logging.DEBUG)


def summary(counts: dict[str, int], written: list[list[str]]) -> str:
    """One line on the run's programs; `written` holds each process's written keys (a key in two lists is a
    program compiled twice)."""
    line = (f"{counts['compiled'] + counts['loaded']} programs through the run's compile cache: "
            f"{counts['compiled']} compiled, {counts['loaded']} loaded (compiled earlier in the run)")
    keys = [key for process in written for key in process]
    if keys:
        line += f"; {len(keys) - len(set(keys))} compiled twice (two workers at once)"
    return line
