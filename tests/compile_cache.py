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
