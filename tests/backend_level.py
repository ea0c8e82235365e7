"""The XLA flags of the test processes and of the processes they start.

The test processes compile at XLA's CPU backend level 0, LLVM unoptimized (`TEST_FLAGS`, set by
tests/conftest.py): their programs are tiny and compiled about once each, so LLVM's optimizing passes were
most of their time (`python -m bench.runtime.bench_test_level` times a module each way). They also compile
their fusions with XLA's legacy CPU emitters (`--xla_cpu_use_fusion_emitters=false`): the newer emitters run
an MLIR pipeline per fusion, about half of a compile-bound module's backend compile at level 0 (jax's
compile-duration events). Interleaved (`bench_test_level`, load 0.99), tests/wan/test_pipeline.py took 28.3 s
with the tests' flags, 37.2 s at level 0 alone and 48.5 s at the default level; the semantic test's 96
generations, which run rather than compile, 113.2, 96.2 and 50.4 s, hence their child at the default level and
emitters (bench/results/cpu-2026-12-07/bench_test_level.txt). Level 0 makes the same programs into slower machine
code with other last bits (no fused multiply-adds). A process a test starts and compares with its own takes the same flags
(`xla_flags`). Two kinds of test call their vidax side at the default level, with the default emitters, in a
child instead (`call_at_default_level`): those whose time goes to running compiled code rather than compiling
it (the embedded model's generations in tests/embedded), and those whose parity margin is narrower than the
bits level 0 moves — there the default level is also what a user's run compiles. (The CogVideoX 5B I2V test was
one, 1.66e-5 of its 2e-5 against diffusers' fp32 frames: its tiny model turned fp32 rounding into ~1.3e-5 on
either side; on a better conditioned one it runs at level 0, 5.5e-6 from the exact frames.)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVEL_FLAG = "--xla_backend_optimization_level"
EMITTERS_FLAG = "--xla_cpu_use_fusion_emitters"
DEVICES_FLAG = "--xla_force_host_platform_device_count"
TEST_FLAGS = f"{DEVICES_FLAG}=8 {LEVEL_FLAG}=0 {EMITTERS_FLAG}=false"


def xla_flags(devices: int | None = None, default_level: bool = False) -> str:
    """This process's XLA flags with `devices` fake CPU devices instead of its 8 (None: the platform's one
    device, as a user's machine has) and, with `default_level`, without the backend level and the emitters' flag."""
    drop = (DEVICES_FLAG, LEVEL_FLAG, EMITTERS_FLAG) if default_level else (DEVICES_FLAG,)
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(drop)]
    return " ".join([f"{DEVICES_FLAG}={devices}"] * (devices is not None) + flags)

_CHILD = """
import importlib, os, pickle, sys
sys.path[:0] = [os.environ["DEFAULT_LEVEL_IMPORT_ROOT"], os.environ["DEFAULT_LEVEL_REPO"]]
import jax
jax.config.update("jax_default_matmul_precision", "highest")
from tests.compile_cache import open_shared_compile_cache
open_shared_compile_cache()
with open(sys.argv[1], "rb") as f:
    module, name, args = pickle.load(f)
result = getattr(importlib.import_module(module), name)(*args)
with open(sys.argv[2], "wb") as f:
    pickle.dump(result, f)
"""


def call_at_default_level(function, *args, timeout: float = 900):
    """`function(*args)` in a fresh process whose XLA flags are this one's without the backend level; returns
    its result (8 fake devices, as here). `function` is a module-level function of a test module (imported again there by name), its
    arguments and result picklable."""
    module = sys.modules[function.__module__]
    import_root = Path(module.__file__).resolve().parents[function.__module__.count(".")]
    env = {**os.environ, "XLA_FLAGS": xla_flags(8, default_level=True), "JAX_PLATFORMS": "cpu",
           "DEFAULT_LEVEL_IMPORT_ROOT": str(import_root), "DEFAULT_LEVEL_REPO": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="vidax-default-level-") as folder:
        call, result = Path(folder) / "call.pickle", Path(folder) / "result.pickle"
        call.write_bytes(pickle.dumps((function.__module__, function.__name__, args)))
        done = subprocess.run([sys.executable, "-c", _CHILD, str(call), str(result)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return pickle.loads(result.read_bytes())
