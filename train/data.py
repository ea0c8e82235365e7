"""A training folder (clips and images, each with a same-name `.txt` caption: the musubi-tuner /
diffusion-pipe layout), encoded once into VAE latents and text embeddings cached on disk.

Each clip gives its first `frames` frames (fewer when it is shorter: the most of the form 1 + 4k it has), each
image one frame; every frame is resized to cover `height` x `width` (aspect kept, bilinear) and centre-cropped.
The cache (`<data>/.vidax-cache/` by default) holds one `.npz` per item, named by the SHA-256 of the media
file's bytes, the caption and every setting the encoding reads (model, weights, size, frames, text length), so
a rerun encodes nothing and a change of any of them encodes again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from pathlib import Path

import numpy as np

from vidax.translator import VidaxError

VIDEO_SUFFIXES = (".mp4", ".mov", ".webm", ".mkv")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
CACHE_FOLDER = ".vidax-cache"


class DataError(VidaxError, ValueError):
    """A training folder that cannot be used (no media, a missing caption, an unreadable file)."""


@dataclasses.dataclass(frozen=True)
class Item:
    media: Path
    caption: str


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One item's cached encoding: normalised latents `[C, F', H', W']` and text embeddings `[T, D]`."""

    latents: np.ndarray
    text: np.ndarray


def find_items(folder: Path) -> list[Item]:
    """Every clip and image of `folder` (sorted by name) with its caption; every problem listed at once."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"--data {folder}: not a folder")
    media = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES + IMAGE_SUFFIXES)
    if not media:
        raise DataError(f"--data {folder}: no clips ({', '.join(VIDEO_SUFFIXES)}) or images ({', '.join(IMAGE_SUFFIXES)})")
    missing = [p.name for p in media if not p.with_suffix(".txt").is_file()]
    if missing:
        raise DataError(f"--data {folder}: no caption (.txt of the same name) for {', '.join(missing)}")
    return [Item(p, p.with_suffix(".txt").read_text().strip()) for p in media]


def usable_frames(count: int, wanted: int) -> int:
    """The most frames of the form 1 + 4k, at most `wanted`, that a clip of `count` frames gives."""
    n = min(count, wanted)
    return n - (n - 1) % 4


def pixels(item: Item, height: int, width: int, frames: int) -> np.ndarray:
    """`[1, 3, F, H, W]` float32 in [-1, 1] (module docstring for the sampling and the crop)."""
    from vidax.zoo.video_io import read_image, read_video

    try:
        if item.media.suffix.lower() in IMAGE_SUFFIXES:
            clip = read_image(item.media)[None]
        else:
            clip = read_video(item.media)
    except Exception as err:  # PIL's and PyAV's errors name the problem
        raise DataError(f"{item.media}: cannot read ({err.__class__.__name__}: {str(err).splitlines()[0]})") from None
    clip = clip[: usable_frames(len(clip), frames)]
    out = np.stack([_cover_crop(frame, height, width) for frame in clip])  # [F, H, W, 3]
    return (out.astype(np.float32) / 127.5 - 1.0).transpose(3, 0, 1, 2)[None]


def _cover_crop(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    h, w = frame.shape[:2]
    scale = max(height / h, width / w)
    size = (max(width, round(w * scale)), max(height, round(h * scale)))
    resized = np.asarray(Image.fromarray(frame).resize(size, Image.BILINEAR))
    top, left = (resized.shape[0] - height) // 2, (resized.shape[1] - width) // 2
    return resized[top:top + height, left:left + width]


def cache_key(item: Item, settings: dict) -> str:
    digest = hashlib.sha256(item.media.read_bytes())
    digest.update(json.dumps({"caption": item.caption, **settings}, sort_keys=True).encode())
    return digest.hexdigest()


def encode_items(items: list[Item], settings: dict, cache: Path, encode_video, encode_text) -> list[Encoded]:
    """Each item's encoding, from the cache or made by `encode_video(pixels) -> [1, C, F', H', W']` and
    `encode_text(caption) -> [1, T, D]` (called only for items not cached) and written to it.

    Args:
      settings: what the encoding depends on besides the file and caption (`height`, `width`, `frames`, ...).
    """
    from vidax.translator.output import write_file

    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for item in items:
        path = cache / f"{cache_key(item, settings)}.npz"
        if path.is_file():
            with np.load(path) as saved:
                out.append(Encoded(saved["latents"], saved["text"]))
            continue
        video = pixels(item, settings["height"], settings["width"], settings["frames"])
        encoded = Encoded(np.asarray(encode_video(video), np.float32)[0], np.asarray(encode_text(item.caption), np.float32)[0])
        buffer = io.BytesIO()
        np.savez(buffer, latents=encoded.latents, text=encoded.text)
        write_file(path, buffer.getvalue())
        out.append(encoded)
    return out


def batch_rows(encoded: list[Encoded], batch: int, seed: int, step: int) -> list[int]:
    """The items of step `step`: one drawn at random, the rest from those of its latent shape (with
    replacement), from a generator named by (seed, step) alone, so a resumed run draws the same rows."""
    rng = np.random.default_rng([seed, step])
    first = int(rng.integers(len(encoded)))
    same = [i for i, e in enumerate(encoded) if e.latents.shape == encoded[first].latents.shape]
    return [first] + [same[int(j)] for j in rng.integers(len(same), size=batch - 1)]
