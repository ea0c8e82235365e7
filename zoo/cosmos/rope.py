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

import numpy as np

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
                fps: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin `[F*H*W, head_dim]` for tokens in (f, h, w) order.

    Args:
      head_dim: attention head width.
      grid: post-patch (frames, height, width).
      rope_scale: the config's (t, h, w) NTK scales.
      fps: the video frame rate, or None (images, and what the Predict2.5 pipeline passes).
    """
    f, h, w = grid
    dim_t, dim_h, dim_w = axis_dims(head_dim)
    freq_t, freq_h, freq_w = (_inverse_frequencies(d, s) for d, s in zip((dim_t, dim_h, dim_w), rope_scale))
    pos_t = np.arange(f, dtype=np.float32)
    if fps is not None:
        pos_t = pos_t / np.float32(fps) * np.float32(BASE_FPS)
    emb_t = np.broadcast_to(np.outer(pos_t, freq_t)[:, None, None], (f, h, w, freq_t.size))
    emb_h = np.broadcast_to(np.outer(np.arange(h, dtype=np.float32), freq_h)[None, :, None], (f, h, w, freq_h.size))
    emb_w = np.broadcast_to(np.outer(np.arange(w, dtype=np.float32), freq_w)[None, None, :], (f, h, w, freq_w.size))
    angles = np.concatenate([emb_t, emb_h, emb_w] * 2, axis=-1).reshape(f * h * w, head_dim).astype(np.float32)
    return np.cos(angles), np.sin(angles)
