"""Test-wide settings. Runs before any test module imports jax.

Every test process sees 8 fake CPU devices, so sharded runs can be compared with one device, and
matmuls run at highest precision so fp32 parity with the PyTorch references is meaningful.
"""

import os

# `VIDAX_TEST_TPU=1 python -m pytest -m tpu tests/tpu` runs the TPU tier on a TPU host, in one process
# (one process can hold the chip): jax keeps its TPU there. Everywhere else every test runs on the CPU.
ON_TPU = os.environ.get("VIDAX_TEST_TPU", "").strip() in ("1", "true", "yes")
TPU_TIER_SKIP = "the TPU tier needs a TPU: on a TPU host run VIDAX_TEST_TPU=1 python -m pytest -m tpu tests/tpu"
if not ON_TPU:
    from tests.backend_level import TEST_FLAGS  # 8 fake devices, LLVM unoptimized: why in tests/backend_level.py

    os.environ.setdefault("XLA_FLAGS", TEST_FLAGS)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VIDAX_NO_COMPILE_CACHE", "1")
os.environ.setdefault("VIDAX_NO_CPU_TUNING", "1")  # no test times matmuls: the built-in row blocks (zoo/compute/cpu_tuning.py)

import pytest  # noqa: E402


# One persistent compile cache for the whole run, shared by the xdist workers (and by a worker with itself
# after `_release_compiled_programs` drops its programs): a program one process compiled, another loads.
# The controller makes the folder (or the caller names it) and removes it at the end of the run;
# `VIDAX_TEST_COMPILE_CACHE=off` runs without it.
from tests.compile_cache import (  # noqa: E402
    COMPILE_CACHE_ENV, COUNTS, WRITTEN, count_programs, open_shared_compile_cache, summary)

_OWN_COMPILE_CACHE: list[str] = []


def pytest_configure(config):
    if not hasattr(config, "workerinput") and not os.environ.get(COMPILE_CACHE_ENV) and not ON_TPU:
        import tempfile

        _OWN_COMPILE_CACHE.append(tempfile.mkdtemp(prefix="vidax-test-compile-cache-"))
        os.environ[COMPILE_CACHE_ENV] = _OWN_COMPILE_CACHE[0]  # the xdist workers start after this, with it
    try:
        import jax
    except ImportError:  # the translator's isolation tests run without jax
        return
    jax.config.update("jax_default_matmul_precision", "highest")
    if hasattr(config, "workerinput") or config.getoption("numprocesses", None) in (None, 0):
        if not ON_TPU:  # the processes that run tests (not an xdist controller); a TPU host keeps vidax's own
            open_shared_compile_cache()
            count_programs()
            from tests.xla_figures import open_book

            open_book()  # XLA's figures of the dry-run programs compiled in earlier runs (tests/xla_figures.py)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """After each test module, a worker that has grown past a few GiB drops jax's compiled programs and
    traces. One worker runs ~900 modules' worth of programs of every family; late in the run XLA's CPU
    compiler crashed (SIGSEGV, twice, both in tests/wan_vae late in a full run; the module alone passes),
    so the worker is kept small instead of accumulating every program for the whole session."""
    yield
    import gc
    import sys

    import psutil

    if "jax" in sys.modules and psutil.Process().memory_info().rss > 3 * 2**30:
        sys.modules["jax"].clear_caches()
        gc.collect()


# A test that skips proves nothing: an oracle that failed to import (torch, diffusers, transformers)
# would turn its tests green. Any skip, at collection or in a test, fails the run.
_SKIPPED: list[str] = []


_TPU_TIER_SKIPPED: list[str] = []


def pytest_collection_modifyitems(config, items):
    """Off a TPU, the `tpu` tier is skipped with its reason (the one skip that does not fail the run);
    on one, it must run on the chip itself: no CPU fallback passes it."""
    for item in items:
        if item.get_closest_marker("tpu") is not None and not ON_TPU:
            item.add_marker(pytest.mark.skip(reason=TPU_TIER_SKIP))


def pytest_collectreport(report):
    if report.skipped:
        _SKIPPED.append(f"{report.nodeid or 'collection'}: {_reason(report)}")


def pytest_runtest_logreport(report):
    if report.skipped and _reason(report).endswith(TPU_TIER_SKIP):
        _TPU_TIER_SKIPPED.append(report.nodeid)
    elif report.skipped:
        _SKIPPED.append(f"{report.nodeid}: {_reason(report)}")


def _reason(report) -> str:
    longrepr = report.longrepr
    return str(longrepr[-1]) if isinstance(longrepr, tuple) else str(longrepr)


def pytest_unconfigure(config):
    import shutil
    import sys

    if "jax" in sys.modules and not ON_TPU:
        from tests.xla_figures import close_book

        close_book()

    for folder in _OWN_COMPILE_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole test files to one worker, the longest first (tests/scheduling.py); `--dist` other than the
    default `load` is left to xdist."""
    if config.getvalue("dist") != "load":
        return None
    from tests.scheduling import make_scheduler

    return make_scheduler(config, log)


def pytest_sessionfinish(session, exitstatus):
    if _SKIPPED and session.exitstatus == 0:
        session.exitstatus = 1
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its counts go to the controller
        session.config.workeroutput["compile_counts"] = dict(COUNTS)
        session.config.workeroutput["compile_keys"] = list(WRITTEN)


_WORKER_COUNTS: list[dict[str, int]] = []
_WORKER_KEYS: list[list[str]] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", {})
    if output.get("compile_counts"):
        _WORKER_COUNTS.append(output["compile_counts"])
        _WORKER_KEYS.append(output.get("compile_keys", []))


def pytest_terminal_summary(terminalreporter):
    counts = [*_WORKER_COUNTS, COUNTS]  # the workers' (xdist), or this process's own
    totals = {key: sum(c[key] for c in counts) for key in COUNTS}
    if sum(totals.values()):
        terminalreporter.section("compiled programs")
        terminalreporter.line(summary(totals, [*_WORKER_KEYS, WRITTEN]))
    if _TPU_TIER_SKIPPED:
        terminalreporter.section("TPU tier skipped", yellow=True)
        terminalreporter.line(f"{len(_TPU_TIER_SKIPPED)} tests: {TPU_TIER_SKIP}")
    if _SKIPPED:
        terminalreporter.section("skipped tests fail the run (a missing oracle must not pass)", red=True)
        for line in _SKIPPED:
            terminalreporter.line(line)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)
