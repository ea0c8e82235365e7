"""GPU attention: cuDNN flash attention through `jax.nn.dot_product_attention`.

cuDNN's fused kernel takes fp16/bf16 with head dims that are multiples of 8 up to 256, and masks
keys by per-batch lengths only. A kv_mask that is a prefix (real tokens first, padding after: the
tokenizers' right padding, the sequence-parallel padding, [video; text] in joint attention) is
turned into lengths; whether it is a prefix is checked on the device (`lax.cond`), and any other
mask takes the blockwise kernel, which never materialises S×S either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vidax.zoo.compute.kernels.blockwise import blockwise_attention

CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def cudnn_supports(q) -> bool:
    """Whether the fused cuDNN kernel takes inputs of this dtype and head dim."""
    d = q.shape[-1]
    return q.dtype in CUDNN_DTYPES and d % 8 == 0 and d <= 256


def _prefix_lengths(kv_mask):
    """`(lengths [B] int32, is_prefix scalar bool)` of a `[B, Skv]` mask."""
    lengths = jnp.sum(kv_mask, axis=1, dtype=jnp.int32)
    prefix = jnp.arange(kv_mask.shape[1])[None, :] < lengths[:, None]
    return lengths, jnp.all(prefix == kv_mask)


def cudnn_attention(q, k, v, kv_mask, scale: float, *, implementation: str = "cudnn"):
    """`[B, S, H, D]` attention on cuDNN (`implementation="xla"` runs the same logic anywhere)."""

    def fused(lengths):
        return jax.nn.dot_product_attention(
            q, k, v, scale=scale, key_value_seq_lengths=lengths, implementation=implementation
        )

    if kv_mask is None:
        return fused(None)
    kv_mask = kv_mask.astype(bool)
    lengths, is_prefix = _prefix_lengths(kv_mask)
    out = jax.lax.cond(
        is_prefix,
        lambda: fused(lengths).astype(q.dtype),
        lambda: blockwise_attention(q, k, v, kv_mask, scale),
    )
    return jnp.where((lengths > 0)[:, None, None, None], out, 0).astype(q.dtype)
