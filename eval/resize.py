"""Resizes and crops as the PyTorch metrics run them, as separable interpolation matrices.

VBench resizes frames with torchvision's tensor `Resize(..., antialias=False)` and cd-fvd with
`torch.nn.functional.interpolate`; both are torch's `interpolate` with `align_corners=False` and no
antialiasing. Each output pixel is a fixed weighted sum of input pixels along each axis, so a resize is
`rows @ image @ cols.T` with `[out, in]` matrices built here on the host (the same weights torch computes:
the source coordinate `(dst + 0.5) * scale - 0.5`, bilinear clamped at 0, bicubic with a = -0.75 and its
taps clamped to the border). The products then run batched on the devices.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

CUBIC_A = -0.75  # torch's upsample_bicubic2d


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for fractional offsets `t` [N] -> [N, 4]."""
    a = CUBIC_A
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731  |x| <= 1
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731  1 < |x| < 2
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def interpolation_matrix(size_in: int, size_out: int, mode: str, scale: float | None = None) -> np.ndarray:
    """The `[size_out, size_in]` float64 matrix of torch `interpolate(mode, align_corners=False)` along one axis.

    Args:
      size_in, size_out: lengths of the axis before and after.
      mode: "bilinear" or "bicubic".
      scale: the `scale_factor` torch was given (its coordinates then use 1 / scale, not in / out); None
        when it was given a size.
    """
    ratio = size_in / size_out if scale is None else 1.0 / scale
    src = (np.arange(size_out, dtype=np.float64) + 0.5) * ratio - 0.5
    matrix = np.zeros((size_out, size_in))
    rows = np.arange(size_out)
    if mode == "bilinear":
        src = np.maximum(src, 0.0)
        low = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
        high = np.minimum(low + 1, size_in - 1)
        frac = src - low
        np.add.at(matrix, (rows, low), 1.0 - frac)
        np.add.at(matrix, (rows, high), frac)
    elif mode == "bicubic":
        low = np.floor(src).astype(np.int64)
        weights = _cubic_weights(src - low)
        for tap in range(4):
            np.add.at(matrix, (rows, np.clip(low - 1 + tap, 0, size_in - 1)), weights[:, tap])
    else:
        raise ValueError(f"interpolation mode {mode!r}: bilinear or bicubic")
    return matrix


def shorter_side_size(height: int, width: int, size: int) -> tuple[int, int]:
    """torchvision `Resize(size)` with an int: the shorter side becomes `size`, the longer `int(size * long / short)`."""
    if height <= width:
        return size, int(size * width / height)
    return int(size * height / width), size


def centre_crop_box(height: int, width: int, size: int) -> tuple[int, int]:
    """torchvision `CenterCrop(size)`'s top-left corner (rounded as it rounds; the image is at least `size`)."""
    return int(round((height - size) / 2.0)), int(round((width - size) / 2.0))


def resize_matrices(height: int, width: int, out_height: int, out_width: int, mode: str,
                    crop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row and column matrices of a resize to `(out_height, out_width)`, then a centre crop to `crop` (float32)."""
    rows = interpolation_matrix(height, out_height, mode)
    cols = interpolation_matrix(width, out_width, mode)
    if crop is not None:
        top, left = centre_crop_box(out_height, out_width, crop)
        rows, cols = rows[top:top + crop], cols[left:left + crop]
    return rows.astype(np.float32), cols.astype(np.float32)


def apply_resize(frames, rows, cols):
    """`frames [..., H, W, C]` -> `[..., h, w, C]` through the matrices (fp32, highest precision)."""
    out = jnp.einsum("hH,...HWc->...hWc", rows, frames, precision="highest")
    return jnp.einsum("wW,...hWc->...hwc", cols, out, precision="highest")


def normalise(frames, mean, std):
    """(x - mean) / std per channel on the last axis."""
    return (frames - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)


def scaled_size(size_in: int, scale: float) -> int:
    """torch `interpolate(scale_factor=s)`'s output length: floor(in * s)."""
    return int(math.floor(size_in * scale))
