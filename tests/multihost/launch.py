"""Starting the processes of a multi-process test run (`tests/multihost/worker.py`) on loopback."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.backend_level import xla_flags

ROOT = Path(__file__).resolve().parents[2]
# what must not reach a user: Python tracebacks, the runtime's C++ log lines and fatal-error dumps
NOISE = re.compile(r"Traceback|^[IWEF]\d{4} \d\d:\d\d|Check failure|terminate called|Aborted", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cases: dict, out: Path, devices_per_process: int, heartbeat: int = 60, timeout: float = 900, *,
           told: tuple[int, ...] = (2, 2), join_timeout: int = 300, port: int | None = None,
           ends: list | None = None):
    """Run the processes to the end; returns [(returncode, output), ...] and the wall seconds.

    `told[i]`: the process count process i is given (one process per entry); `ends`: receives each
    process's end (`time.time()`; exact for processes that end in id order, as a survivor after the one
    that died before it does).
    """
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the caller's after ours
    env = {**os.environ, "XLA_FLAGS": xla_flags(devices_per_process),
           "JAX_PLATFORMS": "cpu", "JAX_DEFAULT_MATMUL_PRECISION": "highest", "VIDAX_NO_COMPILE_CACHE": "1",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": python_path, "HEARTBEAT": str(heartbeat),
           "JOIN_TIMEOUT": str(join_timeout)}
    port = port or free_port()
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.multihost.worker", str(port), str(told[i]), str(i),
                               str(out), json.dumps(cases)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for i in range(len(told))]
    results = []
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - start)))
            results.append((proc.returncode, output))
            if ends is not None:
                ends.append(time.time())
    finally:
        for proc in procs:
            proc.kill()
    return results, time.perf_counter() - start


def death_time(output: str) -> float:
    """When a worker told to die did (`time.time()`)."""
    return float(re.search(r"dies at ([0-9.]+)", output).group(1))


def error_line(output: str) -> str:
    """The one line a failed process printed (`error: ...`), checking there is exactly one and no noise."""
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and not NOISE.search(output), output[-4000:]
    return lines[0]
