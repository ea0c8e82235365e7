"""vidax-serve with a Wan VACE model: its path flags as multipart uploads, through a real uvicorn.

The tiny VACE pipeline of `tests/wan_vace` (saved with `save_pretrained`, read through the real specs), served
with `--weights`; jobs at the control video's own size (no height or width given) and 2 steps, frames as
float32 `.npy`. A job with an uploaded control MP4 and two reference images must equal, bit for bit, the
vidax-gen command the job shows (one `generate` call) run on the same files; the same clip sent as its frames
(PNG files, sent out of order) must give the same video again.
"""

from __future__ import annotations

import io
import json
import random
import shlex
import shutil
import subprocess
import sys

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.backend_level import xla_flags
from tests.serve.conftest import ARTIFACTS
from tests.serve.test_api import error, wait
from tests.wan_vace.test_pipeline import MODEL, _clip, _reference
from vidax.serve.launch import ServerProcess
from vidax.zoo.video_io import read_video, write_mp4

JOB = {"prompt": "a red kite over a grey sea", "negative_prompt": "blurry", "seed": 5, "steps": 2, "guidance": 4.0,
       "format": "npy"}


@pytest.fixture(scope="module")
def vace_env(serve_env) -> dict:
    """The folder's child environment at the test processes' backend level (tests/backend_level.py), for the VACE
    server and the vidax-gen run it is compared with alike: their jobs are three 2-step runs of a tiny model, so
    LLVM's passes were most of the server's first job (57 programs of a model no other server serves)."""
    return {**serve_env, "XLA_FLAGS": xla_flags(None)}


@pytest.fixture(scope="module")
def vace(vace_env, tmp_path_factory):
    """(server, files): the served tiny VACE model and the upload files (the control MP4, the same clip's decoded
    frames as PNGs, two reference images of other sizes)."""
    root = tmp_path_factory.mktemp("serve_vace")
    _reference(root / "model")
    files = root / "files"
    files.mkdir()
    write_mp4(files / "control.mp4", _clip(1), fps=16)
    for i, frame in enumerate(read_video(files / "control.mp4")):  # what the MP4 decodes to, losslessly
        Image.fromarray(frame).save(files / f"frame_{i:03d}.png")
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(files / "ref_tall.png")
    Image.fromarray(_clip(3, frames=1, height=20, width=60)[0]).save(files / "ref_wide.png")
    ARTIFACTS.mkdir(exist_ok=True)
    process = ServerProcess(MODEL, root / "data", env=vace_env, log=ARTIFACTS / "vace-server.log",
                            args=["--weights", str(root / "model"), "--dtype", "float32", "--no-warmup"])
    process.start(timeout=300)
    yield process, files
    process.stop()


def _upload(path, name=None) -> tuple:
    return name or path.name, path.read_bytes(), "application/octet-stream"


def _job(server, files: list[tuple]) -> dict:
    response = httpx.post(server.url + "/v1/videos", data={"request": json.dumps(JOB)}, files=files, timeout=60)
    assert response.status_code == 202, response.text
    status = wait(server, response.json()["id"], timeout=600)
    assert status["status"] == "succeeded", status
    return status


def _frames(server, status: dict) -> np.ndarray:
    return np.load(io.BytesIO(httpx.get(server.url + status["content"], timeout=30).content))


def test_control_video_and_two_references_equal_vidax_gen(vace, vace_env, tmp_path):
    server, files = vace
    model = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert model["uploads"]["reference_images"] == {"flag": "--reference-image", "kind": "file", "multiple": True}
    assert model["uploads"]["video"] == {"flag": "--video", "kind": "file", "multiple": False}

    refs = [("reference_images", _upload(files / name)) for name in ("ref_tall.png", "ref_wide.png")]
    status = _job(server, [("video", _upload(files / "control.mp4")), *refs])
    served = _frames(server, status)
    assert served.shape == (5, 32, 48, 3)  # the control video's frames and size
    assert status["uploads"] == {"video": "video.mp4", "reference_images": ["reference_images-0.png",
                                                                            "reference_images-1.png"]}
    settings = status["settings"]
    assert settings["video"] == "video.mp4" and settings["latent_shape"] == [1, 16, 2 + 2, 4, 6]
    assert settings["reference_images"] == ["reference_images-0.png", "reference_images-1.png"]
    assert str(server.data) not in json.dumps(status) + json.dumps(httpx.get(
        server.url + status["content"], params={"variant": "sidecar"}).json())  # no server paths in responses

    words = shlex.split(status["command"])  # the command the job shows, on the same files under those names
    assert words.count("--reference-image") == 2 and words[-2:] == ["--out", "video.npy"]
    shutil.copy(files / "control.mp4", tmp_path / "video.mp4")
    for i, name in enumerate(("ref_tall.png", "ref_wide.png")):  # the order they were sent in
        shutil.copy(files / name, tmp_path / f"reference_images-{i}.png")
    subprocess.run([sys.executable, "-m", "vidax.cli.gen", *words[1:]], env=vace_env, cwd=tmp_path, check=True,
                   capture_output=True, timeout=600)
    np.testing.assert_array_equal(served, np.load(tmp_path / "video.npy"))

    frames = sorted(files.glob("frame_*.png"))
    random.Random(0).shuffle(frames)  # sent out of order: ranked by their file names
    as_frames = _job(server, [*(("video", _upload(path)) for path in frames), *refs])
    assert as_frames["uploads"]["video"] == "video" and "--video video " in as_frames["command"]
    np.testing.assert_array_equal(_frames(server, as_frames), served)

    swapped = _job(server, [("video", _upload(files / "control.mp4")), *refs[::-1]])
    assert np.abs(_frames(server, swapped) - served).max() > 1e-4  # the order reaches the video (measured 3.5e-4)


def test_bad_uploads_get_one_line(vace):
    server, files = vace
    response = httpx.post(server.url + "/v1/videos", json={**JOB, "video": "/etc/passwd"})
    assert "video is a file the server does not read from a path: send it as a multipart upload" in error(response, 400)
    request = {"request": json.dumps(JOB)}
    frames = [("video", _upload(files / "frame_000.png")), ("video", ("notes.png", b"not an image", "image/png"))]
    response = httpx.post(server.url + "/v1/videos", data=request, files=frames)
    assert "cannot read image" in error(response, 400) and str(server.data) not in response.text
    response = httpx.post(server.url + "/v1/videos", data=request, files=[("mask", _upload(files / "control.mp4"))])
    assert error(response, 400) == "--mask needs --video (the mask marks what of the video to generate)"
    response = httpx.post(server.url + "/v1/videos", data=request, files=[("image", _upload(files / "ref_tall.png"))])
    assert "takes no image-to-video conditioning" in error(response, 400)
