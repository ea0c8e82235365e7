"""vidax-serve with `--lora`: requests change the LoRA's strength or switch it off on the placed weights.

A real uvicorn serving the embedded wan-tiny with a PEFT LoRA of its blocks' linears at 0.8; jobs at a tiny
size and 2 steps, frames as float32 `.npy`. A job at `lora_strength` 0 must equal vidax-gen without the LoRA
bit for bit (the base arrays themselves are put back), and the LoRA at its server strength again must equal
the first job bit for bit; another strength gives another video.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.lora.formats import low_rank_factors, wan_modules, write_peft
from tests.serve.conftest import ARTIFACTS, MODEL
from tests.serve.test_api import error, submit, wait
from vidax.serve.launch import ServerProcess

TINY_DIT = Path(__file__).resolve().parents[2] / "zoo" / "wan" / "tiny_model" / "transformer"
JOB = {"prompt": "a red circle moves left on a blue background", "seed": 3, "height": 32, "width": 32, "frames": 5,
       "steps": 2, "format": "npy"}


@pytest.fixture(scope="module")
def lora_server(serve_env, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_lora")
    state = load_file(TINY_DIT / "diffusion_pytorch_model.safetensors")
    layers = len([k for k in state if k.endswith("attn1.to_q.weight")])
    lora = write_peft(root / "style.safetensors", low_rank_factors(state, wan_modules(layers), 4, 21), alpha=4.0)
    ARTIFACTS.mkdir(exist_ok=True)
    process = ServerProcess(MODEL, root / "data", env=serve_env, log=ARTIFACTS / "lora-server.log",
                            args=["--lora", f"{lora}=0.8", "--no-warmup"])
    process.start(timeout=300)
    yield process, lora
    process.stop()


def _frames(server, body: dict) -> tuple[np.ndarray, dict]:
    status = wait(server, submit(server, body), timeout=300)
    assert status["status"] == "succeeded", status
    return np.load(io.BytesIO(httpx.get(server.url + status["content"], timeout=30).content)), status


def test_strength_changes_and_switching_off_restore_the_base(lora_server, serve_env, tmp_path):
    server, lora = lora_server
    first, status = _frames(server, JOB)
    off, off_status = _frames(server, {**JOB, "lora_strength": 0})
    other, _ = _frames(server, {**JOB, "lora_strength": [-0.5]})
    again, _ = _frames(server, JOB)
    np.testing.assert_array_equal(again, first)
    assert np.abs(first - off).max() > 1e-3 and np.abs(other - first).max() > 1e-3 and np.abs(other - off).max() > 1e-3
    record = status["settings"]["loras"]["transformer"][0]
    assert (record["source"], record["strength"]) == (lora.name, 0.8)  # no server path in a response
    assert f"--lora {lora}=0.0" in off_status["command"]

    words = shlex.split(off_status["command"])  # the same job with vidax-gen, the LoRA left out
    at = words.index("--lora")
    base = tmp_path / "base.npy"
    command = [sys.executable, "-m", "vidax.cli.gen", *words[1:at], *words[at + 2:-1], str(base)]
    subprocess.run(command, env=serve_env, check=True, capture_output=True, timeout=300)
    np.testing.assert_array_equal(off, np.load(base))


def test_bad_strengths_are_400(lora_server):
    server, _ = lora_server
    assert "lora_strength" in httpx.get(server.url + "/v1/models").json()["data"][0]["fields"]
    for value in ([1.0, 2.0], "strong", True):
        message = error(httpx.post(server.url + "/v1/videos", json={**JOB, "lora_strength": value}), 400)
        assert "lora_strength must be a number or a list of 1 numbers" in message
