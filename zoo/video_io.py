"""Writing generated video: H.264 MP4 through PyAV, lossless `.npy`, and a sidecar JSON of the settings.

Frames everywhere are float32 `[frames, height, width, 3]` in [0, 1], the convention of diffusers'
`output_type="np"`; the MP4 quantises them to 8-bit RGB (as diffusers' `export_to_video` does) and
encodes yuv420p, which every player decodes. The same frames give the same MP4 bytes on any machine:
the RGB -> yuv420p conversion is done here in NumPy (not by the encoder's threaded scaler) and x264
runs a fixed number of threads (its output depends on the count, which it would take from the CPUs).

Every file is written whole or not at all (`vidax.translator.output.staged_files`: a temporary name
in the same folder, fsync, rename), and the output path is checked before any work: a writable
folder, and room on its disk for the output's estimate.

Models that generate sound (LTX-2.x) pass a waveform `[channels, samples]` float32 in [-1, 1] and its
sample rate: the MP4 carries it as an AAC track at that rate, muxed with the video in the one file;
a `.npy` output writes it losslessly beside the frames as `out.audio.npy`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from vidax.translator import VidaxError
from vidax.translator.output import StagedFiles, staged_files, write_file
from vidax.translator.version import provenance

VIDEO_SUFFIXES = (".mp4", ".npy")
DEFAULT_CRF = 18  # visually lossless for x264; a generated clip is small either way
AAC_BIT_RATE = 256_000  # per stream; transparent for speech and music at 24-48 kHz stereo
ENCODER_THREADS = 4  # x264's bytes depend on its thread count: fixed, so that every machine writes the same file
# the room an output needs beyond its frames: the sidecar, container headers, and a 48 kHz stereo
# float32 soundtrack per second of video (the audio models' largest)
AUDIO_BYTES_PER_SECOND = 48_000 * 2 * 4
SLACK_BYTES = 1 << 20


class VideoIOError(VidaxError, ValueError):
    """An output path or frame array that cannot be written, or an input image that cannot be read."""


def check_output_path(path: str | os.PathLike, *, writable: bool = True) -> Path:
    """The output path, checked before any work starts: a known suffix, not a folder, and (`writable`)
    a folder this process can create files in (probed by creating one)."""
    path = Path(path)
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise VideoIOError(f"{path}: output must end in {' or '.join(VIDEO_SUFFIXES)}")
    if path.is_dir():
        raise VideoIOError(f"{path}: is a folder; give a file name ending in {' or '.join(VIDEO_SUFFIXES)}")
    folder = _existing_folder(path)
    if writable:
        try:
            fd, probe = tempfile.mkstemp(prefix=".vidax-probe-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise VideoIOError(f"{path}: cannot write in {folder} ({err.strerror or err})") from None
    return path


def _existing_folder(path: Path) -> Path:
    """The nearest existing folder on the way to `path` (where its missing folders would be created)."""
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise VideoIOError(f"{path}: {folder} is not a folder")
    return folder


def output_bytes(path: str | os.PathLike, frames: int, height: int, width: int, fps: float = 1.0) -> int:
    """An upper estimate of the bytes a video of this size takes at `path`: float32 frames for `.npy`; for
    `.mp4` the raw yuv420p frames (x264 at crf 18 writes far less); a soundtrack's room, and slack."""
    pixels = frames * height * width
    video = pixels * 3 * 4 if Path(path).suffix.lower() == ".npy" else pixels * 3 // 2
    return video + math.ceil(frames / max(fps, 1.0)) * AUDIO_BYTES_PER_SECOND + SLACK_BYTES


def check_room(path: str | os.PathLike, nbytes: int) -> None:
    """Refuse (one line) when the disk that will hold `path` has fewer than `nbytes` free."""
    folder = _existing_folder(Path(path))
    free = shutil.disk_usage(folder).free
    if free < nbytes:
        raise VideoIOError(f"{path}: {folder} has {free / 2**20:.1f} MiB free, this output needs about "
                           f"{nbytes / 2**20:.1f} MiB")


def to_uint8(frames: np.ndarray) -> np.ndarray:
    """[0, 1] floats -> uint8 with rounding (diffusers' `numpy_to_pil`: `(x * 255).round()`)."""
    return (np.clip(frames, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def _check_frames(frames: np.ndarray) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise VideoIOError(f"frames must be [frames, height, width, 3], got shape {frames.shape}")
    return frames


def _check_audio(audio: np.ndarray | None, sample_rate: int | None) -> np.ndarray | None:
    if audio is None:
        return None
    audio = np.asarray(audio, np.float32)
    if audio.ndim == 1:
        audio = audio[None]
    if audio.ndim != 2 or audio.shape[0] not in (1, 2) or audio.shape[1] == 0:
        raise VideoIOError(f"audio must be [channels (1 or 2), samples], got shape {audio.shape}")
    if not sample_rate or sample_rate <= 0:
        raise VideoIOError(f"audio needs a positive sample rate, got {sample_rate}")
    return audio


def audio_path(path: str | os.PathLike) -> Path:
    """`out.npy` -> `out.audio.npy` (the waveform beside lossless frames)."""
    return Path(path).with_suffix(".audio.npy")


def rgb_to_yuv420p(pixels: np.ndarray) -> np.ndarray:
    """uint8 RGB `[H, W, 3]` (even H and W) -> the yuv420p planes PyAV takes, `[H * 3 // 2, W]`: BT.601
    limited range (what the encoder's scaler assumes for untagged video, and decoders read back), each
    chroma sample the mean of its 2x2 pixels. Elementwise float32 arithmetic, so the same pixels always
    give the same planes."""
    rgb = pixels.astype(np.float32)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 16.0 + (65.481 * r + 128.553 * g + 24.966 * b) / 255.0
    quad = (rgb[0::2, 0::2] + rgb[1::2, 0::2] + rgb[0::2, 1::2] + rgb[1::2, 1::2]) * 0.25
    r, g, b = quad[..., 0], quad[..., 1], quad[..., 2]
    u = 128.0 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255.0
    v = 128.0 + (112.0 * r - 93.786 * g - 18.214 * b) / 255.0
    planes = [np.clip(np.rint(plane), 0, 255).astype(np.uint8) for plane in (y, u, v)]
    height, width = pixels.shape[:2]
    return np.concatenate([planes[0].reshape(-1), planes[1].reshape(-1), planes[2].reshape(-1)]).reshape(
        height * 3 // 2, width)


def write_mp4(path: str | os.PathLike, frames: np.ndarray, fps: float, *, crf: int = DEFAULT_CRF,
              audio: np.ndarray | None = None, sample_rate: int | None = None,
              files: StagedFiles | None = None) -> Path:
    """Encode `frames` (float [0, 1] or uint8, `[F, H, W, 3]`) as H.264 yuv420p at `fps`, and `audio`
    (float `[channels, samples]` in [-1, 1], when given) as an AAC track at `sample_rate` in the same file.

    Odd sizes are padded by one edge pixel (yuv420p needs even width and height). The file appears
    whole or not at all (staged in `files` when given: that group commits it).
    """
    audio = _check_audio(audio, sample_rate)
    frames = _check_frames(frames)
    fps = _check_fps(fps)
    pixels = frames if frames.dtype == np.uint8 else to_uint8(frames)
    pad_h, pad_w = pixels.shape[1] % 2, pixels.shape[2] % 2
    if pad_h or pad_w:
        pixels = np.pad(pixels, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    with staged_files(files) as group:
        _encode_mp4(group.temp(path), pixels, fps, crf, audio, sample_rate)
    return Path(path)


def _encode_mp4(target: Path, pixels: np.ndarray, fps: float, crf: int, audio: np.ndarray | None,
                sample_rate: int | None) -> None:
    import av

    with av.open(str(target), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height = pixels.shape[2], pixels.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf)}
        stream.codec_context.thread_count = ENCODER_THREADS
        sound = None
        if audio is not None:
            sound = container.add_stream("aac", rate=int(sample_rate))
            sound.layout = "stereo" if audio.shape[0] == 2 else "mono"
            sound.bit_rate = AAC_BIT_RATE * audio.shape[0] // 2
        for pixel_frame in pixels:  # already yuv420p: the encoder converts nothing
            frame = av.VideoFrame.from_ndarray(rgb_to_yuv420p(pixel_frame), format="yuv420p")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if sound is not None:  # one planar float frame: the encoder cuts it into AAC frames itself
            samples = av.AudioFrame.from_ndarray(np.ascontiguousarray(np.clip(audio, -1.0, 1.0)), format="fltp",
                                                 layout=sound.layout.name)
            samples.sample_rate = int(sample_rate)
            for packet in sound.encode(samples):
                container.mux(packet)
            for packet in sound.encode():
                container.mux(packet)


def _check_fps(fps: float) -> float:
    if not isinstance(fps, (int, float, np.number)) or not math.isfinite(fps) or fps <= 0:
        raise VideoIOError(f"fps must be a positive finite number, got {fps}")
    return float(fps)


def read_video(path: str | os.PathLike) -> np.ndarray:
    """Decode a video file to uint8 `[F, H, W, 3]` RGB (to check what `write_mp4` wrote)."""
    import av

    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def read_audio(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Decode a file's first audio stream: float32 `[channels, samples]` and its sample rate (the AAC
    encoder's priming samples at the start included, as the decoder returns them)."""
    import av

    with av.open(str(path)) as container:
        if not container.streams.audio:
            raise VideoIOError(f"{path}: no audio stream")
        rate = container.streams.audio[0].rate
        chunks = [f.to_ndarray() for f in container.decode(audio=0)]
    return np.concatenate(chunks, axis=1).astype(np.float32), int(rate)


def write_frames(path: str | os.PathLike, frames: np.ndarray, fps: float, *, audio: np.ndarray | None = None,
                 sample_rate: int | None = None, files: StagedFiles | None = None) -> Path:
    """Write `frames` (float `[F, H, W, 3]` in [0, 1]) to `.mp4` (H.264) or `.npy` (float32, lossless).

    `audio` (float `[channels, samples]`, with `sample_rate`): muxed into the MP4 as AAC, or written as
    `out.audio.npy` (float32, lossless) beside a `.npy` output. Every file appears whole or not at all,
    together (staged in `files` when given: that group commits them).
    """
    path = check_output_path(path, writable=False)
    frames = _check_frames(frames)
    audio = _check_audio(audio, sample_rate)
    if path.suffix.lower() != ".npy":
        return write_mp4(path, frames, fps, audio=audio, sample_rate=sample_rate, files=files)
    with staged_files(files) as group:
        save_npy(path, np.asarray(frames, np.float32), group)
        if audio is not None:
            save_npy(audio_path(path), audio, group)
    return path


def save_npy(path: str | os.PathLike, array: np.ndarray, files: StagedFiles | None = None) -> Path:
    """`array` as a `.npy` file at `path`, whole or not at all (or staged in `files`)."""
    with staged_files(files) as group, open(group.temp(path), "wb") as fh:
        np.save(fh, array, allow_pickle=False)
    return Path(path)


def sidecar_path(path: str | os.PathLike) -> Path:
    """`out.mp4` -> `out.json`."""
    return Path(path).with_suffix(".json")


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN or infinities
        return str(value)
    return value


def write_sidecar(video_path: str | os.PathLike, settings: Mapping[str, Any], files: StagedFiles | None = None) -> Path:
    """Write `settings` (every option, the seed, stage times) plus what made them (vidax's version and, run from
    a checkout, its commit) next to the video, as strict JSON, whole or not at all (or staged in `files`)."""
    record = {**provenance(), "video": str(video_path), **_jsonable(settings)}
    text = json.dumps(record, indent=1, sort_keys=False, default=str, allow_nan=False) + "\n"
    return write_file(sidecar_path(video_path), text, files)


def read_image(path: str | os.PathLike) -> np.ndarray:
    """An RGB uint8 `[H, W, 3]` image; a missing or unreadable file is a one-line VideoIOError."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise VideoIOError(f"{path}: image not found")
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError) as err:
        raise VideoIOError(f"{path}: cannot read image ({err.__class__.__name__}: {str(err).splitlines()[0]})") from None


def vae_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """diffusers `VideoProcessor.preprocess`: Lanczos resize to (width, height), [-1, 1], `[1, 3, 1, H, W]`."""
    from PIL import Image

    resized = np.asarray(Image.fromarray(image).resize((width, height), Image.LANCZOS), np.float32) / 255.0
    return (resized * 2.0 - 1.0).transpose(2, 0, 1)[None, :, None]
