"""CogVideoX position tables: per-axis tables built on the host as the diffusers pipeline and transformer build them,
expanded over the token grid in the program (`parts.rope.grid_table`).

- 3D RoPE (5B, 5B-I2V, 1.5): the pipeline's `_prepare_rotary_positional_embeddings` and diffusers
  `get_3d_rotary_pos_embed`. The head dimension splits into t, h, w parts (`d/4`, `3d/8`, `3d/8`),
  each rotating interleaved pairs. 1.0 places the latent grid inside the 30 x 45 training grid
  (`get_resize_crop_region_for_grid`) and spaces positions with `torch.linspace` (fractional
  positions off the native size); 1.5 takes integer positions ("slice") up to the config's
  `sample_height / patch` x `sample_width / patch`, and counts time in patched frames.
- 3D sincos (2B, and 5B-I2V off its native frame count): diffusers `get_3d_sincos_pos_embed`,
  time in the first quarter of the width, then (w, h) halves of the rest.

RoPE tables are computed in float32 as the reference does (float32 positions and frequencies);
the sincos table in float64 from float32 positions, cast to float32 (diffusers' buffer dtype).
"""

from __future__ import annotations

import jax
import numpy as np

from vidax.zoo.cogvideox.config import CogVideoXConfigError, CogVideoXTransformerConfig
from vidax.zoo.parts.rope import grid_table

THETA = 10000.0
_F32, _F64 = np.float32, np.float64


def resize_crop_region(grid: tuple[int, int], base_width: int, base_height: int):
    """diffusers `get_resize_crop_region_for_grid`: `((top, left), (bottom, right))` of the grid
    resized into the base grid, keeping its aspect ratio and centred."""
    h, w = grid
    if h / w > base_height / base_width:
        resize_height, resize_width = base_height, round(base_height / h * w)
    else:
        resize_width, resize_height = base_width, round(base_width / w * h)
    top, left = round((base_height - resize_height) / 2.0), round((base_width - resize_width) / 2.0)
    return (top, left), (top + resize_height, left + resize_width)


def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """`torch.linspace(start, end, steps, dtype=float32)` bit for bit: float32 step, each value
    `start + i·step` (first half) or `end − (steps−1−i)·step` (second half) rounded once."""
    start32, end32 = _F32(start), _F32(end)
    if steps == 1:
        return np.array([start32], _F32)
    step = _F32((end32 - start32) / _F32(steps - 1))
    i = np.arange(steps, dtype=_F64)
    first = _F64(start32) + _F64(step) * i
    second = _F64(end32) - _F64(step) * (steps - 1 - i)
    return np.where(i < steps // 2, first, second).astype(_F32)


def _rotary_1d(dim: int, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """diffusers `get_1d_rotary_pos_embed(use_real=True)`: `[len, dim]` cos/sin, pairs interleaved."""
    power = (THETA ** (np.arange(0, dim, 2, dtype=_F32) / _F32(dim)).astype(_F64)).astype(_F32)
    inv = _F32(1.0) / power  # float32 reciprocal of the rounded power, as torch computes it
    angles = np.outer(positions.astype(_F32), inv).astype(_F32)  # float32 product, as torch.outer
    cos = np.cos(angles.astype(_F64)).astype(_F32)
    sin = np.sin(angles.astype(_F64)).astype(_F32)
    return np.repeat(cos, 2, axis=1), np.repeat(sin, 2, axis=1)


def rotary_tables(cfg: CogVideoXTransformerConfig, frames: int, height: int, width: int
                  ) -> tuple[jax.Array, jax.Array]:
    """cos/sin `[F'*H'*W', head_dim]` float32 for the video tokens (post-patch grid), per-axis tables from
    the host expanded over the grid in the program (`parts.rope.grid_table`).

    Args:
      cfg: the transformer config (patch sizes, head dim, sample size).
      frames, height, width: the latents' frames (1.5: already padded to a multiple of
        `patch_size_t`), height and width.
    """
    p, pt = cfg.patch_size, cfg.patch_size_t
    grid_h, grid_w = height // p, width // p
    base_h, base_w = cfg.sample_height // p, cfg.sample_width // p
    dim_t, dim_h, dim_w = cfg.rope_dims
    if pt is None:  # 1.0: linspace over the crop of the training grid
        (top, left), (bottom, right) = resize_crop_region((grid_h, grid_w), base_w, base_h)
        pos_h = linspace_f32(top, bottom * (grid_h - 1) / grid_h, grid_h)
        pos_w = linspace_f32(left, right * (grid_w - 1) / grid_w, grid_w)
        pos_t = linspace_f32(0, frames * (frames - 1) / frames, frames)
    else:  # 1.5: "slice" of integer positions
        if grid_h > base_h or grid_w > base_w:
            raise CogVideoXConfigError(
                f"CogVideoX 1.5: a {grid_h} x {grid_w} patch grid exceeds the RoPE grid {base_h} x {base_w} "
                f"(sample_height x sample_width / patch_size); the reference cannot build it either"
            )
        pos_h, pos_w = np.arange(grid_h, dtype=_F32), np.arange(grid_w, dtype=_F32)
        pos_t = np.arange((frames + pt - 1) // pt, dtype=_F32)
    tables = [_rotary_1d(d, pos) for d, pos in ((dim_t, pos_t), (dim_h, pos_h), (dim_w, pos_w))]
    grid = (len(pos_t), grid_h, grid_w)
    return (grid_table([(axis, cos) for axis, (cos, _) in enumerate(tables)], grid),
            grid_table([(axis, sin) for axis, (_, sin) in enumerate(tables)], grid))


def _sincos_1d(dim: int, positions: np.ndarray) -> np.ndarray:
    """diffusers `get_1d_sincos_pos_embed_from_grid` (float64): `[len, dim]` as `[sin, cos]`."""
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=_F64) / (dim / 2.0))
    angles = np.outer(positions.reshape(-1).astype(_F64), omega)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def sincos_table(cfg: CogVideoXTransformerConfig, frames: int, height: int, width: int) -> jax.Array:
    """The video part of diffusers' joint sincos table: `[F*H'*W', inner_dim]` float32 (expanded over the
    grid in the program, as `rotary_tables`).

    Args:
      cfg: the transformer config (width, patch size, interpolation scales).
      frames, height, width: latent frames, height and width (1.0 patches frames one by one).
    """
    dim = cfg.inner_dim
    grid_h, grid_w = height // cfg.patch_size, width // cfg.patch_size
    pos_h = np.arange(grid_h, dtype=_F32) / _F32(cfg.spatial_interpolation_scale)
    pos_w = np.arange(grid_w, dtype=_F32) / _F32(cfg.spatial_interpolation_scale)
    pos_t = np.arange(frames, dtype=_F32) / _F32(cfg.temporal_interpolation_scale)
    spatial_dim, temporal_dim = 3 * dim // 4, dim // 4
    # each token: [temporal(t) | spatial(w) | spatial(h)] (diffusers' meshgrid puts w's half first)
    parts = [(0, _sincos_1d(temporal_dim, pos_t)), (2, _sincos_1d(spatial_dim // 2, pos_w)),
             (1, _sincos_1d(spatial_dim // 2, pos_h))]
    return grid_table([(axis, table.astype(_F32)) for axis, table in parts], (frames, grid_h, grid_w))
