"""Wan's 3D rotary position embedding (follows diffusers `WanRotaryPosEmbed`).

The head dimension is split into (t, h, w) parts, `h = w = 2 * (head_dim // 6)` and t the rest;
each part rotates interleaved pairs by its axis position times `theta ** (-2i / part)`. Each axis' table
is computed on the host in float64 and cast to float32, as the reference does.
"""

from __future__ import annotations

import jax
import numpy as np

from vidax.zoo.parts.rope import grid_table

THETA = 10000.0


def _axis_angles(part: int, length: int) -> np.ndarray:
    inv_freq = 1.0 / (THETA ** (np.arange(0, part, 2, dtype=np.float64)[: part // 2] / part))
    return np.outer(np.arange(length, dtype=np.float64), inv_freq)  # [length, part/2]


def rope_tables(dims: tuple[int, int, int], grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """cos/sin `[F*H*W, head_dim]` for tokens in (f, h, w) order, each angle repeated for its pair
    (per-axis tables from the host, expanded over the grid in the program: `parts.rope.grid_table`).

    Args:
      dims: the (t, h, w) split of the head dimension (`WanTransformerConfig.rope_dims`).
      grid: post-patch (frames, height, width).
    """
    cos, sin = [], []
    for axis, (d, n) in enumerate(zip(dims, grid)):
        angles = np.repeat(_axis_angles(d, n), 2, axis=-1)
        cos.append((axis, np.cos(angles).astype(np.float32)))
        sin.append((axis, np.sin(angles).astype(np.float32)))
    return grid_table(cos, grid), grid_table(sin, grid)
