"""The ViT image tower shared by CLIP and SigLIP (transformers `CLIPVisionModel`, `SiglipVisionModel`).

What differs is data in `VisionConfig`: CLIP prepends a class token and normalises before the
encoder (`pre_layrnorm`); SigLIP has neither, gives its patch convolution a bias and ends with a
multihead-attention pooling head. Attention is `vidax.zoo.compute.attention.attention` (no mask).
Parameter paths mirror transformers 5 module names (`embeddings/patch_embedding`,
`encoder/layers/self_attn/q_proj`, ...), layers stacked on a leading axis.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.compute.attention import attention
from vidax.zoo.parts.encoders.common import Embed, activation, scanned
from vidax.zoo.compute.layers import Dense, LayerNorm, logical_param


@dataclasses.dataclass(frozen=True, kw_only=True)
class VisionConfig:
    """ViT sizes (transformers `CLIPVisionConfig` / `SiglipVisionConfig` field names) plus the family switches."""

    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_channels: int = 3
    image_size: int = 224
    patch_size: int = 16
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    class_token: bool = True  # CLIP: a learned class embedding leads the sequence
    pre_norm: bool = True  # CLIP: `pre_layrnorm` before the encoder
    patch_bias: bool = False  # SigLIP's patch convolution has a bias
    post_norm_tokens: bool = False  # SigLIP: `last_hidden_state` is post-normed (CLIP: only the pooled token)
    pooling_head: bool = False  # SigLIP `vision_use_head`
    projection_dim: int | None = None  # CLIP `visual_projection`

    IGNORED: ClassVar[Mapping[str, str]] = {
        "dropout": "training only: dropout", "attention_dropout": "training only: dropout",
        "initializer_factor": "training only: weight-init scale", "initializer_range": "training only: weight-init scale",
        "gradient_checkpointing": "training only: activation checkpointing",
        "vocab_size": "a vision tower has no vocabulary (transformers' default Llava vision_config carries one)",
    }

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_positions(self) -> int:
        return self.num_patches + int(self.class_token)


class VisionOutput(NamedTuple):
    last_hidden_state: jax.Array  # [B, N, D]
    hidden_states: jax.Array  # [L+1, B, N, D]: embeddings, then every layer's output (transformers' tuple)
    pooled: jax.Array | None  # [B, D]: CLIP post-normed class token, SigLIP pooling head
    image_embeds: jax.Array | None  # [B, projection_dim]: CLIP only


class VisionEmbeddings(nn.Module):
    """transformers `CLIPVisionEmbeddings` / `SiglipVisionEmbeddings` (no position interpolation)."""

    config: VisionConfig

    @nn.compact
    def __call__(self, pixel_values):
        c = self.config
        b, ch, h, w = pixel_values.shape
        p = c.patch_size
        if (h, w) != (c.image_size, c.image_size):
            raise ValueError(f"vision encoder: expected {c.image_size}x{c.image_size} images, got {h}x{w}")
        gh, gw = h // p, w // p  # a stride-p convolution drops the remainder (SigLIP: 384 px -> 27 x 27)
        patches = pixel_values[:, :, :gh * p, :gw * p].reshape(b, ch, gh, p, gw, p)
        patches = patches.transpose(0, 2, 4, 3, 5, 1).reshape(b, gh * gw, p * p * ch)  # [B, N, p*p*C]
        conv = _PatchConv(c, name="patch_embedding")
        x = conv(patches)  # [B, N, D]
        if c.class_token:
            cls = logical_param(self, "class_embedding", (c.hidden_size,), ("embed",))
            x = jnp.concatenate([jnp.broadcast_to(cls.astype(x.dtype), (b, 1, c.hidden_size)), x], axis=1)
        positions = Embed(c.num_positions, c.hidden_size, axes=(None, "embed"), name="position_embedding")
        return x + positions(jnp.arange(c.num_positions)).astype(x.dtype)[None]


class _PatchConv(nn.Module):
    """A stride-p, size-p convolution as a matmul over flattened patches; kernel `[p, p, C, D]`."""

    config: VisionConfig

    @nn.compact
    def __call__(self, patches):
        c = self.config
        shape = (c.patch_size, c.patch_size, c.num_channels, c.hidden_size)
        kernel = logical_param(self, "kernel", shape, (None, None, "conv_in", "embed"))
        y = patches @ kernel.reshape(-1, c.hidden_size).astype(patches.dtype)
        if c.patch_bias:
            y = y + logical_param(self, "bias", (c.hidden_size,), ("embed",), nn.initializers.zeros).astype(y.dtype)
        return y


class VisionAttention(nn.Module):
    """transformers `CLIPAttention` / `SiglipAttention`: biased q/k/v/out projections."""

    config: VisionConfig

    @nn.compact
    def __call__(self, x, context=None):
        c = self.config
        context = x if context is None else context
        heads = lambda t: t.reshape(*t.shape[:2], c.num_attention_heads, c.head_dim)  # noqa: E731  [B, S, H, D]
        q = heads(Dense(c.hidden_size, axes=("embed", "heads"), name="q_proj")(x))
        k = heads(Dense(c.hidden_size, axes=("embed", "heads"), name="k_proj")(context))
        v = heads(Dense(c.hidden_size, axes=("embed", "heads"), name="v_proj")(context))
        out = attention(q, k, v, scale=c.head_dim**-0.5).reshape(*x.shape[:2], c.hidden_size)
        return Dense(c.hidden_size, axes=("heads", "embed"), name="out_proj")(out)


class VisionMLP(nn.Module):
    config: VisionConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        h = activation(c.hidden_act, "vision MLP")(Dense(c.intermediate_size, axes=("embed", "mlp"), name="fc1")(x))
        return Dense(c.hidden_size, axes=("mlp", "embed"), name="fc2")(h)


class VisionLayer(nn.Module):
    """transformers `CLIPEncoderLayer` / `SiglipEncoderLayer` (pre-norm residual blocks)."""

    config: VisionConfig

    @nn.compact
    def __call__(self, x):
        eps = self.config.layer_norm_eps
        x = x + VisionAttention(self.config, name="self_attn")(LayerNorm(eps, name="layer_norm1")(x))
        x = x + VisionMLP(self.config, name="mlp")(LayerNorm(eps, name="layer_norm2")(x))
        return x, x


class PoolingHead(nn.Module):
    """transformers `SiglipMultiheadAttentionPoolingHead`: a learned probe attends over the tokens."""

    config: VisionConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        probe = logical_param(self, "probe", (1, 1, c.hidden_size), (None, None, "embed"))
        probe = jnp.broadcast_to(probe.astype(x.dtype), (x.shape[0], 1, c.hidden_size))
        h = VisionAttention(c, name="attention")(probe, x)
        h = h + VisionMLP(c, name="mlp")(LayerNorm(c.layer_norm_eps, name="layernorm")(h))
        return h[:, 0]


class VisionEncoder(nn.Module):
    config: VisionConfig

    @nn.compact
    def __call__(self, x):
        return scanned(VisionLayer, self.config.num_hidden_layers, "layers", config=self.config)(x)


class VisionTransformer(nn.Module):
    """Embeddings, optional pre-norm, the layer stack and the post-norm (transformers `CLIPVisionModel`)."""

    config: VisionConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, pixel_values) -> VisionOutput:
        c = self.config
        x = VisionEmbeddings(c, name="embeddings")(pixel_values.astype(self.dtype))
        if c.pre_norm:
            x = LayerNorm(c.layer_norm_eps, name="pre_layrnorm")(x)
        last, per_layer = VisionEncoder(c, name="encoder")(x)
        hidden_states = jnp.concatenate([x[None], per_layer], axis=0)
        post_norm = LayerNorm(c.layer_norm_eps, name="post_layernorm")
        if c.post_norm_tokens:
            last = post_norm(last)
            pooled = PoolingHead(c, name="head")(last) if c.pooling_head else None
        else:
            pooled = post_norm(last[:, 0])
        return VisionOutput(last, hidden_states, pooled, None)
