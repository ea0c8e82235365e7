"""vidax-serve on two processes: process 0 serves HTTP, process 1 runs every job in step with it.

The job's DiT runs on a mesh over both processes' devices (sp=2, one CPU device each). A job's frames
must equal the same layout run in this one process; a running job cancelled through the API stops both
processes at the same step and the next job still runs; stopping process 0 ends process 1 cleanly.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from tests.backend_level import xla_flags
from tests.multihost.launch import NOISE, free_port
from vidax.serve.launch import ServerProcess
from vidax.zoo.wan.tiny import TRAINED

MODEL = "wan2.1-t2v-1.3b"
JOB = dict(prompt="a red circle moves left on a blue background", height=32, width=32, frames=5, steps=2, seed=3,
           guidance=5.0, format="npy")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The embedded tiny Wan, converted (a multi-process run reads a vidax-convert output) in fp32."""
    from vidax.translator.models import ConvertOptions, convert_model

    folder = tmp_path_factory.mktemp("serve_multihost") / "converted"
    convert_model(ConvertOptions(MODEL, source=str(TRAINED), out=folder, dtype="float32"))
    return folder


@pytest.fixture(scope="module")
def servers(converted, tmp_path_factory):
    """Process 1 (follower) and process 0 (HTTP) joined through a loopback coordinator."""
    root = tmp_path_factory.mktemp("serve_multihost_run")
    env = {**os.environ, "XLA_FLAGS": xla_flags(1), "JAX_PLATFORMS": "cpu",
           "JAX_DEFAULT_MATMUL_PRECISION": "highest", "VIDAX_CACHE_DIR": str(root / "jax_cache"),
           "HF_HUB_OFFLINE": "1"}
    coordinator = f"127.0.0.1:{free_port()}"
    common = ["--weights", str(converted), "--dtype", "float32", "--sp", "2", "--no-warmup",
              "--coordinator", coordinator, "--num-processes", "2"]
    follower = subprocess.Popen([sys.executable, "-m", "vidax.cli.serve", MODEL, "--data", str(root / "data1"),
                                 *common, "--process-id", "1"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    leader = ServerProcess(MODEL, root / "data0", [*common, "--process-id", "0"], env=env, log=root / "leader.log")
    try:
        leader.start(timeout=300)
        yield leader, follower
    finally:
        leader.stop()
        follower.kill()


def submit(server, **fields) -> str:
    answer = httpx.post(server.url + "/v1/videos", json={**JOB, **fields}, timeout=30)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def wait(server, job_id: str, until, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{server.url}/v1/videos/{job_id}", timeout=30).json()
        if until(status):
            return status
        time.sleep(0.1)
    raise TimeoutError(f"{status}\n{server.log()[-3000:]}")


def test_cancel_stops_both_processes_then_a_job_matches_one_process(servers, converted, tmp_path):
    leader, follower = servers
    long_job = submit(leader, steps=400)
    wait(leader, long_job, lambda s: s["status"] == "running" and (s["progress"] or {}).get("stage") == "denoise"
         and (s["progress"] or {}).get("step", 0) >= 1)
    assert httpx.delete(f"{leader.url}/v1/videos/{long_job}", timeout=30).status_code in (200, 202)
    cancelled = wait(leader, long_job, lambda s: s["status"] in ("cancelled", "failed", "succeeded"))
    assert cancelled["status"] == "cancelled", cancelled

    job = submit(leader)  # both processes are still in step: the next job runs on the two-process mesh
    done = wait(leader, job, lambda s: s["status"] in ("succeeded", "failed", "cancelled"))
    assert done["status"] == "succeeded", (done, leader.log()[-3000:])
    frames = np.load(io.BytesIO(httpx.get(f"{leader.url}/v1/videos/{job}/content", timeout=30).content))

    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.api import generate

    fields = {k: v for k, v in JOB.items() if k != "format"}
    reference = generate(GenerateOptions(model=MODEL, weights=str(converted), dtype="float32", sp=2,
                                         compile_cache=False, out=tmp_path / "one.npy", **fields))
    assert frames.shape == reference.frames.shape
    np.testing.assert_allclose(frames, reference.frames, atol=1e-6, rtol=0)


def test_stopping_process_0_ends_the_follower_cleanly(servers):
    leader, follower = servers
    leader.stop()  # SIGTERM: a graceful shutdown, then a normal exit
    assert leader.process.returncode == 0, leader.log()[-3000:]
    output, _ = follower.communicate(timeout=60)
    assert follower.returncode == 0, output[-3000:]
    assert not NOISE.search(output), output[-3000:]


def test_processes_compare_file_inputs_by_contents(tmp_path):
    """Each host writes a job's uploads to its own folder: the records compared across processes name
    files (the image, a family's video input) by their bytes, not their paths."""
    from vidax.zoo.compute.distributed import request_record
    from vidax.zoo.generator.options import GenerateOptions

    def options(folder, data: bytes):
        folder.mkdir()
        (folder / "clip.mp4").write_bytes(data)
        (folder / "first.png").write_bytes(data[::-1])
        return GenerateOptions(model=MODEL, prompt="p", image=folder / "first.png", extra={"video": folder / "clip.mp4",
                               "guidance_2": 3.0}, out=folder / "out.mp4")

    here, there = options(tmp_path / "a", b"frames"), options(tmp_path / "b", b"frames")
    assert request_record(here) == request_record(there)
    assert request_record(here) != request_record(options(tmp_path / "c", b"other frames"))
