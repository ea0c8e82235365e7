"""Conditioning images and clips for the Cosmos pipelines, preprocessed as the diffusers references do.

- `read_clip`: a `--video` file (anything PyAV decodes, or a `.npy` of uint8 `[F, H, W, 3]` frames) as
  uint8 RGB frames; one-line errors for a missing or unreadable file.
- `pil_frames`: diffusers' `VideoProcessor.preprocess_video` on a list of PIL frames (what both Cosmos
  pipelines do with a conditioning clip): each frame resized with PIL's bilinear filter to (width,
  height) when its size differs, then `x / 255 * 2 - 1`, `[3, F, H, W]` float32.
- `predict25_image`: Cosmos2_5_PredictBasePipeline's image-to-world frame: torchvision `to_tensor`
  (`x / 255`), a torch nearest resize to the generation size (`VaeImageProcessor.resize` on a tensor),
  `2x - 1`; `[3, H, W]` float32.
- `cosmos3_image`: Cosmos3OmniPipeline's `_preprocess_conditioning_image`: cover-resize (bilinear with
  antialiasing, torch's separable filter), centre crop, rounding to 8 bits, `x / 127.5 - 1`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from vidax.zoo.errors import PipelineError


def read_clip(path: str | Path) -> np.ndarray:
    """uint8 RGB frames `[F, H, W, 3]` of a conditioning clip (a video file, or a `.npy` of frames)."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path}: conditioning video not found")
    if path.suffix.lower() == ".npy":
        try:
            frames = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise PipelineError(f"{path}: not a .npy array ({err})") from None
        if frames.dtype != np.uint8:
            if not np.issubdtype(frames.dtype, np.floating):
                raise PipelineError(f"{path}: frames must be uint8 or float in [0, 1], got {frames.dtype}")
            frames = np.round(np.clip(frames, 0.0, 1.0) * 255.0).astype(np.uint8)
    else:
        from vidax.zoo.video_io import read_video

        try:
            frames = read_video(path)
        except Exception as err:  # PyAV's errors name the container problem
            why = f"{err.__class__.__name__}: {str(err).splitlines()[0]}"
            raise PipelineError(f"{path}: cannot read video ({why})") from None
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise PipelineError(f"{path}: a conditioning clip is RGB frames [F, H, W, 3], got {frames.shape}")
    return frames


def pil_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """`[3, F, H, W]` in [-1, 1]: diffusers' `preprocess_video` of the frames as PIL images."""
    from PIL import Image

    out = []
    for frame in frames:
        if frame.shape[:2] != (height, width):
            frame = np.asarray(Image.fromarray(frame).resize((width, height), resample=Image.BILINEAR))
        out.append(np.asarray(frame).astype(np.float32) / 255.0)
    return (2.0 * np.stack(out) - 1.0).transpose(3, 0, 1, 2)


def torch_nearest(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """torch's `F.interpolate(mode="nearest")` on `[..., H, W]`: source index `floor(dst * (in / out))` in float32."""
    (h_in, w_in) = x.shape[-2:]
    if (h_in, w_in) == (height, width):
        return x
    rows = np.minimum(np.floor(np.arange(height, dtype=np.float32) * (np.float32(h_in) / np.float32(height))), h_in - 1)
    cols = np.minimum(np.floor(np.arange(width, dtype=np.float32) * (np.float32(w_in) / np.float32(width))), w_in - 1)
    return x[..., rows.astype(np.int64), :][..., cols.astype(np.int64)]


def predict25_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """`[3, H, W]` in [-1, 1]: the Predict2.5 pipeline's image-to-world frame (aspect not kept, as there)."""
    x = image.astype(np.float32).transpose(2, 0, 1) / np.float32(255.0)
    return 2.0 * torch_nearest(x, height, width) - 1.0


def _aa_weights(in_size: int, out_size: int) -> np.ndarray:
    """`[out, in]` weights of torch's antialiased bilinear resize along one axis (align_corners=False)."""
    scale = in_size / out_size
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    weights = np.zeros((out_size, in_size), np.float32)
    for i in range(out_size):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        taps = np.array([max(0.0, 1.0 - abs((j - center + 0.5) * invscale)) for j in range(lo, hi)], np.float32)
        total = taps.sum()
        weights[i, lo:hi] = taps / total if total != 0 else taps
    return weights


def cosmos3_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """`[3, H, W]` in [-1, 1]: the Cosmos3 pipeline's conditioning frame (cover-resize, centre crop, 8-bit)."""
    x = image.astype(np.float32).transpose(2, 0, 1)  # [3, h, w] in [0, 255]
    h0, w0 = x.shape[1:]
    scale = max(width / w0, height / h0)
    rh, rw = math.ceil(scale * h0), math.ceil(scale * w0)
    if (rh, rw) != (h0, w0):
        x = np.einsum("chw,vw->chv", x, _aa_weights(w0, rw))  # width first, then height (torch's order)
        x = np.einsum("chw,uh->cuw", x, _aa_weights(h0, rh))
    top, left = round((rh - height) / 2), round((rw - width) / 2)
    x = x[:, top:top + height, left:left + width]
    return (np.clip(np.round(x), 0, 255) / np.float32(127.5) - 1.0).astype(np.float32)
