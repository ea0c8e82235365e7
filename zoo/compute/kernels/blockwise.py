"""Blockwise online-softmax attention (the CPU path and the fallback of every backend).

Work is cut into (head group, query block) steps run one after another (`lax.map`); each step
folds its key/value blocks in with a running max and sum (`lax.scan`), as in FlashAttention, or,
when the keys fit one block, takes the exact softmax of its one tile. The largest temporary is one
`[B, heads_per_step, block_q, block_kv]` tile, so memory grows linearly with the sequence length.

On CPU a step is one head (`heads_per_step=1`): its fp32 tile (at most 4 MiB) stays in the
last-level cache between the two matmuls and the softmax, where a tile of all heads (25 MiB for
12 heads) went through memory, and the matmuls take q, k and v heads-major without a transpose per
step. Blocks are balanced (3510 tokens are 5 blocks of 702, not 4 of 1024 with 586 rows of
padding). A key block whose mask allows every key skips the select pass; one that allows none is
skipped. bench/runtime/bench_attention.py times the kernel beside PyTorch's `scaled_dot_product_attention`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vidax.zoo.compute.runtime import platform

BLOCK_Q = 1024
BLOCK_KV = 1024


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def balanced_blocks(length: int, preferred: int) -> tuple[int, int]:
    """`(count, size)` of the blocks covering `length`, none larger than `preferred`.

    One block when the length fits; else equal blocks that divide the length exactly if some size
    in [preferred/2, preferred] does (3510 tokens: 5 x 702), so no key needs masking; else the
    fewest equal blocks, multiples of 8, whose padding stays under 8 per block.
    """
    if length <= preferred:
        return 1, length
    for size in range(preferred, preferred // 2 - 1, -1):
        if length % size == 0:
            return length // size, size
    count = -(-length // preferred)
    return count, _round_up(-(-length // count), 8)


def _pad_axis(x, axis: int, size: int, value=0):
    if x.shape[axis] == size:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad, constant_values=value)


def blockwise_attention(q, k, v, kv_mask, scale: float, *, block_q: int = BLOCK_Q, block_kv: int = BLOCK_KV,
                        heads_per_step: int | None = None):
    """Softmax attention without the `[Sq, Skv]` matrix; fp32 accumulation, output in q's dtype.

    Args:
      q, k, v: `[B, Sq, H, D]`, `[B, Skv, H, D]`, `[B, Skv, H, D]`.
      kv_mask: `[B, Skv]` bool (True = attend) or None.
      scale: logit scale.
      block_q, block_kv: largest query / key block (the sizes used: `balanced_blocks`).
      heads_per_step: heads per step, a divisor of H; default one on CPU, all heads on
        accelerators (whose steps cost more and whose matmuls want the batch of heads).
    """
    b, sq, h, d = q.shape
    skv = k.shape[1]
    g = heads_per_step or (1 if platform() == "cpu" else h)
    if h % g:
        raise ValueError(f"heads_per_step {g} does not divide the {h} heads")
    nq, bq = balanced_blocks(sq, block_q)
    nk, bk = balanced_blocks(skv, block_kv)
    sq_pad, skv_pad = nq * bq, nk * bk
    masked = kv_mask is not None or skv_pad != skv
    mask = jnp.ones((b, skv), bool) if kv_mask is None else kv_mask.astype(bool)
    mask = _pad_axis(mask, 1, skv_pad, False).reshape(b, nk, bk).swapaxes(0, 1)  # [nk, B, bk]

    def groups(x, length, blocks, size):  # [B, S, H, D] -> [H/g, blocks, B, g, size, D]
        x = _pad_axis(x, 1, length).reshape(b, blocks, size, h // g, g, d)
        return x.transpose(3, 1, 0, 4, 2, 5)

    q_steps = groups(q.astype(jnp.float32) * scale, sq_pad, nq, bq).reshape(h // g * nq, b, g, bq, d)
    k_groups = groups(k.astype(jnp.float32), skv_pad, nk, bk)  # [H/g, nk, B, g, bk, D]
    v_groups = groups(v.astype(jnp.float32), skv_pad, nk, bk)
    group_of_step = jnp.repeat(jnp.arange(h // g), nq)

    def logits(q_block, k_block, mask_block):  # [B, g, bq, bk]; masked keys at -inf when a mask is given
        s = jnp.einsum("bgqd,bgkd->bgqk", q_block, k_block)
        return s if mask_block is None else jnp.where(mask_block[:, None, None, :], s, -jnp.inf)

    def by_mask(mask_block, unmasked, masked_fn, empty):
        """Branch on the block's mask: no select pass where every key is allowed, no work where none is
        (the padding at the end of a sequence, text padding moved behind the valid tokens)."""
        if not masked:
            return unmasked()
        kind = jnp.where(jnp.all(mask_block), 2, jnp.where(jnp.any(mask_block), 1, 0))
        return jax.lax.switch(kind, (empty, masked_fn, unmasked))

    def exact(q_block, k_block, v_block, mask_block):
        def run(m):
            s = logits(q_block, k_block, m)
            row_max = jnp.max(s, axis=-1, keepdims=True)
            weights = jnp.exp(s - jnp.where(jnp.isfinite(row_max), row_max, 0.0))
            return jnp.einsum("bgqk,bgkd->bgqd", weights, v_block), jnp.sum(weights, axis=-1)

        def empty():
            return jnp.zeros(q_block.shape), jnp.zeros(q_block.shape[:-1])

        return by_mask(mask_block, lambda: run(None), lambda: run(mask_block), empty)

    def online(q_block, k_blocks, v_blocks):
        def update(carry, k_block, v_block, mask_block):
            row_max, row_sum, acc = carry
            s = logits(q_block, k_block, mask_block)
            new_max = jnp.maximum(row_max, jnp.max(s, axis=-1))
            safe_max = jnp.where(jnp.isfinite(new_max), new_max, 0.0)  # all masked so far: no NaN
            weights = jnp.exp(s - safe_max[..., None])
            correction = jnp.exp(row_max - safe_max)
            row_sum = row_sum * correction + jnp.sum(weights, axis=-1)
            acc = acc * correction[..., None] + jnp.einsum("bgqk,bgkd->bgqd", weights, v_block)
            return new_max, row_sum, acc

        def fold(carry, kv):
            k_block, v_block, mask_block = kv
            return by_mask(mask_block, lambda: update(carry, k_block, v_block, None),
                           lambda: update(carry, k_block, v_block, mask_block), lambda: carry), None

        init = (jnp.full(q_block.shape[:-1], -jnp.inf), jnp.zeros(q_block.shape[:-1]), jnp.zeros(q_block.shape))
        (_, row_sum, acc), _ = jax.lax.scan(fold, init, (k_blocks, v_blocks, mask))
        return acc, row_sum

    def step(args):
        q_block, group = args
        k_blocks, v_blocks = k_groups[group], v_groups[group]  # [nk, B, g, bk, D]
        if nk == 1:
            acc, row_sum = exact(q_block, k_blocks[0], v_blocks[0], mask[0])
        else:
            acc, row_sum = online(q_block, k_blocks, v_blocks)
        denom = row_sum[..., None]
        return jnp.where(denom > 0, acc / jnp.where(denom > 0, denom, 1.0), 0.0).astype(q.dtype)

    out = jax.lax.map(step, (q_steps, group_of_step))  # [H/g * nq, B, g, bq, D]
    out = out.reshape(h // g, nq, b, g, bq, d).transpose(2, 1, 4, 0, 3, 5)  # [B, nq, bq, H/g, g, D]
    return out.reshape(b, sq_pad, h, d)[:, :sq]
