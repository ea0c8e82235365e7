"""Attention entry point (placeholder: naive softmax; the runtime issue replaces the internals).

The signature is the contract families code against:

    attention(q, k, v, *, kv_mask=None, scale=None) -> [B, Sq, H, D]

q `[B, Sq, H, D]`, k/v `[B, Skv, H, D]`, kv_mask `[B, Skv]` bool (True = attend).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def attention(q, k, v, *, kv_mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if kv_mask is not None:
        logits = jnp.where(kv_mask[:, None, None, :], logits, -jnp.inf)
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32)).astype(q.dtype)


def joint_attention(q, k, v, q_txt, k_txt, v_txt, *, txt_mask=None, scale=None):
    """Attention over video tokens and text tokens sharing one sequence (HunyuanVideo-style).

    Video q/k/v `[B, S, H, D]` (sequence-sharded under sequence parallel), text `[B, T, H, D]`
    (replicated), txt_mask `[B, T]` bool. Returns `(out_video, out_text)`.
    """
    s = q.shape[1]
    kv_mask = None
    if txt_mask is not None:
        kv_mask = jnp.concatenate([jnp.ones(q.shape[:2], bool), txt_mask.astype(bool)], axis=1)
    out = attention(
        jnp.concatenate([q, q_txt], 1),
        jnp.concatenate([k, k_txt], 1),
        jnp.concatenate([v, v_txt], 1),
        kv_mask=kv_mask,
        scale=scale,
    )
    return out[:, :s], out[:, s:]
