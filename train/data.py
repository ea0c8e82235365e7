"""Training folders (clips and images, each with a same-name `.txt` caption: the musubi-tuner / diffusion-pipe
layout) planned into samples, encoded once into latents and conditions, cached on disk, and drawn into batches.

- Folders: `--data` may be given several times, each with its `--repeats` (how often its samples count when rows
  are drawn; musubi-tuner's `num_repeats`).
- Aspect buckets (`aspect_buckets`): sizes on the model's grid at about the `--height` x `--width` area (so about
  the same token count), aspect ratios up to 4:1 either way; each item goes to the bucket nearest its own aspect
  ratio (log scale), is resized to cover it (aspect kept, bilinear) and centre-cropped. `--no-buckets`: every
  item at `--height` x `--width`.
- Frames: a clip is read every `--frame-stride`-th frame; it gives `--windows` windows of `--frames` frames
  spread evenly over it (musubi-tuner's "uniform" extraction), or, when shorter, one window of the most frames
  of the form 1 + 4k it has. An image is one frame.
- The cache (`<first data folder>/.vidax-cache/` by default) holds one `.npz` per sample, named by the SHA-256 of
  the media file's bytes, the caption, the window and every setting the encoding reads (model, weights, size,
  frames, text length), so a rerun encodes nothing and a change of any of them encodes again.
- Rows: each step's first row is drawn over every sample (weighted by its folder's repeats), the others from the
  samples of the same latent shape (one bucket and frame count per batch), from a generator named by (seed,
  step) alone, so a resumed run draws the same rows; `--caption-dropout` replaces a row's text by the empty
  caption's with that probability, from the same generator.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Callable

import numpy as np

from vidax.translator import VidaxError

VIDEO_SUFFIXES = (".mp4", ".mov", ".webm", ".mkv")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
CACHE_FOLDER = ".vidax-cache"
MAX_ASPECT = 4.0  # the widest / tallest bucket (HunyuanVideo's and musubi-tuner's bound)


class DataError(VidaxError, ValueError):
    """A training folder that cannot be used (no media, a missing caption, an unreadable file)."""


@dataclasses.dataclass(frozen=True)
class Item:
    """A media file, its caption and how often its folder's samples count."""

    media: Path
    caption: str
    repeats: int = 1

    @property
    def is_image(self) -> bool:
        return self.media.suffix.lower() in IMAGE_SUFFIXES


@dataclasses.dataclass(frozen=True)
class Sample:
    """One training sample: a window of an item at a bucket's size.

    Args:
      start, stride, frames: the source frames `start, start + stride, ...` (`frames` of them).
      height, width: the bucket.
    """

    item: Item
    start: int
    stride: int
    frames: int
    height: int
    width: int

    @property
    def size(self) -> tuple[int, int, int]:
        return self.frames, self.height, self.width


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One sample's cached encoding: normalised latents `[C, F', H', W']` and its conditions (text features,
    image condition: whatever the family's DiT takes besides the latents), each without the batch axis."""

    latents: np.ndarray
    cond: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Framing:
    """How clips become samples: the target size, the bucket grid, the frame stride and windows."""

    height: int
    width: int
    frames: int
    grid: int = 16  # height and width multiples (the model's VAE x patch)
    buckets: bool = True
    stride: int = 1
    windows: int = 1
    frame_step: int = 4  # clips are 1 + frame_step * k frames (the VAE's temporal factor; CogVideoX's encoder: 8)


def find_items(folders: list[Path], repeats: list[int] | None = None) -> list[Item]:
    """Every clip and image of each folder (sorted by name) with its caption; every problem listed at once."""
    repeats = list(repeats or [1] * len(folders))
    items, missing = [], []
    for folder, times in zip(folders, repeats):
        folder = Path(folder)
        if not folder.is_dir():
            raise DataError(f"--data {folder}: not a folder")
        media = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES + IMAGE_SUFFIXES)
        if not media:
            raise DataError(f"--data {folder}: no clips ({', '.join(VIDEO_SUFFIXES)}) or images "
                            f"({', '.join(IMAGE_SUFFIXES)})")
        missing += [str(p) for p in media if not p.with_suffix(".txt").is_file()]
        items += [Item(p, p.with_suffix(".txt").read_text().strip(), times) for p in media
                  if p.with_suffix(".txt").is_file()]
    if missing:
        raise DataError(f"no caption (.txt of the same name) for {', '.join(missing)}")
    return items


def usable_frames(count: int, wanted: int, step: int = 4) -> int:
    """The most frames of the form 1 + step * k, at most `wanted`, that `count` frames give."""
    n = min(count, wanted)
    return n - (n - 1) % step


def aspect_buckets(height: int, width: int, grid: int) -> list[tuple[int, int]]:
    """(height, width) pairs on `grid` at about the `height` x `width` area, aspect ratios up to `MAX_ASPECT`."""
    area = height * width
    out = set()
    for h in range(grid, int(math.sqrt(area * MAX_ASPECT)) + grid, grid):
        w = max(grid, round(area / h / grid) * grid)
        if max(h / w, w / h) <= MAX_ASPECT:
            out.add((h, w))
    out.add((height, width))
    return sorted(out)


def nearest_bucket(buckets: list[tuple[int, int]], height: int, width: int) -> tuple[int, int]:
    """The bucket whose aspect ratio is nearest `height / width` on a log scale (ties: the larger area)."""
    ratio = math.log(height / width)
    return min(buckets, key=lambda b: (round(abs(math.log(b[0] / b[1]) - ratio), 9), -b[0] * b[1]))


def probe(item: Item) -> tuple[int, int, int]:
    """(frames, height, width) of an item's media (one frame for an image)."""
    try:
        if item.is_image:
            from PIL import Image

            with Image.open(item.media) as image:
                return 1, image.height, image.width
        import av

        with av.open(str(item.media)) as container:
            stream = container.streams.video[0]
            count = stream.frames or sum(1 for _ in container.decode(video=0))
            return int(count), int(stream.codec_context.height), int(stream.codec_context.width)
    except Exception as err:  # PIL's and PyAV's errors name the problem
        raise DataError(f"{item.media}: cannot read ({err.__class__.__name__}: {str(err).splitlines()[0]})") from None


def window_starts(count: int, stride: int, frames: int, windows: int, step: int = 4) -> tuple[int, list[int]]:
    """(frames per window, start frames) of a clip of `count` frames read every `stride`-th frame."""
    available = (count - 1) // stride + 1
    wanted = usable_frames(frames, frames, step)
    frames = usable_frames(available, frames, step)
    last = count - ((frames - 1) * stride + 1)  # the latest start that still fits
    if windows <= 1 or last <= 0 or frames < wanted:  # a clip shorter than one window gives one
        return frames, [0]
    return frames, sorted({round(i * last / (windows - 1)) for i in range(windows)})


def plan_samples(items: list[Item], framing: Framing) -> list[Sample]:
    """Every item's windows at its bucket (module docstring)."""
    buckets = aspect_buckets(framing.height, framing.width, framing.grid) if framing.buckets else \
        [(framing.height, framing.width)]
    out = []
    for item in items:
        count, h, w = probe(item)
        height, width = nearest_bucket(buckets, h, w)
        if item.is_image:
            out.append(Sample(item, 0, 1, 1, height, width))
            continue
        frames, starts = window_starts(count, framing.stride, framing.frames, framing.windows, framing.frame_step)
        out += [Sample(item, start, framing.stride, frames, height, width) for start in starts]
    return out


def pixels(sample: Sample) -> np.ndarray:
    """`[1, 3, F, H, W]` float32 in [-1, 1]: the sample's frames, each covering its bucket, centre-cropped."""
    from vidax.zoo.video_io import read_image, read_video

    try:
        clip = read_image(sample.item.media)[None] if sample.item.is_image else read_video(sample.item.media)
    except Exception as err:
        raise DataError(f"{sample.item.media}: cannot read ({err.__class__.__name__}: {str(err).splitlines()[0]})") \
            from None
    clip = clip[sample.start: sample.start + (sample.frames - 1) * sample.stride + 1: sample.stride]
    if len(clip) != sample.frames:
        raise DataError(f"{sample.item.media}: has {len(clip)} frames at {sample.start}:{sample.stride}, not "
                        f"{sample.frames} (did it change since it was planned?)")
    out = np.stack([cover_crop(frame, sample.height, sample.width) for frame in clip])  # [F, H, W, 3]
    return (out.astype(np.float32) / 127.5 - 1.0).transpose(3, 0, 1, 2)[None]


def cover_crop(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 `frame` resized to cover `height` x `width` (aspect kept, bilinear) and centre-cropped."""
    from PIL import Image

    h, w = frame.shape[:2]
    scale = max(height / h, width / w)
    size = (max(width, round(w * scale)), max(height, round(h * scale)))
    resized = np.asarray(Image.fromarray(frame).resize(size, Image.BILINEAR))
    top, left = (resized.shape[0] - height) // 2, (resized.shape[1] - width) // 2
    return resized[top:top + height, left:left + width]


def cache_key(sample: Sample | None, caption: str, settings: dict) -> str:
    """The cache name of a sample's encoding (None: a caption's alone) under the encoding `settings`."""
    digest = hashlib.sha256(sample.item.media.read_bytes() if sample is not None else b"")
    window = {} if sample is None else {"window": [sample.start, sample.stride, *sample.size]}
    digest.update(json.dumps({"caption": caption, **window, **settings}, sort_keys=True).encode())
    return digest.hexdigest()


def _cached(path: Path, make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    from vidax.translator.output import write_file

    if path.is_file():
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}
    arrays = {k: np.asarray(v) for k, v in make().items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_file(path, buffer.getvalue())
    return arrays


def encode_samples(samples: list[Sample], settings: dict, cache: Path, encode: Callable,
                   progress: Callable[[int, int], None] | None = None) -> list[Encoded]:
    """Each sample's encoding, from the cache or made by `encode(sample, pixels) -> {"latents": [1, C, F', H', W'],
    name: [1, ...]}` (called only for samples not cached) and written to it.

    Args:
      settings: what the encoding depends on besides the file, window and caption (model, weights, text length).
      progress: called with (done, total) after each sample.
    """
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for i, sample in enumerate(samples):
        path = cache / f"{cache_key(sample, sample.item.caption, settings)}.npz"
        arrays = _cached(path, lambda: {k: np.asarray(v, np.float32)[0] if k == "latents" else np.asarray(v)[0]
                                        for k, v in encode(sample, pixels(sample)).items()})
        out.append(Encoded(arrays.pop("latents"), arrays))
        if progress is not None:
            progress(i + 1, len(samples))
    return out


def encode_caption(caption: str, settings: dict, cache: Path, encode: Callable) -> dict[str, np.ndarray]:
    """A caption's text features alone (`encode(caption) -> {name: [1, ...]}`), cached: the empty caption of
    `--caption-dropout`."""
    cache.mkdir(parents=True, exist_ok=True)
    return _cached(cache / f"{cache_key(None, caption, settings)}.npz",
                   lambda: {k: np.asarray(v)[0] for k, v in encode(caption).items()})


def batch_rows(encoded: list[Encoded], weights: list[int], batch: int, seed: int, step: int,
               dropout: float = 0.0) -> tuple[list[int], list[bool]]:
    """The rows of step `step` (module docstring) and whether each drops its caption."""
    rng = np.random.default_rng([seed, step])
    p = np.asarray(weights, np.float64)
    first = int(rng.choice(len(encoded), p=p / p.sum()))
    same = [i for i, e in enumerate(encoded) if e.latents.shape == encoded[first].latents.shape]
    q = p[same] / p[same].sum()
    rows = [first] + [same[int(j)] for j in rng.choice(len(same), size=batch - 1, p=q)]
    return rows, [bool(d) for d in rng.random(batch) < dropout]


def collate(encoded: list[Encoded], rows: list[int], dropped: list[bool], empty: dict[str, np.ndarray] | None,
            text_keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The batch of `rows`: latents and every condition stacked, a dropped row's `text_keys` from `empty`."""
    out = {"latents": np.stack([encoded[r].latents for r in rows])}
    for key in encoded[rows[0]].cond:
        out[key] = np.stack([empty[key] if drop and key in text_keys else encoded[r].cond[key]
                             for r, drop in zip(rows, dropped)])
    return out
