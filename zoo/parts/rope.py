"""Applying rotary position tables. Each family builds its own tables (their formulas differ and are
not interchangeable); the two ways of rotating a head vector by them, and the expansion of per-axis
tables over a video's token grid, are shared here.

Tables are `[S, D]` cos/sin per token (or `[B, S, D]` per sample), `x` is `[B, S, H, D]`; the
rotation runs in fp32 and returns `x`'s dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.compute.kernels.heads_major import swapped_lanes
from vidax.zoo.compute.runtime import platform


def grid_table(parts: Sequence[tuple[int, np.ndarray]], grid: Sequence[int]) -> jax.Array:
    """`[prod(grid), sum of widths]` per token of `grid` (last axis fastest) from small per-axis tables.

    Each part `(axis, table)` is a `[grid[axis], width]` table; a token at grid position `(i0, i1, ...)`
    takes `table[i_axis]` for it, the parts side by side in the order given (an axis may appear twice).
    A video token's rotary angle along one axis depends on its position on that axis alone, so every
    grid family's cos/sin table is such a product. The expansion runs in the program: host-made full
    tables are baked into a jitted program as constants (2 x 61 MB for HunyuanVideo at 720p), which XLA
    then compiles with the program (its CPU compile of HunyuanVideo's 2-block dry-run step took 4.6 s with
    them, 1.7 s without); the per-axis tables are kilobytes.
    """
    grid = tuple(int(n) for n in grid)
    pieces = []
    for axis, table in parts:
        if table.shape[0] != grid[axis]:
            raise ValueError(f"axis {axis} has {grid[axis]} positions, its table {table.shape[0]} rows")
        shape = [1] * len(grid) + [table.shape[-1]]
        shape[axis] = grid[axis]
        pieces.append(jnp.broadcast_to(jnp.asarray(table).reshape(shape), (*grid, table.shape[-1])))
    return jnp.concatenate(pieces, axis=-1).reshape(math.prod(grid), -1)


def _tables(table: jax.Array) -> jax.Array:
    """`[S, D]` -> `[1, S, 1, D]`; `[B, S, D]` -> `[B, S, 1, D]`."""
    return table[None, :, None] if table.ndim == 2 else table[:, :, None]


def rotate_interleaved(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the pairs `(x[2i], x[2i+1])` (diffusers `apply_rotary_emb(use_real_unbind_dim=-1)`;
    the tables repeat each angle for its pair).

    Two spellings of the same values (bit for bit), chosen by backend. On a TPU each lane's partner
    comes from one product with a signed permutation (`swapped_lanes`; exact: each output is one input times
    +-1 summed with zeros, at the highest precision). A `[..., D/2, 2]` reshape there puts a minor axis of 2
    in 128 lanes, and XLA kept fp32 copies of q and k in that layout (2.9 GiB each for a Wan 720p block);
    rolling by one lane each way lowers to slices and a concatenate that XLA did not fuse either (fp32
    slices of q and k in HBM: CogVideoX1.5-5B's one-block step planned 18.91 GB of temporaries on a v5e
    with the rolls, 9.05 GB with the product, whose TPU layouts pad the 64-wide heads to 128 lanes).
    On the CPU the reshape fuses (the dry-run planner's figures are XLA's CPU ones).
    """
    x32 = x.astype(jnp.float32)
    if platform() == "tpu" and x.shape[-1] > LANE_GROUP and x.shape[-1] % LANE_GROUP == 0:
        return _rotate_lane_groups(x, cos, sin)
    if platform() == "tpu":
        rotated = swapped_lanes(x)
    else:
        pairs = x32.reshape(*x.shape[:-1], -1, 2)
        rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)  # (-x2, x1)
    return (x32 * _tables(cos) + rotated * _tables(sin)).astype(x.dtype)


# The widest signed permutation `rotate_interleaved` multiplies by on a TPU: one MXU tile's width. Pairs are adjacent
# lanes, so any even group of lanes rotates alone; LTX-Video rotates its whole 2048-wide width as one "head", whose
# [2048, 2048] permutation at the highest precision cost 16 times the FLOPs of sixteen [128, 128] ones.
LANE_GROUP = 128


def _rotate_lane_groups(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """`rotate_interleaved` on a TPU for a head wider than `LANE_GROUP` lanes: the same products, group by group."""
    groups = x.shape[-1] // LANE_GROUP
    split = lambda t: t.reshape(*t.shape[:-1], groups, LANE_GROUP)  # noqa: E731
    xg = split(x)
    rotated = swapped_lanes(xg)
    out = xg.astype(jnp.float32) * split(_tables(cos)) + rotated * split(_tables(sin))
    return out.reshape(x.shape).astype(x.dtype)


def rotate_half(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the halves `(x[:D/2], x[D/2:])` (transformers `rotate_half`, diffusers
    `use_real_unbind_dim=-2`; the tables hold each angle twice, `[freqs, freqs]`)."""
    x32 = x.astype(jnp.float32)
    if platform() == "tpu":  # one exact product, as `rotate_interleaved`: the slices' concatenate
        rotated = swapped_lanes(x, halves=True)
    else:
        half = x.shape[-1] // 2
        rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * _tables(cos) + rotated * _tables(sin)).astype(x.dtype)
