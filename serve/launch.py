"""Start `vidax-serve` in a child process on a free loopback port and wait until its model is warm.

For scripts, notebooks, the tests and the bench:

    with ServerProcess("wan-tiny", data="jobs") as server:
        httpx.post(server.url + "/v1/videos", json={"prompt": "a kite"})
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A `vidax-serve MODEL --data DATA` child process; `start()` returns once `/health` says ready.

    Args:
      model: registered model name.
      data: the server's data folder.
      args: further vidax-serve flags (`["--token", "t"]`).
      env: environment of the child (default: this process's).
      log: file the child's output goes to (default: `DATA/server.log`, appended).
    """

    def __init__(self, model: str, data: str | Path, args: list[str] = (), env: dict | None = None,
                 log: str | Path | None = None):
        self.model, self.data, self.args = model, Path(data), list(args)
        self.env = dict(os.environ if env is None else env)
        self.log_path = Path(log) if log is not None else self.data / "server.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 300.0, wait_ready: bool = True) -> "ServerProcess":
        self.data.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "vidax.cli.serve", self.model, "--port", str(self.port),
                   "--data", str(self.data), *self.args]
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        self.wait(timeout, ready=wait_ready)
        return self

    def wait(self, timeout: float, ready: bool = True) -> dict:
        """Poll `/health` until it answers (ready: until the warm-up is over); the last answer."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vidax-serve exited with {self.process.returncode}: {self.log()[-2000:]}")
            try:
                health = httpx.get(self.url + "/health", timeout=5).json()
                if not ready or health["status"] in ("ready", "failed"):
                    return health
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"vidax-serve not ready after {timeout} s: {self.log()[-2000:]}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.is_file() else ""

    def kill(self) -> None:
        """SIGKILL: no clean-up at all, as a crash or power cut leaves it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
