"""Cosmos3's unified 3D multimodal RoPE (follows diffusers `get_3d_mrope_ids_text_tokens`,
`get_3d_mrope_ids_vae_tokens` and `Cosmos3VLTextRotaryEmbedding`).

Positions `[3, S]` (t, h, w) for the joint sequence: the text tokens count 0..L-1 on all three
axes; the vision tokens start at `L + temporal_modality_margin` (15000) on the t axis, their h and w
counting from 0 (`reset_spatial_ids`). With fps modulation the vision t positions are
`frame * base_fps / fps + offset` (floats: the fps reaches the model here, and in the prompt's
duration sentence); a single latent frame keeps integer positions.

Tables: inverse frequencies `theta ** (-2i / head_dim)` times each axis' positions, interleaved
(the t angles everywhere except every third channel from 1 (h) and from 2 (w), over `3 * h_dim`
and `3 * w_dim` channels), written twice (rotate-half). Computed on the host in float32, as the
reference computes them (its angles reach ~15000 rad; cosines of the same float32 angles agree).
"""

from __future__ import annotations

import math

import numpy as np
from vidax.zoo.cosmos3.config import Cosmos3TransformerConfig


def text_positions(num_tokens: int, offset: float = 0, floats: bool = True) -> tuple[np.ndarray, float]:
    """`([3, num_tokens] positions, next offset)`; float positions when fps modulation is on."""
    ids = np.arange(num_tokens, dtype=np.float32 if floats else np.int64) + offset
    return np.broadcast_to(ids, (3, num_tokens)).copy(), offset + num_tokens


def vision_positions(grid: tuple[int, int, int], offset: float, *, fps: float | None, base_fps: float = 24.0,
                     temporal_compression: int = 4, reset_spatial: bool = True) -> np.ndarray:
    """`[3, T*H*W]` positions of the vision tokens (post-patch grid, tokens in (t, h, w) order).

    Args:
      grid: post-patch (latent frames, height, width).
      offset: the text's next offset plus the modality margin.
      fps: the video frame rate (None: no modulation, integer positions).
      base_fps: the config's `base_fps`.
      temporal_compression: the VAE's temporal factor (4).
      reset_spatial: the config's `unified_3d_mrope_reset_spatial_ids`.
    """
    t, h, w = grid
    modulated = fps is not None and t > 1
    if modulated:
        tps, base_tps = fps / temporal_compression, base_fps / temporal_compression
        frames = np.arange(t, dtype=np.float32) / np.float32(tps) * np.float32(base_tps) + np.float32(offset)
    else:
        frames = (np.arange(t) + int(offset)).astype(np.float32)
    spatial = 0 if reset_spatial else int(offset)
    t_ids = np.repeat(frames, h * w)
    h_ids = np.broadcast_to(np.arange(h)[None, :, None], (t, h, w)).reshape(-1) + spatial
    w_ids = np.broadcast_to(np.arange(w)[None, None, :], (t, h, w)).reshape(-1) + spatial
    return np.stack([t_ids, h_ids.astype(np.float32), w_ids.astype(np.float32)])


def next_offset(positions: np.ndarray) -> int:
    """The offset after a segment: `ceil(max position) + 1`."""
    return math.ceil(float(positions.max())) + 1


def sequence_positions(cfg: Cosmos3TransformerConfig, text_len: int, grid: tuple[int, int, int],
                       fps: float | None, temporal_compression: int = 4) -> np.ndarray:
    """`[3, text_len + T*H*W]` positions of one prompt's text followed by its vision tokens."""
    text, offset = text_positions(text_len, floats=cfg.enable_fps_modulation)
    vision = vision_positions(grid, offset + cfg.unified_3d_mrope_temporal_modality_margin,
                              fps=fps if cfg.enable_fps_modulation else None, base_fps=float(cfg.base_fps),
                              temporal_compression=temporal_compression,
                              reset_spatial=cfg.unified_3d_mrope_reset_spatial_ids)
    return np.concatenate([text.astype(np.float32), vision], axis=1)


def rope_tables(cfg: Cosmos3TransformerConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin `[..., S, head_dim]` of positions `[..., 3, S]`."""
    inv_freq = (1.0 / np.float32(cfg.rope_theta) ** (np.arange(0, cfg.head_dim, 2, dtype=np.float32)
                                                      / np.float32(cfg.head_dim))).astype(np.float32)
    positions = np.asarray(positions, np.float32)
    freqs = positions[..., :, :, None] * inv_freq  # [..., 3, S, head_dim/2]
    angles = freqs[..., 0, :, :].copy()
    for axis, offset in ((1, 1), (2, 2)):
        idx = slice(offset, cfg.rope_axes_dim[axis] * 3, 3)
        angles[..., idx] = freqs[..., axis, :, idx]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def batch_positions(cfg: Cosmos3TransformerConfig, lengths: list[int], grid: tuple[int, int, int],
                    fps: float | None, temporal_compression: int = 4) -> np.ndarray:
    """`[B, 3, max(lengths) + T*H*W]` for prompts right-padded to one length (CFG's two prompts): each
    row's video positions follow its own prompt; padded text slots get position 0 (they are masked)."""
    longest = max(lengths)
    rows = []
    for length in lengths:
        pos = sequence_positions(cfg, length, grid, fps, temporal_compression)
        rows.append(np.concatenate([pos[:, :length], np.zeros((3, longest - length), np.float32), pos[:, length:]], 1))
    return np.stack(rows)
