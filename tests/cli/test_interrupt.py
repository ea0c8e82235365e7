"""Ctrl-C at any moment of a real `vidax-gen wan-tiny` run: exit code 130, one line, nothing at --out.

The moments are chosen from inside the process by a `sitecustomize` module this test puts on the
subprocess's path (the tool itself is the installed console script, unchanged):

  import      SIGINT while jax is being imported (start-up)
  dropped     SIGINT inside a garbage-collector callback during start-up: Python raises the
              KeyboardInterrupt there and drops it ("Exception ignored in ..."), as it drops one that
              lands in jax's `_xla_gc_callback`; the run must still stop
  sampling    the subprocess marks when its denoising loop runs; the test then sends SIGINT from outside
  writing     SIGINT as the outputs are being written (the first file opened in --out's folder)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.backend_level import xla_flags

SITECUSTOMIZE = textwrap.dedent('''
    import gc, os, signal, sys, threading, time

    WHEN, MARKER, OUT = os.environ["SIGINT_WHEN"], os.environ["SIGINT_MARKER"], os.environ["SIGINT_OUT"]
    fired = []

    def interrupt():
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)  # the handler runs here, inside the hook

    def main_stack_has(name):
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None:
            if frame.f_code.co_name == name:
                return True
            frame = frame.f_back
        return False

    def on_import(event, args):
        if not fired and event == "import" and args[0] == "jax":
            interrupt()

    def on_gc(phase, info):
        if not fired and phase == "start" and "vidax.zoo.registry" in sys.modules:
            interrupt()

    def on_open(event, args):
        if not fired and event == "open" and str(args[0]).startswith(OUT) and "w" in str(args[1]):
            interrupt()

    def watch():
        while not main_stack_has("denoise"):
            time.sleep(0.005)
        open(MARKER, "w").close()

    if WHEN == "import":
        sys.addaudithook(on_import)
    elif WHEN == "dropped":
        gc.callbacks.append(on_gc)
    elif WHEN == "writing":
        sys.addaudithook(on_open)
    elif WHEN == "sampling":
        threading.Thread(target=watch, daemon=True).start()
''')


def _run(tmp_path: Path, when: str) -> tuple[subprocess.CompletedProcess, Path]:
    hooks, out = tmp_path / "hooks", tmp_path / "out"
    hooks.mkdir()
    out.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "sampling-started"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(hooks), os.environ.get("PYTHONPATH")) if p),
           "SIGINT_WHEN": when, "SIGINT_MARKER": str(marker), "SIGINT_OUT": str(out),
           "JAX_PLATFORMS": "cpu", "VIDAX_NO_COMPILE_CACHE": "1", "HF_HUB_OFFLINE": "1"}
    # one CPU device, as a user's machine has; compiled at the test processes' backend level (tests/backend_level.py:
    # LLVM's passes were most of a run's time here, and no moment of an interruption depends on them)
    env["XLA_FLAGS"] = xla_flags(None)
    command = [str(Path(sys.executable).with_name("vidax-gen")), "wan-tiny", "--prompt", "a kite", "--out",
               str(out / "kite.mp4"), "--save-latents", "--steps", "2", "--frames", "1"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if when == "sampling":
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.exists(), "the run never reached its denoising loop"
        proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr), out


@pytest.mark.parametrize("when", ["import", "dropped", "sampling", "writing"])
def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path, when):
    done, out = _run(tmp_path, when)
    assert done.returncode == 130, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    assert done.stderr.strip().splitlines()[-1] == "interrupted", done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == []  # no video, sidecar, latents or temporary file
    dropped = done.stderr.count("Exception ignored in")  # the traceback Python prints as it drops one
    assert done.stderr.count("Traceback") == dropped == (when == "dropped"), done.stderr[-3000:]
