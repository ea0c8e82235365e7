"""Cosmos' 3D rotary tables and learned position embedding (follow diffusers `CosmosRotaryPosEmbed`,
`CosmosLearnablePositionalEmbed`).

The head dimension splits into h = w = 2 * (head_dim // 6) rotary channels and t the rest; each
axis has its own NTK-scaled theta `10000 * rope_scale ** (dim / (dim - 2))`. The tables are laid
out `[t, h, w, t, h, w]` (each axis' angles written twice), for the rotate-half convention
(diffusers `apply_rotary_emb(use_real_unbind_dim=-2)`). Computed on the host in float32, in the
reference's order of operations.

`fps` rescales the temporal positions by `base_fps / fps`; Cosmos2_5_PredictBasePipeline never
passes it (its transformer sees integer frame positions whatever the video's frame rate).
"""

from __future__ import annotations

import jax
import numpy as np

from vidax.zoo.parts.rope import grid_table

BASE_FPS = 24


def axis_dims(head_dim: int) -> tuple[int, int, int]:
    """Rotary channels per axis (t, h, w)."""
    h = w = head_dim // 6 * 2
    return head_dim - h - w, h, w


def _inverse_frequencies(dim: int, scale: float) -> np.ndarray:
    theta = np.float32(10000.0 * scale ** (dim / (dim - 2)))  # a Python float in the reference, cast once
    exponents = np.arange(0, dim, 2, dtype=np.float32)[: dim // 2] / np.float32(dim)
    return (np.float32(1.0) / theta**exponents).astype(np.float32)


def rope_tables(head_dim: int, grid: tuple[int, int, int], rope_scale: tuple[float, float, float],
                fps: float | None = None) -> tuple[jax.Array, jax.Array]:
    """cos/sin `[F*H*W, head_dim]` for tokens in (f, h, w) order (per-axis tables from the host, expanded over
    the grid in the program: `parts.rope.grid_table`).

    Args:
      head_dim: attention head width.
      grid: post-patch (frames, height, width).
      rope_scale: the config's (t, h, w) NTK scales.
      fps: the video frame rate, or None (images, and what the Predict2.5 pipeline passes).
    """
    dims = axis_dims(head_dim)
    freqs = [_inverse_frequencies(d, s) for d, s in zip(dims, rope_scale)]
    positions = [np.arange(n, dtype=np.float32) for n in grid]
    if fps is not None:
        positions[0] = positions[0] / np.float32(fps) * np.float32(BASE_FPS)
    angles = [np.outer(pos, freq).astype(np.float32) for pos, freq in zip(positions, freqs)]  # [n_axis, dim/2]
    order = [0, 1, 2, 0, 1, 2]  # [t, h, w, t, h, w]
    return (grid_table([(axis, np.cos(angles[axis])) for axis in order], grid),
            grid_table([(axis, np.sin(angles[axis])) for axis in order], grid))
