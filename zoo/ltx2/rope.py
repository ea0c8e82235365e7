"""LTX-2 rotary position tables, built on the host as diffusers builds them.

Follows diffusers `LTX2AudioVideoRotaryPosEmbed` (DiT) and `LTX2RotaryPosEmbed1d` (connectors): every
token has a `[start, end)` box per axis (video: frame, height, width in pixel units with the frame
axis in seconds; audio: seconds), the midpoint is divided by the axis' base size, and the angle of
frequency `f` is `(2 * pos - 1) * f` with `f = theta ** linspace(0, 1) * pi / 2`. Two layouts:

- "interleaved": cos/sin `[S, dim]`, each angle repeated for its (2i, 2i+1) pair over the whole
  projection width (all heads at once), front-padded with cos 1 / sin 0;
- "split": cos/sin `[S, heads, dim / 2 / heads]`, rotating each head's first half against its
  second half (front-padded the same way before the per-head reshape).

The tables are computed in NumPy with the reference's fp32 operation order (angles reach 1.5e4
radians, so a fused multiply-add on the device would move them by ~1e-3): a pipeline builds them
once per generation, from the coordinates below, and passes them to the DiT as data, so the frame
rate (which enters the video coordinates) never recompiles anything.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vidax.zoo.compute.kernels.heads_major import swapped_lanes
from vidax.zoo.ltx2.config import TransformerConfig
from vidax.zoo.compute.runtime import platform


def video_coords(frames: int, height: int, width: int, *, fps: float, patch_size: int = 1, patch_size_t: int = 1,
                 scale_factors: tuple[int, int, int] = (8, 32, 32), causal_offset: int = 1) -> np.ndarray:
    """diffusers `prepare_video_coords` for one sample: `[3, F*H*W, 2]` pixel-space `[start, end)`.

    Args:
      frames, height, width: the latent grid.
      fps: the frame rate the frame axis is divided by (diffusers' `frame_rate / motion_speed`).
    """
    axes = [np.arange(0, n, step, dtype=np.float32) for n, step in ((frames, patch_size_t), (height, patch_size),
                                                                      (width, patch_size))]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=0)  # [3, F, H, W]
    ends = grid + np.asarray((patch_size_t, patch_size, patch_size), np.float32).reshape(3, 1, 1, 1)
    coords = np.stack([grid, ends], axis=-1).reshape(3, -1, 2)  # [3, S, 2]
    pixel = coords * np.asarray(scale_factors, np.float32).reshape(3, 1, 1)
    # the causal VAE's first frame covers one pixel frame: shift and clamp the frame boxes
    pixel[0] = np.maximum(pixel[0] + np.float32(causal_offset) - np.float32(scale_factors[0]), np.float32(0))
    pixel[0] = pixel[0] / np.float32(fps)
    return pixel


def audio_coords(frames: int, *, patch_size_t: int = 1, scale_factor: int = 4, causal_offset: int = 1,
                 hop_length: int = 160, sampling_rate: int = 16000, shift: int = 0) -> np.ndarray:
    """diffusers `prepare_audio_coords` for one sample: `[1, L, 2]` `[start, end)` in seconds."""
    grid = np.arange(shift, frames + shift, patch_size_t, dtype=np.float32)

    def seconds(mel):
        mel = np.maximum(mel + np.float32(causal_offset) - np.float32(scale_factor), np.float32(0))
        return mel * np.float32(hop_length) / np.float32(sampling_rate)

    start = seconds(grid * np.float32(scale_factor))
    end = seconds((grid + np.float32(patch_size_t)) * np.float32(scale_factor))
    return np.stack([start, end], axis=-1)[None]


def _linspace01(steps: int, dtype) -> np.ndarray:
    """`torch.linspace(0, 1, steps)` bit for bit: the first half counts up from 0, the second down from
    1 (NumPy's linspace rounds differently, and one fp32 ulp of a 1.5e4 frequency is 1e-3 rad)."""
    if steps == 1:
        return np.zeros(1, dtype)
    step = dtype(1.0) / dtype(steps - 1)
    i = np.arange(steps)
    up = dtype(0.0) + step * i.astype(dtype)
    down = dtype(1.0) - step * (steps - i - 1).astype(dtype)
    return np.where(i < steps // 2, up, down).astype(dtype)


def _frequencies(steps: int, theta: float, double: bool) -> np.ndarray:
    """`theta ** linspace(0, 1, steps) * pi / 2` as fp32 (computed in float64 when `double`)."""
    if double:
        return (np.power(theta, _linspace01(steps, np.float64)) * math.pi / 2.0).astype(np.float32)
    base = np.power(np.float32(theta), _linspace01(steps, np.float32))
    return (base * np.float32(math.pi) / np.float32(2.0)).astype(np.float32)


def rope_table(coords: np.ndarray, max_positions: tuple[int, ...], dim: int, *, theta: float, double: bool,
               rope_type: str, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin for `coords` `[P, S, 2]` (boxes) or `[P, S]` (positions); layouts in the module doc."""
    coords = np.asarray(coords, np.float32)
    if coords.ndim == 3:
        coords = (coords[..., 0] + coords[..., 1]) / np.float32(2.0)  # box midpoints
    num_axes = coords.shape[0]
    grid = np.stack([coords[i] / np.float32(max_positions[i]) for i in range(num_axes)], axis=-1)  # [S, P]
    freqs = _frequencies(dim // (2 * num_axes), theta, double)
    angles = (grid[..., None] * np.float32(2) - np.float32(1)) * freqs  # [S, P, steps]
    angles = np.swapaxes(angles, -1, -2).reshape(angles.shape[0], -1)  # [S, steps * P], frequency-major
    cos, sin = np.cos(angles), np.sin(angles)
    if rope_type == "interleaved":
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
        pad = dim % (2 * num_axes)
    else:
        pad = dim // 2 - cos.shape[-1]
    if pad:
        cos = np.concatenate([np.ones((cos.shape[0], pad), np.float32), cos], axis=-1)
        sin = np.concatenate([np.zeros((sin.shape[0], pad), np.float32), sin], axis=-1)
    if rope_type == "split":
        cos, sin = cos.reshape(cos.shape[0], heads, -1), sin.reshape(sin.shape[0], heads, -1)
    return cos.astype(np.float32), sin.astype(np.float32)


@struct.dataclass
class RopeTables:
    """The four tables of one DiT call (batch-free: every sample of a batch shares its positions)."""

    video: tuple[jax.Array, jax.Array]  # video self-attention, width inner_dim
    audio: tuple[jax.Array, jax.Array]  # audio self-attention, width audio_inner_dim
    cross_video: tuple[jax.Array, jax.Array]  # a2v / v2a, video side: frame axis only
    cross_audio: tuple[jax.Array, jax.Array]  # a2v / v2a, audio side
    rope_type: str = struct.field(pytree_node=False, default="interleaved")


def dit_rope_tables(cfg: TransformerConfig, video: np.ndarray, audio: np.ndarray) -> RopeTables:
    """The DiT's tables from `video_coords` `[3, S, 2]` and `audio_coords` `[1, L, 2]` (diffusers'
    `rope`, `audio_rope`, `cross_attn_rope` and `cross_attn_audio_rope`)."""
    common = dict(theta=cfg.rope_theta, double=cfg.rope_double_precision, rope_type=cfg.rope_type)
    cross_max = max(cfg.pos_embed_max_pos, cfg.audio_pos_embed_max_pos)
    tables = (
        rope_table(video, (cfg.pos_embed_max_pos, cfg.base_height, cfg.base_width), cfg.inner_dim,
                   heads=cfg.num_attention_heads, **common),
        rope_table(audio, (cfg.audio_pos_embed_max_pos,), cfg.audio_inner_dim,
                   heads=cfg.audio_num_attention_heads, **common),
        # diffusers builds the video-side cross table with the video head count, the audio side with
        # the audio one (they are equal in every release)
        rope_table(video[:1], (cross_max,), cfg.audio_cross_attention_dim, heads=cfg.num_attention_heads, **common),
        rope_table(audio[:1], (cross_max,), cfg.audio_cross_attention_dim, heads=cfg.audio_num_attention_heads,
                   **common),
    )
    as_jax = lambda pair: tuple(jnp.asarray(t) for t in pair)  # noqa: E731
    return RopeTables(*(as_jax(t) for t in tables), rope_type=cfg.rope_type)


def default_dit_rope_tables(cfg: TransformerConfig, frames: int, height: int, width: int, audio_frames: int,
                            fps: float) -> RopeTables:
    """Tables for a plain T2V/I2V call: the pipeline's default coordinates on the latent grid."""
    video = video_coords(frames, height, width, fps=fps, patch_size=cfg.patch_size, patch_size_t=cfg.patch_size_t,
                         scale_factors=cfg.vae_scale_factors, causal_offset=cfg.causal_offset)
    audio = audio_coords(audio_frames, patch_size_t=cfg.audio_patch_size_t, scale_factor=cfg.audio_scale_factor,
                         causal_offset=cfg.causal_offset, hop_length=cfg.audio_hop_length,
                         sampling_rate=cfg.audio_sampling_rate)
    return dit_rope_tables(cfg, video, audio)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array, rope_type: str) -> jax.Array:
    """Rotate projections `x` `[B, S, width]` (all heads, before the head split) in fp32.

    Tables are batch-free (`[S, ...]`) or per sample (`[B, S, ...]`).
    """
    x32 = x.astype(jnp.float32)
    if platform() == "tpu":
        return _rope_by_products(x, cos, sin, rope_type)
    if rope_type == "interleaved":
        pairs = x32.reshape(*x.shape[:-1], -1, 2)
        rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)  # (-x2, x1)
        return (x32 * cos + rotated * sin).astype(x.dtype)
    heads, half = cos.shape[-2], cos.shape[-1]
    halves = x32.reshape(*x.shape[:-1], heads, 2, half)  # [B, S, H, 2, r]: each head's two halves
    first, second = halves[..., 0, :], halves[..., 1, :]
    out = jnp.stack([first * cos - second * sin, second * cos + first * sin], axis=-2)
    return out.reshape(x.shape).astype(x.dtype)


def _rope_by_products(x: jax.Array, cos: jax.Array, sin: jax.Array, rope_type: str) -> jax.Array:
    """`apply_rope` on a TPU: per head, the partner lanes from one exact product with a signed permutation (as
    `zoo/parts/rope.py` does there; the same values), since the pair and half reshapes leave fp32 copies of q
    and k in lane layouts XLA does not fuse. `cos`/`sin` are `[.., S, width]` (interleaved) or
    `[.., S, heads, half]` (split)."""
    width = x.shape[-1]
    if rope_type == "interleaved":  # pairs are adjacent lanes: any even group of lanes rotates alone
        group = next(g for g in (128, 64, 2) if width % g == 0)
        cos, sin = (t.reshape(*t.shape[:-1], width // group, group) for t in (cos, sin))
    else:  # each head's first half against its second; the tables hold one angle per pair
        group = width // cos.shape[-2]
        cos, sin = (jnp.concatenate([t, t], axis=-1) for t in (cos, sin))
    xg = x.reshape(*x.shape[:-1], width // group, group)
    rotated = swapped_lanes(xg, halves=rope_type != "interleaved")
    return (xg.astype(jnp.float32) * cos + rotated * sin).reshape(x.shape).astype(x.dtype)


def default_dit_rope_shapes(cfg: TransformerConfig, frames: int, height: int, width: int, audio_frames: int,
                            fps: float) -> RopeTables:
    """`default_dit_rope_tables`' shapes and dtypes without computing its tables (for the planner and the
    dry run: the full tables cost seconds of host time at native size)."""
    video = video_coords(frames, height, width, fps=fps, patch_size=cfg.patch_size, patch_size_t=cfg.patch_size_t,
                         scale_factors=cfg.vae_scale_factors, causal_offset=cfg.causal_offset)
    audio = audio_coords(audio_frames, patch_size_t=cfg.audio_patch_size_t, scale_factor=cfg.audio_scale_factor,
                         causal_offset=cfg.causal_offset, hop_length=cfg.audio_hop_length,
                         sampling_rate=cfg.audio_sampling_rate)
    one = dit_rope_tables(cfg, video[:, :1], audio[:, :1])  # a token's row; every table is one row per token
    lengths = (video.shape[1], audio.shape[1], video.shape[1], audio.shape[1])
    pairs = (one.video, one.audio, one.cross_video, one.cross_audio)
    shaped = [tuple(jax.ShapeDtypeStruct((n, *t.shape[1:]), t.dtype) for t in pair) for n, pair in zip(lengths, pairs)]
    return RopeTables(*shaped, rope_type=one.rope_type)

