"""The clips a metric reads: a folder of MP4s or `.npy` frames, each with its prompt beside it.

A clip is `NAME.mp4` (decoded to RGB uint8, as VBench's readers decode it) or `NAME.npy` (float32
`[F, H, W, 3]` in [0, 1], what `vidax-gen --out x.npy` writes; quantised to uint8 as vidax-gen's MP4 writer
quantises, since the metrics are defined on 8-bit frames). Its prompt is `NAME.txt` or, failing that, the
`prompt` of the sidecar `NAME.json` vidax-gen writes. `x.audio.npy` and `--save-latents` files are not clips.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from vidax.eval.errors import EvalError
from vidax.zoo.video_io import read_video, to_uint8

VIDEO_SUFFIXES = (".mp4", ".npy")
NOT_CLIPS = (".audio.npy", ".latents.npy")


@dataclasses.dataclass(frozen=True)
class Clip:
    """One clip: its file, its name (the path under the folder, without the suffix) and its prompt (or None)."""

    path: Path
    name: str
    prompt: str | None

    def digest(self) -> str:
        """SHA-256 of the file's bytes: the feature cache's key for this clip."""
        sha = hashlib.sha256()
        with open(self.path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
        return sha.hexdigest()


def _prompt(video: Path) -> str | None:
    text = video.with_suffix(".txt")
    if text.is_file():
        return text.read_text(encoding="utf-8").strip()
    sidecar = video.with_suffix(".json")
    if sidecar.is_file():
        try:
            record = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise EvalError(f"{sidecar}: not a readable sidecar ({err.__class__.__name__})") from None
        prompt = record.get("prompt") if isinstance(record, dict) else None
        return prompt if isinstance(prompt, str) else None
    return None


def find_clips(folder: str | os.PathLike) -> list[Clip]:
    """Every clip under `folder` (recursively), sorted by name; a folder with none is an error."""
    root = Path(folder)
    if not root.is_dir():
        raise EvalError(f"{root}: not a folder of clips")
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES
                   and not p.name.lower().endswith(NOT_CLIPS))
    if not paths:
        raise EvalError(f"{root}: no clips (.mp4 or .npy) in it")
    clips = [Clip(p, p.relative_to(root).with_suffix("").as_posix(), _prompt(p)) for p in paths]
    names = [c.name for c in clips]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise EvalError(f"{root}: clips named twice ({', '.join(twice[:5])}): keep one of x.mp4 and x.npy")
    return clips


def clip_fps(clip: Clip) -> float | None:
    """The clip's frame rate: an MP4's average rate (what OpenCV reports), a `.npy`'s from its sidecar; None if unknown."""
    if clip.path.suffix.lower() == ".npy":
        sidecar = clip.path.with_suffix(".json")
        try:
            fps = json.loads(sidecar.read_text(encoding="utf-8")).get("fps") if sidecar.is_file() else None
        except (OSError, ValueError, AttributeError):
            return None
        return float(fps) if isinstance(fps, (int, float)) and fps > 0 else None
    import av

    try:
        with av.open(str(clip.path)) as container:
            rate = container.streams.video[0].average_rate
    except (OSError, ValueError, IndexError) as err:
        raise EvalError(f"{clip.path}: cannot read its frame rate ({err.__class__.__name__})") from None
    return float(rate) if rate else None


def read_frames(clip: Clip) -> np.ndarray:
    """The clip's frames as uint8 `[F, H, W, 3]` RGB."""
    try:
        if clip.path.suffix.lower() == ".npy":
            frames = np.load(clip.path, allow_pickle=False)
            if frames.ndim != 4 or frames.shape[-1] != 3 or not np.issubdtype(frames.dtype, np.floating):
                raise EvalError(f"{clip.path}: expected float frames [F, H, W, 3] in [0, 1], got {frames.dtype} {frames.shape}")
            return to_uint8(frames.astype(np.float32))
        frames = read_video(clip.path)
    except EvalError:
        raise
    except (OSError, ValueError) as err:
        raise EvalError(f"{clip.path}: cannot read frames ({err.__class__.__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
    if frames.shape[0] == 0:
        raise EvalError(f"{clip.path}: no frames")
    return frames
