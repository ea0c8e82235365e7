"""Wan's 3D rotary position embedding (follows diffusers `WanRotaryPosEmbed`).

The head dimension is split into (t, h, w) parts, `h = w = 2 * (head_dim // 6)` and t the rest;
each part rotates interleaved pairs by its axis position times `theta ** (-2i / part)`. Tables are
computed on the host in float64 and cast to float32, as the reference does.
"""

from __future__ import annotations

import numpy as np

THETA = 10000.0


def _axis_angles(part: int, length: int) -> np.ndarray:
    inv_freq = 1.0 / (THETA ** (np.arange(0, part, 2, dtype=np.float64)[: part // 2] / part))
    return np.outer(np.arange(length, dtype=np.float64), inv_freq)  # [length, part/2]


def rope_tables(dims: tuple[int, int, int], grid: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin `[F*H*W, head_dim]` for tokens in (f, h, w) order, each angle repeated for its pair.

    Args:
      dims: the (t, h, w) split of the head dimension (`WanTransformerConfig.rope_dims`).
      grid: post-patch (frames, height, width).
    """
    f, h, w = grid
    per_axis = [_axis_angles(d, n) for d, n in zip(dims, grid)]
    angles = np.concatenate(
        [
            np.broadcast_to(per_axis[0][:, None, None], (f, h, w, per_axis[0].shape[-1])),
            np.broadcast_to(per_axis[1][None, :, None], (f, h, w, per_axis[1].shape[-1])),
            np.broadcast_to(per_axis[2][None, None, :], (f, h, w, per_axis[2].shape[-1])),
        ],
        axis=-1,
    ).reshape(f * h * w, -1)
    angles = np.repeat(angles, 2, axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
