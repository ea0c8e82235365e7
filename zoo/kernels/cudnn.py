"""GPU attention: cuDNN flash attention through `jax.nn.dot_product_attention`.

cuDNN's fused kernel takes fp16/bf16 with head dims that are multiples of 8 up to 256; other
inputs, and arbitrary key masks (cuDNN masks by lengths, not by positions), go to the blockwise
fallback, which never materialises S×S either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def cudnn_supports(q, kv_mask) -> bool:
    """Whether the fused cuDNN kernel takes these inputs."""
    d = q.shape[-1]
    return kv_mask is None and q.dtype in CUDNN_DTYPES and d % 8 == 0 and d <= 256


def cudnn_attention(q, k, v, scale: float):
    """`[B, S, H, D]` attention on cuDNN (layouts already match jax's BTNH convention)."""
    return jax.nn.dot_product_attention(q, k, v, scale=scale, implementation="cudnn")
