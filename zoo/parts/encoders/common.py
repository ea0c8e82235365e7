"""Pieces every encoder shares: embedding tables, activations, short-sequence attention, configs.

Text and image encoders run once per prompt over at most a few hundred tokens, so their attention
is the plain softmax(QKᵀ) here: it takes what `vidax.zoo.compute.attention.attention` does not (an
additive bias for T5, a causal mask for the decoders). Video self-attention never comes here.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.parts.configs import pick_fields  # noqa: F401  (the encoders' configs read through it)
from vidax.zoo.compute.layers import logical_param
from vidax.zoo.compute.mesh import DATA, TENSOR

# The mesh placement of every encoder's logical axes (names absent here are replicated): Megatron
# tensor parallel over attention heads and feed-forward features, the batch (classifier-free
# guidance's two prompts) over data. Text tokens are never split: sequences are short.
ENCODER_SHARDING_RULES = (
    ("batch", DATA),
    ("heads", TENSOR),
    ("mlp", TENSOR),
)


class TextOutput(NamedTuple):
    last_hidden_state: jax.Array  # [B, S, D], after the final norm
    hidden_states: jax.Array  # [L+1, B, S, D]: transformers' tuple (embeddings, each layer's output, last normed)


def quick_gelu(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(1.702 * x)


# transformers' ACT2FN names -> functions (only those the supported encoders use)
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "quick_gelu": quick_gelu,
    "silu": jax.nn.silu,
}


def activation(name: str, where: str) -> Callable[[jax.Array], jax.Array]:
    if name not in ACTIVATIONS:
        raise ValueError(f"{where}: activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class Embed(nn.Module):
    """A lookup table `embedding` `[num, features]` (a torch `nn.Embedding`'s weight)."""

    num: int
    features: int
    axes: tuple[str | None, str | None] = ("vocab", "embed")

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        table = logical_param(self, "embedding", (self.num, self.features), self.axes)
        return jnp.take(table, ids, axis=0)


def dense_attention(q, k, v, *, scale: float, bias=None, mask=None):
    """softmax(q kᵀ · scale + bias) v over short sequences, in fp32.

    Args:
      q, k, v: `[B, S, H, D]` (k/v may have fewer heads: grouped-query attention repeats them).
      scale: logit scale (T5 uses 1.0).
      bias: additive logits bias broadcastable to `[B, H, Sq, Sk]`, or None.
      mask: bool, broadcastable to `[B, H, Sq, Sk]`, True = attend; masked logits get the
        dtype's lowest value (as transformers does), so a fully masked row stays finite.
    """
    if k.shape[2] != q.shape[2]:
        k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)
        v = jnp.repeat(v, q.shape[2] // v.shape[2], axis=2)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32)).astype(q.dtype)


def padding_mask(attention_mask: jax.Array | None) -> jax.Array | None:
    """`[B, S]` 0/1 mask -> bool `[B, 1, 1, S]` over keys (None stays None)."""
    if attention_mask is None:
        return None
    return attention_mask.astype(bool)[:, None, None, :]


def scanned(block_cls, length: int, name: str | None, **kwargs):
    """`length` copies of `block_cls` as one `nn.scan`: params stacked on a leading `layers` axis.

    The block's `__call__(carry, *broadcast)` returns `(carry, per_layer_output)`.
    """
    stack = nn.scan(
        block_cls,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=nn.broadcast,
        length=length,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )
    return stack(name=name, **kwargs)
