"""Blockwise online-softmax attention (the CPU path and the fallback of every backend).

Queries are processed block by block (`lax.map`) and, for each, key/value blocks are folded in
with a running max and sum (`lax.scan`), as in FlashAttention: the largest temporary is one
`[B, H, block_q, block_kv]` tile, so memory grows linearly with the sequence length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BLOCK_Q = 1024
BLOCK_KV = 512


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_axis(x, axis: int, size: int, value=0):
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad, constant_values=value)


def _block_size(length: int, preferred: int) -> int:
    """`preferred`, or the length rounded up to 8 when shorter (no padding 13 tokens to 1024)."""
    return min(preferred, _round_up(length, 8))


def blockwise_attention(q, k, v, kv_mask, scale: float, *, block_q: int = BLOCK_Q, block_kv: int = BLOCK_KV):
    """Softmax attention without the `[Sq, Skv]` matrix; fp32 accumulation, output in q's dtype."""
    b, sq, h, d = q.shape
    skv = k.shape[1]
    bq, bk = _block_size(sq, block_q), _block_size(skv, block_kv)
    sq_pad, skv_pad = _round_up(sq, bq), _round_up(skv, bk)
    if kv_mask is None:
        kv_mask = jnp.ones((b, skv), bool)
    kv_mask = _pad_axis(kv_mask.astype(bool), 1, skv_pad, False)
    q_blocks = _pad_axis(q, 1, sq_pad).reshape(b, sq_pad // bq, bq, h, d).swapaxes(0, 1)  # [nq, B, bq, H, D]
    k_blocks = _pad_axis(k, 1, skv_pad).reshape(b, skv_pad // bk, bk, h, d).swapaxes(0, 1)  # [nk, B, bk, H, D]
    v_blocks = _pad_axis(v, 1, skv_pad).reshape(b, skv_pad // bk, bk, h, d).swapaxes(0, 1)
    m_blocks = kv_mask.reshape(b, skv_pad // bk, bk).swapaxes(0, 1)  # [nk, B, bk]

    def one_query_block(q_block):
        q32 = q_block.astype(jnp.float32) * scale

        def fold(carry, kv):
            row_max, row_sum, acc = carry
            k_block, v_block, mask = kv
            logits = jnp.einsum("bqhd,bkhd->bhqk", q32, k_block.astype(jnp.float32))
            logits = jnp.where(mask[:, None, None, :], logits, -jnp.inf)
            new_max = jnp.maximum(row_max, jnp.max(logits, axis=-1))
            safe_max = jnp.where(jnp.isfinite(new_max), new_max, 0.0)  # all masked so far: no NaN
            weights = jnp.exp(logits - safe_max[..., None])
            correction = jnp.exp(row_max - safe_max)
            row_sum = row_sum * correction + jnp.sum(weights, axis=-1)
            update = jnp.einsum("bhqk,bkhd->bqhd", weights, v_block.astype(jnp.float32))
            acc = acc * correction.transpose(0, 2, 1)[..., None] + update
            return (new_max, row_sum, acc), None

        init = (
            jnp.full((b, h, bq), -jnp.inf, jnp.float32),
            jnp.zeros((b, h, bq), jnp.float32),
            jnp.zeros((b, bq, h, d), jnp.float32),
        )
        (_, row_sum, acc), _ = jax.lax.scan(fold, init, (k_blocks, v_blocks, m_blocks))
        denom = row_sum.transpose(0, 2, 1)[..., None]  # [B, bq, H, 1]
        return jnp.where(denom > 0, acc / jnp.where(denom > 0, denom, 1.0), 0.0).astype(q.dtype)

    out = jax.lax.map(one_query_block, q_blocks)  # [nq, B, bq, H, D]
    return out.swapaxes(0, 1).reshape(b, sq_pad, h, d)[:, :sq]
