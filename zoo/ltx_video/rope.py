"""LTX-Video's 3D RoPE, built on the host as diffusers `LTXVideoRotaryPosEmbed` builds it.

Every token has a fractional position `(f, h, w)` (its latent coordinate scaled to pixels and
divided by the config's `rope_max_pos` = (20, 2048, 2048)); each axis gets `dim // 6` frequencies
`θ^linspace(0, 1)` · π/2, the angle is `freq · (2·pos − 1)`, and the tables interleave the three
axes per frequency and repeat each angle for its (x[2i], x[2i+1]) pair; `dim % 6` leading
channels stay unrotated. The rotation covers the whole model width at once (before the split into
heads), so a table row has `inner_dim` entries.

Two ways to get the positions, as the reference pipelines do:

- `grid_coords`: `LTXPipeline` / `LTXImageToVideoPipeline` (`rope_interpolation_scale =
  (8 / fps, 32, 32)`): frame `f` sits at `8f / fps`.
- `video_coords`: `LTXConditionPipeline` and the official pipeline (0.9.5+,
  `causal_temporal_positioning`): latent frame `f` sits at pixel frame `max(8f − 7, 0)` (the
  causal VAE's first latent frame is one pixel frame), plus the condition's `frame_index`, over fps.

Numerics (why this is host code): the highest frequency is θ·π/2 ≈ 15708 rad per unit position,
so angles reach ±15708 where one fp32 ulp is ~1e-3 rad. The reference forms them in fp32 in a
fixed order; these functions repeat that order in float32 NumPy and take cos/sin of the fp32 angle
in float64 (within 6e-8 of torch's), so the tables match the reference to fp32 rounding. On an
accelerator, angles formed at bf16 (or through a default-precision matmul on TPU) would be off by
tens of radians: positions would be noise. Tables are built once per generation (coordinates do
not change between steps) and enter the DiT as inputs.
"""

from __future__ import annotations

import math

import numpy as np

from vidax.zoo.ltx_video.config import TransformerConfig

F32 = np.float32


def _torch_linspace(start: float, end: float, steps: int) -> np.ndarray:
    """`torch.linspace(start, end, steps, dtype=float32)` on CPU, bit for bit: the first half counts
    up from `start`, the second half down from `end`, by a float32 step, each entry one fused
    multiply-add (emulated in float64, where the product is exact, then rounded once)."""
    if steps == 1:
        return np.array([start], F32)
    step = np.float64(F32((end - start) / (steps - 1)))
    index = np.arange(steps)
    up = np.float64(F32(start)) + step * index
    down = np.float64(F32(end)) - step * (steps - 1 - index)
    return np.where(index < steps // 2, up, down).astype(F32)


def frequencies(cfg: TransformerConfig) -> np.ndarray:
    """`dim // 6` angular frequencies per axis: `θ^linspace(0, 1) · π / 2` in float32.

    The power is taken in float64 and rounded once. torch's fp32 `pow` (SLEEF, 1-ulp) differs from
    that by one ulp on a few of the 341 (2B) / 682 (13B) entries; at the largest angles that is
    ~4e-3 in a table entry, the size of the reference's own fp32 angle rounding (ulp(15708)).
    """
    exponents = _torch_linspace(0.0, 1.0, cfg.inner_dim // 6).astype(np.float64)
    freqs = (np.float64(cfg.rope_theta) ** exponents).astype(F32)
    return (freqs * F32(math.pi)) / F32(2.0)


def grid_coords(batch: int, frames: int, height: int, width: int, cfg: TransformerConfig, *,
                frame_rate: float, vae_temporal: int = 8, vae_spatial: int = 32) -> np.ndarray:
    """Fractional positions `[B, S, 3]` of an `F x H x W` token grid, as `LTXPipeline` passes them.

    Follows `LTXVideoRotaryPosEmbed._prepare_video_coords` with `rope_interpolation_scale =
    (vae_temporal / frame_rate, vae_spatial, vae_spatial)`.

    Args:
      batch: rows (all the same).
      frames, height, width: the post-patch token grid.
      cfg: the transformer config (patch sizes, `rope_max_pos`).
      frame_rate: the fps the pipeline is told (it enters the positions).
    """
    scales = (vae_temporal / frame_rate, vae_spatial, vae_spatial)
    patches = (cfg.patch_size_t, cfg.patch_size, cfg.patch_size)
    axes = []
    for size, scale, patch, base in zip((frames, height, width), scales, patches, cfg.rope_max_pos):
        axes.append(((np.arange(size, dtype=F32) * F32(scale)) * F32(patch)) / F32(base))
    f, h, w = np.meshgrid(*axes, indexing="ij")
    grid = np.stack([f.reshape(-1), h.reshape(-1), w.reshape(-1)], axis=-1)  # [S, 3] in (f, h, w) order
    return np.broadcast_to(grid, (batch, *grid.shape)).copy()


def latent_ids(frames: int, height: int, width: int, *, patch: int = 1, patch_t: int = 1) -> np.ndarray:
    """Integer latent coordinates `[3, S]` of a token grid (`LTXConditionPipeline._prepare_video_ids`)."""
    f, h, w = np.meshgrid(np.arange(0, frames, patch_t), np.arange(0, height, patch), np.arange(0, width, patch),
                          indexing="ij")
    return np.stack([f.reshape(-1), h.reshape(-1), w.reshape(-1)]).astype(np.int64)


def scale_ids(ids: np.ndarray, *, frame_index: int = 0, vae_temporal: int = 8, vae_spatial: int = 32,
              causal_fix: bool = True) -> np.ndarray:
    """Latent ids -> pixel coordinates (`LTXConditionPipeline._scale_video_ids`): frames at
    `max(8f + 1 − 8, 0) + frame_index` (the causal first-frame fix), rows and columns × 32. Without the fix
    (official checkpoints whose config has `causal_temporal_positioning` false: 0.9.0, 0.9.1) frames sit at
    `8f + frame_index` (the official `latent_to_pixel_coords(causal_fix=False)`)."""
    scaled = ids * np.array([vae_temporal, vae_spatial, vae_spatial], np.int64)[:, None]
    if causal_fix:
        scaled[0] = np.maximum(scaled[0] + 1 - vae_temporal, 0)
    scaled[0] = scaled[0] + frame_index
    return scaled


def video_coords(pixel_ids: np.ndarray, cfg: TransformerConfig, *, frame_rate: float) -> np.ndarray:
    """Fractional positions `[B, S, 3]` from pixel coordinates `[B, 3, S]` (or `[3, S]`).

    As `LTXConditionPipeline` (frames × `1 / frame_rate` in fp32) then the transformer's
    `video_coords` branch (each axis / `rope_max_pos`).
    """
    ids = np.asarray(pixel_ids)
    ids = ids[None] if ids.ndim == 2 else ids
    coords = ids.astype(F32)
    coords[:, 0] = coords[:, 0] * F32(1.0 / frame_rate)
    bases = np.array(cfg.rope_max_pos, F32)[None, :, None]
    return np.ascontiguousarray((coords / bases).transpose(0, 2, 1))  # [B, S, 3]


def rope_tables(coords: np.ndarray, cfg: TransformerConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables `[B, S, inner_dim]` (float32) for fractional positions `[B, S, 3]`.

    Rows that are all the same (classifier-free guidance, one prompt) can be passed as `coords[:1]`
    and broadcast by the DiT.
    """
    coords = np.asarray(coords, F32)
    if coords.ndim != 3 or coords.shape[-1] != 3:
        raise ValueError(f"RoPE coordinates must be [B, S, 3], got {coords.shape}")
    freqs = frequencies(cfg)
    centred = coords * F32(2) - F32(1)  # [B, S, 3]
    angles = freqs[None, None, None, :] * centred[..., None]  # [B, S, 3, F] in fp32, as the reference
    angles = angles.transpose(0, 1, 3, 2).reshape(*coords.shape[:2], -1)  # [B, S, F*3]: (f0x, f0y, f0z, f1x, ...)
    cos = np.repeat(np.cos(angles.astype(np.float64)).astype(F32), 2, axis=-1)
    sin = np.repeat(np.sin(angles.astype(np.float64)).astype(F32), 2, axis=-1)
    pad = cfg.inner_dim % 6
    if pad:  # leading channels the reference leaves unrotated
        shape = (*cos.shape[:2], pad)
        cos = np.concatenate([np.ones(shape, F32), cos], axis=-1)
        sin = np.concatenate([np.zeros(shape, F32), sin], axis=-1)
    return cos, sin
