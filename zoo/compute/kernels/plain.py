"""Plain softmax attention: materialises `[B, H, Sq, Skv]`, so only for short key sequences."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def plain_attention(q, k, v, kv_mask, scale: float):
    """Softmax(q kᵀ · scale) v in fp32; fully masked rows give zeros."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if kv_mask is not None:
        mask = kv_mask[:, None, None, :]
        logits = jnp.where(mask, logits, -jnp.inf)
        row_max = jnp.max(logits, axis=-1, keepdims=True)
        weights = jnp.exp(logits - jnp.where(jnp.isfinite(row_max), row_max, 0.0))
        total = jnp.sum(weights, axis=-1, keepdims=True)
        probs = weights / jnp.where(total > 0, total, 1.0)
    else:
        probs = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32)).astype(q.dtype)
