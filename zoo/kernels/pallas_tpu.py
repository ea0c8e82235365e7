"""TPU attention: the Pallas flash-attention kernel that ships with jax, padded and masked.

The kernel wants `[B, H, S, D]` with sequence lengths that are multiples of its blocks and a
lane-aligned head dim; we pad queries and keys to the block multiple and the head dim to 128 (zero
columns change no logit, the scale is explicit), and mask padded and masked keys through segment
ids (key segment 0 never matches a query's segment 1). The kernel fills a row with no allowed key
with a uniform average, so such rows are zeroed after. Under a mesh this runs inside `shard_map`
(see `zoo/attention.py`): Pallas kernels sit outside GSPMD.
"""

from __future__ import annotations

import contextlib

import jax.numpy as jnp

BLOCK = 128
LANES = 128


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_to(x, axis: int, size: int):
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad)


def flash_attention(q, k, v, kv_mask, scale: float, *, interpret: bool = False):
    """Pallas flash attention for `[B, S, H, D]` inputs; `interpret=True` runs it on CPU."""
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    b, sq, _, d = q.shape
    skv = k.shape[1]
    sq_pad, skv_pad, d_pad = _round_up(sq, BLOCK), _round_up(skv, BLOCK), _round_up(d, LANES)
    mask = jnp.ones((b, skv), bool) if kv_mask is None else kv_mask.astype(bool)
    key_segments = _pad_to(mask.astype(jnp.int32), 1, skv_pad)
    segments = fa.SegmentIds(q=jnp.ones((b, sq_pad), jnp.int32), kv=key_segments)

    def heads_major(x, length):  # [B, S, H, D] -> [B, H, S_pad, D_pad]
        return _pad_to(_pad_to(x, 1, length), 3, d_pad).transpose(0, 2, 1, 3)

    blocks = fa.BlockSizes(block_q=BLOCK, block_k_major=BLOCK, block_k=BLOCK, block_b=1)
    mode = pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext()
    with mode:
        out = fa.flash_attention(
            heads_major(q, sq_pad), heads_major(k, skv_pad), heads_major(v, skv_pad),
            segment_ids=segments, sm_scale=scale, block_sizes=blocks,
        )
    out = out.transpose(0, 2, 1, 3)[:, :sq, :, :d]  # [B, Sq, H, D]
    if kv_mask is not None:
        out = jnp.where(mask.any(axis=1)[:, None, None, None], out, 0)
    return out.astype(q.dtype)
