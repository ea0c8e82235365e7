"""3-D neighborhood attention (NATTEN's `na3d`, as LTX-2.5's diffusion decoder uses it), blocked.

Every query at grid position (t, h, w) attends to a `kernel`-sized window of keys centred on it and
shifted inward at the grid borders, so it always holds exactly `kernel` positions per axis: the
window start along an axis of length `n` is `clip(q - k // 2, 0, n - k)` (diffusers'
`_neighborhood_block_mask`).

Queries are cut into blocks of `block` positions per axis; a block's windows all lie inside one key
region of `block + kernel - 1` positions per axis (clamped to the grid), so each block is a dense
masked attention of `prod(block)` queries against `prod(region)` keys. `jax.lax.map` runs the
blocks (a few at a time with `blocks_per_step`): one compiled body whatever the grid, memory
linear in the grid. The naive version (the whole grid's window mask, or one gather per query)
compiled for 45+ minutes and ran out of memory at 147 GB on a tiny shape.

Reached through `vidax.zoo.compute.attention.neighborhood_attention` (the entry point's per-sample key mask
cannot say a window per query).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

DEFAULT_BLOCK = (4, 8, 8)


def _axis_tables(n: int, k: int, b: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Per query block along one axis: key-region start `[nb]`, allowed `[nb, b, R]`, region size R."""
    nb = -(-n // b)
    region = min(b + k - 1, n)
    q0 = np.arange(nb) * b
    start = np.minimum(np.clip(q0 - k // 2, 0, n - k), n - region)
    q = q0[:, None] + np.arange(b)[None]  # [nb, b]; positions past n are padding (cropped later)
    window = np.clip(q - k // 2, 0, n - k)
    keys = start[:, None] + np.arange(region)[None]  # [nb, R]
    allowed = (keys[:, None, :] >= window[:, :, None]) & (keys[:, None, :] < window[:, :, None] + k)
    return start.astype(np.int32), allowed, region


def neighborhood_attention(q: jax.Array, k: jax.Array, v: jax.Array, kernel: tuple[int, int, int], *,
                           scale: float = 1.0, block: tuple[int, int, int] = DEFAULT_BLOCK,
                           blocks_per_step: int = 1) -> jax.Array:
    """Windowed attention over a `[B, T, H, W, heads, D]` grid (q, k, v alike); returns q's shape.

    Args:
      kernel: window size per axis (an axis shorter than its kernel is an error, as in the reference).
      scale: logit scale (the diffusion decoder pre-scales its queries: 1).
      block: query block per axis (clamped to the grid).
      blocks_per_step: blocks computed together per `lax.map` step (more: faster, more memory).
    """
    b, *grid, heads, d = q.shape
    if any(n < kk for n, kk in zip(grid, kernel)):
        raise ValueError(f"neighborhood attention needs every axis at least its kernel: grid {tuple(grid)}, "
                         f"kernel {tuple(kernel)}")
    block = tuple(min(bb, n) for bb, n in zip(block, grid))
    tables = [_axis_tables(n, kk, bb) for n, kk, bb in zip(grid, kernel, block)]
    counts = [len(t[0]) for t in tables]
    region = tuple(t[2] for t in tables)
    pad = [(0, 0)] + [(0, c * bb - n) for c, bb, n in zip(counts, block, grid)] + [(0, 0), (0, 0)]
    q = jnp.pad(q, pad)
    starts = [jnp.asarray(t[0]) for t in tables]
    allowed = [jnp.asarray(t[1]) for t in tables]
    nq, nk = math.prod(block), math.prod(region)

    def one(index):
        it, ih, iw = index
        qb = jax.lax.dynamic_slice(q, (0, it * block[0], ih * block[1], iw * block[2], 0, 0), (b, *block, heads, d))
        origin = (0, starts[0][it], starts[1][ih], starts[2][iw], 0, 0)
        kb = jax.lax.dynamic_slice(k, origin, (b, *region, heads, d)).reshape(b, nk, heads, d)
        vb = jax.lax.dynamic_slice(v, origin, (b, *region, heads, d)).reshape(b, nk, heads, d)
        at, ah, aw = allowed[0][it], allowed[1][ih], allowed[2][iw]  # [bt, Rt], [bh, Rh], [bw, Rw]
        mask = (at[:, None, None, :, None, None] & ah[None, :, None, None, :, None]
                & aw[None, None, :, None, None, :]).reshape(nq, nk)
        logits = jnp.einsum("bqhd,bkhd->bhqk", qb.reshape(b, nq, heads, d).astype(jnp.float32),
                            kb.astype(jnp.float32)) * scale
        probs = jax.nn.softmax(jnp.where(mask[None, None], logits, -jnp.inf), axis=-1)  # every row has k keys
        return jnp.einsum("bhqk,bkhd->bqhd", probs, vb.astype(jnp.float32)).astype(q.dtype)

    grid_index = np.stack(np.meshgrid(*[np.arange(c) for c in counts], indexing="ij"), -1).reshape(-1, 3)
    index = tuple(jnp.asarray(grid_index[:, i], jnp.int32) for i in range(3))
    out = jax.lax.map(one, index, batch_size=blocks_per_step if blocks_per_step > 1 else None)
    out = out.reshape(*counts, b, *block, heads, d).transpose(3, 0, 4, 1, 5, 2, 6, 7, 8)
    out = out.reshape(b, *(c * bb for c, bb in zip(counts, block)), heads, d)
    return out[:, : grid[0], : grid[1], : grid[2]]
