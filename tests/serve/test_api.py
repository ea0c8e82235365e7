"""vidax-serve's HTTP API against a real uvicorn on 127.0.0.1 serving the embedded wan-tiny.

Jobs run at the model's default size (what the warm-up compiled), so each takes about a second.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from tests.serve.conftest import ARTIFACTS, MODEL
from vidax.serve.launch import ServerProcess
from vidax.zoo.video_io import read_video

PROMPT = "a red kite over a grey sea"


def submit(server, body: dict, **kwargs) -> str:
    response = httpx.post(server.url + "/v1/videos", json=body, timeout=30, **kwargs)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "queued"
    return response.json()["id"]


def wait(server, job_id: str, until=("succeeded", "failed", "cancelled"), timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{server.url}/v1/videos/{job_id}", timeout=10).json()
        if status["status"] in until:
            return status
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} still {status['status']}")


def events(server, job_id: str) -> list[dict]:
    """Every status event of a job until it ends."""
    seen = []
    with httpx.stream("GET", f"{server.url}/v1/videos/{job_id}/events", timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
    return seen


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["message"]


def png_bytes() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_health_and_models(server):
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ready" and health["model"] == MODEL
    model = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert model["id"] == MODEL
    assert {"height", "width", "frames", "steps", "seed"} <= set(model["defaults"])
    assert httpx.get(server.url + "/openapi.json").json()["paths"]["/v1/videos"]["post"]


@pytest.fixture(scope="module")
def defaults(server) -> dict:
    return httpx.get(server.url + "/v1/models").json()["data"][0]["defaults"]


def test_video_streams_progress_and_equals_vidax_gen(server, serve_env, defaults, tmp_path):
    """Frames compared as float32 .npy ("format": "npy", vidax-gen --out x.npy): x264 does not write the same
    bytes twice for the same frames, so decoded MP4s of one video differ from write to write."""
    job_id = submit(server, {"prompt": PROMPT, "seed": 7, "format": "npy"})
    mp4_job = submit(server, {"prompt": PROMPT, "seed": 7})
    seen = events(server, job_id)
    assert seen[-1]["status"] == "succeeded", seen[-1]
    steps = [e["progress"]["step"] for e in seen if e["status"] == "running" and e["progress"]["stage"] == "denoise"]
    moves = [step for i, step in enumerate(steps) if i == 0 or step != steps[i - 1]]  # back to it after a nested stage
    assert moves == list(range(defaults["steps"] + 1)), [e["progress"] for e in seen]  # every step, in order
    final = seen[-1]
    assert final["settings"]["seed"] == 7 and final["settings"]["steps"] == defaults["steps"]
    assert final["times"]["denoise"] > 0
    assert final["settings"]["layout_choice"] != "as given"  # the planner's choice, remembered from the warm-up
    assert final["command"] == f"vidax-gen {MODEL} --prompt '{PROMPT}' --seed 7 --out video.npy"
    sidecar = httpx.get(server.url + final["content"], params={"variant": "sidecar"}).json()
    assert sidecar["seed"] == 7 and sidecar["outputs"] == {"video": f"{job_id}.npy", "sidecar": f"{job_id}.json"}
    assert str(server.data) not in json.dumps(final) + json.dumps(sidecar)  # no server paths in responses

    served = tmp_path / "served.npy"
    served.write_bytes(httpx.get(server.url + final["content"]).content)
    cli_out = tmp_path / "cli.npy"
    words = shlex.split(final["command"])  # the page's "same video with vidax-gen" line, run as given
    command = [sys.executable, "-m", "vidax.cli.gen", *words[1:-1], str(cli_out)]
    subprocess.run(command, env=serve_env, check=True, capture_output=True, timeout=300)
    ours = np.load(served)
    size = (defaults["frames"], defaults["height"], defaults["width"], 3)
    assert ours.shape == size and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, np.load(cli_out))

    mp4 = wait(server, mp4_job)
    video = httpx.get(server.url + mp4["content"])
    assert video.status_code == 200 and video.headers["content-type"] == "video/mp4"
    part = httpx.get(server.url + mp4["content"], headers={"Range": "bytes=10-109"})
    assert part.status_code == 206 and part.content == video.content[10:110]
    (tmp_path / "served.mp4").write_bytes(video.content)
    assert read_video(tmp_path / "served.mp4").shape == size


def test_a_job_after_the_warm_up_obtains_no_program_and_the_log_says_so(server):
    """The warm-up compiled (or loaded) every program of the default size: two jobs there obtain none, each
    logging it; a job at a new size obtains its own (so the line tells the two apart)."""
    warm = [submit(server, {"prompt": PROMPT, "seed": seed}) for seed in (5, 6)]
    assert all(wait(server, job)["status"] == "succeeded" for job in warm)
    # the new size is test_lora.py's (32 x 32, 5 frames, 2 steps): whichever server meets it first compiles it
    # and the other loads it from the run's compile cache, which the line below tells apart from "none" as well
    other = submit(server, {"prompt": PROMPT, "height": 32, "width": 32, "frames": 5, "steps": 2})
    assert wait(server, other)["status"] == "succeeded"
    log = server.log()
    for job in warm:
        assert f"job {job}: no program compiled or loaded (every one was in memory)" in log, log[-3000:]
    line = next(line for line in log.splitlines() if f"job {other}: " in line)
    assert "program(s) compiled" in line or "loaded from the compile cache" in line, line


def test_cancel_queued_and_running(server):
    # long enough to be running when it is cancelled, however fast its steps (the run's compile cache may hold them)
    long_job = submit(server, {"prompt": PROMPT, "steps": 2000})
    queued = submit(server, {"prompt": PROMPT})
    response = httpx.delete(f"{server.url}/v1/videos/{queued}")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    deadline = time.monotonic() + 120
    while True:
        status = httpx.get(f"{server.url}/v1/videos/{long_job}").json()
        progress = status["progress"] or {}
        if progress.get("stage") == "denoise" and progress.get("step", 0) >= 1:
            break
        assert status["status"] in ("queued", "running") and time.monotonic() < deadline, status
        time.sleep(0.02)
    response = httpx.delete(f"{server.url}/v1/videos/{long_job}")
    assert response.status_code == 202 and response.json()["status"] == "cancelling"
    final = wait(server, long_job)
    assert final["status"] == "cancelled" and final["progress"]["step"] < 2000, final
    never = wait(server, queued)
    assert never["status"] == "cancelled" and never["started"] is None
    assert "already ended" in error(httpx.delete(f"{server.url}/v1/videos/{queued}"), 409)
    assert "has no video" in error(httpx.get(f"{server.url}/v1/videos/{long_job}/content"), 409)


def _cli_error(*args: str) -> str:
    from vidax.cli.gen import app

    result = CliRunner().invoke(app, [MODEL, "--prompt", PROMPT, *args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0][len("error: "):]


@pytest.mark.parametrize("fields, flags", [
    ({"frames": 0}, ["--frames", "0"]),
    ({"height": 70}, ["--height", "70"]),
    ({"sampler": "ddim"}, ["--sampler", "ddim"]),
    ({"steps": 0}, ["--steps", "0"]),
    ({"fps": -1}, ["--fps", "-1"]),
    ({"seed": -1}, ["--seed", "-1"]),
    ({"guidance_2": 3}, ["--guidance-2", "3"]),
])
def test_bad_settings_get_vidax_gens_message(server, tiny_env, fields, flags):
    message = error(httpx.post(server.url + "/v1/videos", json={"prompt": PROMPT, **fields}), 400)
    assert message == _cli_error(*flags)


def test_image_upload_to_text_to_video_model_gets_vidax_gens_message(server, tiny_env, tmp_path):
    image = tmp_path / "first.png"
    image.write_bytes(png_bytes())
    response = httpx.post(server.url + "/v1/videos", data={"request": json.dumps({"prompt": PROMPT})},
                          files={"image": ("first.png", png_bytes(), "image/png")})
    assert error(response, 400) == _cli_error("--image", str(image))


@pytest.mark.parametrize("body, fragment", [
    ({"prompt": PROMPT, "image": "/etc/passwd"}, "send it as a multipart upload"),
    ({"prompt": PROMPT, "out": "/tmp/x.mp4"}, "requests name no path on the server"),
    ({"prompt": PROMPT, "latents": "/tmp/x.npy"}, "requests name no path on the server"),
    ({"prompt": PROMPT, "colour": "red"}, f"unknown field 'colour' for {MODEL}"),
    ({"prompt": PROMPT, "height": "64"}, "height must be an integer, got '64'"),
    ({"prompt": PROMPT, "steps": True}, "steps must be an integer"),
    ({"negative_prompt": "blur"}, "give a prompt"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_requests_are_400(server, body, fragment):
    assert fragment in error(httpx.post(server.url + "/v1/videos", json=body), 400)


def test_bad_bodies_and_unknown_jobs(server):
    assert "not JSON" in error(httpx.post(server.url + "/v1/videos", content=b"{", headers={"content-type": "application/json"}), 400)
    assert "multipart/form-data" in error(httpx.post(server.url + "/v1/videos", content=b"x"), 400)
    chunked = httpx.post(server.url + "/v1/videos", content=iter([b'{"prompt": "x"}']),
                         headers={"content-type": "application/json"})
    assert "Content-Length" in error(chunked, 411)
    response = httpx.post(server.url + "/v1/videos", data={"request": json.dumps({"prompt": PROMPT})},
                          files={"image": ("x.png", b"not an image", "image/png")})
    assert "cannot read image" in error(response, 400) and str(server.data) not in response.text
    for path in ("/v1/videos/0123456789abcdef", "/v1/videos/..%2F..%2Fetc%2Fpasswd", "/v1/videos/jobs.sqlite3/content"):
        error(httpx.get(server.url + path), 404)
    assert "no job" in error(httpx.delete(server.url + "/v1/videos/0123456789abcdef"), 404)
    assert "limit" in error(httpx.get(server.url + "/v1/videos", params={"limit": 0}), 400)


def test_list_is_paged_newest_first(server):
    ids = [submit(server, {"prompt": PROMPT, "seed": seed}) for seed in (1, 2)]
    first = httpx.get(server.url + "/v1/videos", params={"limit": 1}).json()
    assert [job["id"] for job in first["data"]] == [ids[1]] and first["next"] is not None
    second = httpx.get(server.url + "/v1/videos", params={"limit": 1, "before": first["next"]}).json()
    assert [job["id"] for job in second["data"]] == [ids[0]]
    for job_id in ids:
        assert wait(server, job_id)["status"] == "succeeded"


@pytest.fixture(scope="module")
def guarded(serve_env, tmp_path_factory):
    """A second server with a token, a queue of one and a 1 KiB upload limit (no warm-up: it runs no job to the end)."""
    process = ServerProcess(MODEL, tmp_path_factory.mktemp("guarded"), env=serve_env, log=ARTIFACTS / "guarded.log",
                            args=["--token", "s3cret", "--max-queue", "1", "--max-upload-mb", str(1 / 1024),
                                  "--no-warmup"])
    process.start(timeout=120)
    yield process
    process.stop()


def test_token_is_required_but_for_health(guarded):
    assert httpx.get(guarded.url + "/health").status_code == 200
    for path in ("/", "/v1/models", "/v1/videos", "/docs", "/openapi.json"):
        assert "needs its token" in error(httpx.get(guarded.url + path), 401), path
    assert httpx.get(guarded.url + "/v1/videos", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(guarded.url + "/v1/videos", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    with httpx.Client(base_url=guarded.url) as browser:  # the page's link sets a cookie its own requests carry
        assert browser.get("/", params={"token": "s3cret"}).status_code == 200
        assert browser.get("/v1/videos").status_code == 200


def test_upload_limit_and_full_queue(guarded):
    auth = {"Authorization": "Bearer s3cret"}
    response = httpx.post(guarded.url + "/v1/videos", headers=auth, data={"request": json.dumps({"prompt": PROMPT})},
                          files={"image": ("big.png", b"\0" * 4096, "image/png")})
    assert "over 1024 bytes" in error(response, 413)
    codes = [httpx.post(guarded.url + "/v1/videos", json={"prompt": PROMPT}, headers=auth).status_code
             for _ in range(3)]  # one runs (it compiles: seconds), one waits, the next finds the queue full
    assert codes[0] == 202 and 429 in codes, codes
    message = error(httpx.post(guarded.url + "/v1/videos", json={"prompt": PROMPT}, headers=auth), 429)
    assert "queue is full" in message


def test_failed_warm_up_is_503(serve_env, tmp_path):
    """--tp 3 cannot split the tiny model's 2 heads: the warm-up fails and the server says why."""
    with ServerProcess(MODEL, tmp_path, env=serve_env, args=["--tp", "3"]) as process:
        health = httpx.get(process.url + "/health")
        assert health.status_code == 503 and "tp=3" in health.json()["error"]
        assert "failed to load" in error(httpx.post(process.url + "/v1/videos", json={"prompt": PROMPT}), 503)


def test_other_hosts_need_a_token():
    from vidax.cli.serve import app

    result = CliRunner().invoke(app, [MODEL, "--host", "0.0.0.0"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "give --token" in lines[0], result.output
