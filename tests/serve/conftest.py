"""One vidax-serve process serving the embedded `wan-tiny` for the tests of this folder (session-wide).

The children share a persistent compile cache, the test run's (`VIDAX_TEST_COMPILE_CACHE`, a `serve` folder in
it) when there is one, else the session's temporary folder, with every program kept however fast it compiled:
a later server (the durability test's restart, the token server, the LoRA and VACE servers on the other worker)
and the `vidax-gen` runs the tests compare with read the programs the first one compiled.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.compile_cache import COMPILE_CACHE_ENV
from vidax.serve.launch import ServerProcess

MODEL = "wan-tiny"
ARTIFACTS = Path(__file__).parent / "artifacts"  # screenshots and server logs (gitignored)


@pytest.fixture(scope="session")
def serve_env(tmp_path_factory) -> dict:
    """The environment of every child process: the tiny model's folder, a shared compile cache, one CPU device."""
    root = tmp_path_factory.getbasetemp() / "serve_shared"
    run_cache = os.environ.get(COMPILE_CACHE_ENV)
    cache = Path(run_cache) / "serve" if run_cache and run_cache != "off" else root / "jax_cache"
    env = dict(os.environ)
    env.update(VIDAX_TINY_DIR=str(root / "wan_tiny"), VIDAX_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu",
               HF_HUB_OFFLINE="1", XLA_FLAGS="",
               # jax keeps only programs that took a second to compile unless told otherwise: wan-tiny's take less
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    env.pop("VIDAX_NO_COMPILE_CACHE", None)
    return env


@pytest.fixture(scope="session")
def server(serve_env, tmp_path_factory):
    """A warm server (warm-up done) with the default flags."""
    data = tmp_path_factory.mktemp("serve_data")
    ARTIFACTS.mkdir(exist_ok=True)
    process = ServerProcess(MODEL, data, env=serve_env, log=ARTIFACTS / f"server-{os.getpid()}.log")
    process.start(timeout=300)
    yield process
    process.stop()


@pytest.fixture
def tiny_env(serve_env, monkeypatch):
    """This process sees the server's tiny model folder (for vidax-gen run in-process)."""
    monkeypatch.setenv("VIDAX_TINY_DIR", serve_env["VIDAX_TINY_DIR"])
    return serve_env
