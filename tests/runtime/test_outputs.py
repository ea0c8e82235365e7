"""Every file vidax writes appears whole or not at all: the MP4, `.npy` frames and `.audio.npy`, the
sidecar JSON, saved latents, and vidax-convert's `vidax_model.json` and copied configs.

Faults are real where the kernel can make them: a file-size limit (RLIMIT_FSIZE, the short write a full
disk gives) for the writers' own write calls, PyAV's and NumPy's included; and an ENOSPC from fsync
(monkeypatched), which a full disk reports for data the page cache took. After each, nothing is at the
destination (an earlier file there is untouched) and no temporary file is left beside it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal

import numpy as np
import pytest

from vidax.translator import OutputError

FRAMES = np.random.default_rng(0).random((5, 32, 48, 3), dtype=np.float32)
AUDIO = np.random.default_rng(1).uniform(-0.5, 0.5, (2, 8000)).astype(np.float32)


@contextlib.contextmanager
def file_size_limit(nbytes: int):
    """Writes past `nbytes` in any file fail with EFBIG (SIGXFSZ ignored), as a full disk fails them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _write_video(path):
    from vidax.zoo.video_io import write_frames

    write_frames(path, FRAMES, 16, audio=AUDIO, sample_rate=16000)


@pytest.mark.parametrize("name", ["clip.mp4", "clip.npy"])
def test_a_short_write_leaves_nothing(tmp_path, name):
    with file_size_limit(4000), pytest.raises(OutputError, match="disk full or file size limit|cannot write"):
        _write_video(tmp_path / name)
    assert _listing(tmp_path) == []  # no 12 kB unplayable MP4, no truncated .npy, no temporary file


@pytest.mark.parametrize("name", ["clip.mp4", "clip.npy"])
def test_enospc_at_fsync_leaves_nothing_and_keeps_the_earlier_file(tmp_path, monkeypatch, name):
    (tmp_path / name).write_bytes(b"an earlier video")
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(OutputError, match="disk full"):
        _write_video(tmp_path / name)
    assert _listing(tmp_path) == [name] and (tmp_path / name).read_bytes() == b"an earlier video"


def test_frames_audio_and_latents_appear_together(tmp_path):
    """A `.npy` output's frames, its `.audio.npy` and the latents are one group: written whole, read back."""
    from vidax.translator.output import staged_files
    from vidax.zoo.generator.options import save_latents
    from vidax.zoo.video_io import write_frames, write_sidecar

    out = tmp_path / "clip.npy"
    with staged_files() as files:
        write_frames(out, FRAMES, 16, audio=AUDIO, sample_rate=16000, files=files)
        save_latents(out, np.ones((1, 4, 2, 3, 5), np.float32), files)
        write_sidecar(out, {"seed": 1, "guidance": float("nan")}, files)
        assert _listing(tmp_path) == sorted(p.name for p, _ in files.pairs)  # only temporary names so far
    assert _listing(tmp_path) == ["clip.audio.npy", "clip.json", "clip.latents.npy", "clip.npy"]
    np.testing.assert_array_equal(np.load(out), FRAMES)
    np.testing.assert_array_equal(np.load(tmp_path / "clip.audio.npy"), AUDIO)
    assert np.load(tmp_path / "clip.latents.npy").shape == (1, 4, 2, 3, 5)
    sidecar = json.loads((tmp_path / "clip.json").read_text(), parse_constant=pytest.fail)  # strict JSON
    assert sidecar["seed"] == 1 and sidecar["guidance"] == "nan"


def test_an_error_in_the_group_leaves_none_of_it(tmp_path):
    from vidax.translator.output import staged_files, write_file
    from vidax.zoo.video_io import write_frames

    with pytest.raises(KeyboardInterrupt), staged_files() as files:
        write_frames(tmp_path / "clip.npy", FRAMES, 16, files=files)
        write_file(tmp_path / "clip.json", "{}", files)
        raise KeyboardInterrupt  # Ctrl-C between writing and committing
    assert _listing(tmp_path) == []


@pytest.fixture
def scheduler_folder(tmp_path):
    """A diffusers-layout folder with CogVideoX's files-only components (no weights to convert)."""
    (tmp_path / "src" / "scheduler").mkdir(parents=True)
    (tmp_path / "src" / "scheduler" / "scheduler_config.json").write_text(json.dumps({"x": "y" * 6000}))
    (tmp_path / "src" / "tokenizer").mkdir()
    for name in ("spiece.model", "tokenizer_config.json"):
        (tmp_path / "src" / "tokenizer" / name).write_text("t" * 3000)
    return tmp_path / "src"


def _convert(source, out):
    from vidax.translator import convert_model

    return convert_model("cogvideox-2b", source=str(source), out=out, components=("scheduler", "tokenizer"))


def test_convert_writes_whole_configs_and_model_file(scheduler_folder, tmp_path):
    out = tmp_path / "out"
    _convert(scheduler_folder, out)
    assert (out / "scheduler" / "scheduler_config.json").read_bytes() == (
        scheduler_folder / "scheduler" / "scheduler_config.json").read_bytes()
    assert json.loads((out / "vidax_model.json").read_text())["model"] == "cogvideox-2b"
    assert sorted(_listing(out / "tokenizer")) == ["spiece.model", "tokenizer_config.json"]


def test_convert_on_a_full_disk_leaves_no_truncated_config(scheduler_folder, tmp_path):
    out = tmp_path / "out"
    with file_size_limit(4000), pytest.raises(OutputError, match="scheduler_config.json: disk full"):
        _convert(scheduler_folder, out)
    assert not (out / "vidax_model.json").exists()
    assert _listing(out / "scheduler") == []  # today: a truncated config.json in a folder reported complete


def test_convert_enospc_at_fsync_leaves_no_model_file(scheduler_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(OutputError, match="disk full"):
        _convert(scheduler_folder, out)
    assert not (out / "vidax_model.json").exists()
    assert [p for p in out.rglob("*") if p.is_file()] == []
