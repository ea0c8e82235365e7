"""`vidax-gen`: one-line errors with a non-zero exit, `--list`, and the embedded `wan-tiny` model end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from vidax.cli.gen import app
from vidax.zoo.video_io import read_video

PROMPT = "a red kite over a grey sea"


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_line_error(result, fragment: str) -> None:
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output  # no traceback
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """The embedded model's folder, built once for this module (VIDAX_TINY_DIR points the factory at it)."""
    import os

    folder = tmp_path_factory.mktemp("wan_tiny")
    old = os.environ.get("VIDAX_TINY_DIR")
    os.environ["VIDAX_TINY_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("VIDAX_TINY_DIR")
    else:
        os.environ["VIDAX_TINY_DIR"] = old


def test_list_names_every_wan_variant():
    result = _invoke("--list")
    assert result.exit_code == 0, result.output
    for name in ("wan-tiny", "wan2.1-t2v-1.3b", "wan2.1-i2v-14b-480p", "wan2.2-ti2v-5b", "wan2.2-t2v-a14b"):
        assert name in result.output


def test_unknown_model_is_one_line():
    _one_line_error(_invoke("wan2.1-t2v-1.3bb", "--prompt", PROMPT), "did you mean wan2.1-t2v-1.3b")


@pytest.mark.parametrize("args, fragment", [
    (("wan2.1-t2v-1.3b",), "Wan-AI/Wan2.1-T2V-1.3B-Diffusers: not in the local Hugging Face cache"),  # HF_HUB_OFFLINE
    (("wan2.1-t2v-1.3b", "--weights", "/no/such/folder"), "/no/such/folder: no such folder, and not a Hub repo id"),
])
def test_weights_errors_are_one_line(tmp_path, args, fragment):
    _one_line_error(_invoke(*args, "--prompt", PROMPT, "--out", str(tmp_path / "v.mp4")), fragment)


@pytest.mark.parametrize("flags, fragment", [
    (("--frames", "0"), "--frames must be positive, got 0"),  # 8 runs: Wan rounds it to 9 as diffusers does
    (("--height", "70"), "--height 70 is not a multiple of 16 for this model; nearest valid: 64"),
    (("--width", "100"), "nearest valid: 96"),
    (("--tp", "3"), "cannot be split over tp=3"),
    (("--tp", "2", "--dp", "64"), "devices needed"),
    (("--image", "nowhere.png"), "text-to-video only"),
    (("--sampler", "ddim"), "unknown sampler 'ddim'"),
    (("--out", "video.gif"), "output must end in .mp4 or .npy"),
    (("--latents", "missing.npy"), "latents file not found"),
])
def test_user_errors_are_one_line(tiny_dir, tmp_path, flags, fragment):
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--out", str(tmp_path / "v.mp4"), *flags)
    _one_line_error(result, fragment)


def test_nan_during_sampling_names_the_step(tiny_dir, tmp_path):
    latents = np.zeros((1, 8, 5, 8, 8), np.float32)
    latents[0, 0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", latents)
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--latents", str(tmp_path / "nan.npy"), "--out", str(tmp_path / "v.mp4"))
    _one_line_error(result, "sampling step 1/20 (timestep 999) produced NaN or Inf latents")
    assert not (tmp_path / "v.mp4").exists()


def test_debug_shows_the_traceback(tiny_dir, tmp_path):
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--frames", "0", "--debug")
    assert result.exit_code != 0 and result.exception is not None


def test_unreadable_image_is_one_line(tmp_path):
    from vidax.zoo.video_io import VideoIOError, read_image

    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(VideoIOError, match="cannot read image"):
        read_image(tmp_path / "broken.png")
    with pytest.raises(VideoIOError, match="image not found"):
        read_image(tmp_path / "absent.png")


def test_wan_tiny_writes_playable_mp4_and_sidecar(tiny_dir, tmp_path):
    out = tmp_path / "kite.mp4"
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--out", str(out), "--save-latents", "--no-compile-cache")
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output.replace("\n", "") and "note:" not in result.output
    frames = read_video(out)
    assert frames.shape == (17, 64, 64, 3) and frames.std() > 1  # decodes, and is not a constant image
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["model"] == "wan-tiny" and sidecar["prompt"] == PROMPT and sidecar["seed"] == 0
    assert sidecar["steps"] == 20 and sidecar["height"] == 64 and sidecar["vidax_version"]
    assert np.load(tmp_path / "kite.latents.npy").shape == (1, 8, 5, 8, 8)
    # when each stage began and ended, from the process's start: the time to the first step, taken apart
    moments = sidecar["moments"]
    order = ["process start", "load begins", "load ends", "encode begins", "encode ends", "denoise begins",
             "denoise weights placed", "denoise first step", "denoise ends", "decode begins", "decode ends"]
    assert list(sorted(moments, key=moments.get)) == order, moments
    sampled = sidecar["memory_peaks"]["host_resident_sampled"]  # (the kernel's own peak, ru_maxrss, lags behind)
    assert sampled["bytes"] == sampled["anon"] + sampled["file"] + sampled["shmem"] and sampled["anon"] > 0
    assert moments["load ends"] <= sampled["at"] <= moments["decode ends"] + 60
    assert set(sidecar["resident_parts_after_stage"]) == {"encode", "denoise", "decode"}
    # same seed, same video: the weights and the noise are deterministic (compared losslessly)
    again = tmp_path / "again.npy"
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--out", str(again), "--save-latents", "--no-compile-cache")
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(tmp_path / "again.latents.npy"), np.load(tmp_path / "kite.latents.npy"))
    # the MP4 holds those frames: H.264 (crf 18, 4:2:0 chroma) smears this colour noise per pixel, but
    # each frame's mean colour survives to within a few levels, and a wrong frame order or a
    # transposed image would not
    lossless = np.load(again) * 255
    np.testing.assert_allclose(frames.mean(axis=(1, 2)), lossless.mean(axis=(1, 2)), atol=4)


def test_fps_flag_sets_the_video_rate_and_a_rounded_frame_count_is_said(tiny_dir, tmp_path):
    """`--frames 6` runs as 5 frames, as WanPipeline runs it (4k + 1, with a warning): vidax says so in one line
    and the sidecar keeps the line; a run at the size asked for (the test above) says nothing."""
    out = tmp_path / "v.npy"
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--out", str(out), "--fps", "12", "--steps", "1",
                     "--frames", "6", "--no-compile-cache")
    assert result.exit_code == 0, result.output
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["fps"] == 12
    note = "note: wan-tiny runs --frames 6 as 5: its reference pipeline rounds these sizes to the ones it generates"
    assert note in result.output.replace("\n", "") and sidecar["size_note"] == note, result.output
    assert np.load(out).shape[0] == 5 and sidecar["frames"] == 5


@pytest.mark.parametrize("flags, fragment", [
    (("--dtype", "float64"), "unknown --dtype 'float64' (choose from float32, bfloat16)"),
    (("--guidance-2", "3"), "only two-expert models"),
    (("--no-such-flag", "3"), "unknown option --no-such-flag for wan-tiny (its own flags: --guidance-2, --last-image"),
])
def test_bad_values_and_flags_are_one_line(tiny_dir, tmp_path, flags, fragment):
    _one_line_error(_invoke("wan-tiny", "--prompt", PROMPT, "--out", str(tmp_path / "v.mp4"), *flags), fragment)


def test_a_decode_of_fewer_frames_than_asked_is_said():
    """LTX-2 and HunyuanVideo take any frame count, as their pipelines do, and their VAEs decode 8k + 1 or 4k + 1
    frames of it: `--frames 5` on LTX-2 wrote one frame and said nothing. The note compares the frames written."""
    from types import SimpleNamespace

    from vidax.zoo.generator.generation import size_note

    asked = SimpleNamespace(height=64, width=64, frames=5)
    family = SimpleNamespace(name="ltx2")
    assert size_note(family, asked, asked, 1) == ("note: ltx2 runs --frames 5 as 1: its reference pipeline rounds "
                                                  "these sizes to the ones it generates")
    assert size_note(family, asked, asked, 5) is None
    assert size_note(family, SimpleNamespace(height=None, width=None, frames=None), asked, 1) is None
