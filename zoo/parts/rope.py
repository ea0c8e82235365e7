"""Applying rotary position tables. Each family builds its own tables (their formulas differ and are
not interchangeable); the two ways of rotating a head vector by them are shared here.

Tables are `[S, D]` cos/sin per token (or `[B, S, D]` per sample), `x` is `[B, S, H, D]`; the
rotation runs in fp32 and returns `x`'s dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _tables(table: jax.Array) -> jax.Array:
    """`[S, D]` -> `[1, S, 1, D]`; `[B, S, D]` -> `[B, S, 1, D]`."""
    return table[None, :, None] if table.ndim == 2 else table[:, :, None]


def rotate_interleaved(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the pairs `(x[2i], x[2i+1])` (diffusers `apply_rotary_emb(use_real_unbind_dim=-1)`;
    the tables repeat each angle for its pair).

    The partner of each lane comes from rolling the head vector by one lane either way (even lanes
    take `-x[i+1]`, odd lanes `x[i-1]`), not from a `[..., D/2, 2]` reshape: on a TPU a minor axis of
    2 pads to 128 lanes, and XLA then kept fp32 copies of q and k in that layout (2.9 GiB each for
    a Wan 720p block) instead of fusing the rotation into one pass.
    """
    x32 = x.astype(jnp.float32)
    even = jnp.arange(x.shape[-1]) % 2 == 0
    rotated = jnp.where(even, -jnp.roll(x32, -1, axis=-1), jnp.roll(x32, 1, axis=-1))  # (-x2, x1) per pair
    return (x32 * _tables(cos) + rotated * _tables(sin)).astype(x.dtype)


def rotate_half(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the halves `(x[:D/2], x[D/2:])` (transformers `rotate_half`, diffusers
    `use_real_unbind_dim=-2`; the tables hold each angle twice, `[freqs, freqs]`)."""
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * _tables(cos) + rotated * _tables(sin)).astype(x.dtype)
