"""The T5 encoder family: T5 v1.0/v1.1, ByT5 (transformers `T5EncoderModel`) and UMT5 (`UMT5EncoderModel`).

One implementation; the difference is data. T5 and ByT5 keep one relative-position bias table in
block 0 and share it across layers; UMT5 gives every layer its own table. Attention logits are not
scaled (T5 folds 1/√d into its init). Follows transformers `T5Stack` / `UMT5Stack`.

Parameter paths mirror the transformers module names (`encoder/block/layer_0/SelfAttention/q`),
blocks stacked on a leading layer axis. T5's single table lives at
`encoder/relative_attention_bias` (source: `encoder.block.0.layer.0.SelfAttention.relative_attention_bias`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.common import (
    ENCODER_SHARDING_RULES,
    Embed,
    TextOutput,
    activation,
    dense_attention,
    padding_mask,
    pick_fields,
    scanned,
)
from vidax.zoo.compute.layers import Dense, RMSNorm, logical_param

SHARDING_RULES = ENCODER_SHARDING_RULES


@dataclasses.dataclass(frozen=True, kw_only=True)
class T5Config:
    """Follows transformers `T5Config` / `UMT5Config` (encoder fields only)."""

    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    feed_forward_proj: str = "relu"  # "relu", "gated-gelu", "gated-silu", ...
    per_layer_position_bias: bool = False  # UMT5: every layer has its own bias table

    IGNORED: ClassVar[Mapping[str, str]] = {
        "dropout_rate": "training only: dropout", "classifier_dropout": "training only: dropout",
        "initializer_factor": "training only: weight-init scale",
        "gradient_checkpointing": "training only: activation checkpointing",
        "dense_act_fn": "derived by transformers from feed_forward_proj, which is read",
        "is_gated_act": "derived by transformers from feed_forward_proj, which is read",
        "num_decoder_layers": "the decoder stack: vidax runs the encoder only",
        "scale_decoder_outputs": "the decoder's LM-head scaling: vidax runs the encoder only",
        "use_cache": "the decoder's key/value cache: vidax runs the encoder only",
        "output_past": "transformers 3 name of use_cache (decoder only)",
        "n_positions": "nominal length of old T5 configs; relative position buckets have no table to outgrow",
    }

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> T5Config:
        """From a transformers T5 / UMT5 / ByT5 `config.json` dict (model_type picks the bias layout)."""
        model_type = hf.get("model_type", "t5")
        if model_type not in ("t5", "umt5", "mt5"):
            raise ValueError(f"T5 encoder: model_type {model_type!r} is not a T5-family config")
        return cls(**pick_fields(cls, hf, read=("model_type",)), per_layer_position_bias=model_type == "umt5")

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, tuple[int, ...]], feed_forward_proj: str = "gated-gelu") -> T5Config:
        """Sizes read off a converted tree's `{path: shape}` (the official Wan `.pth` ships no config.json).

        Args:
          shapes: the converted tree's leaf shapes.
          feed_forward_proj: not visible in shapes; Wan's UMT5 is "gated-gelu".
        """
        vocab_size, d_model = shapes["shared/embedding"]
        per_layer = "encoder/relative_attention_bias/embedding" not in shapes
        table = shapes["encoder/block/layer_0/SelfAttention/relative_attention_bias/embedding"][1:] if per_layer \
            else shapes["encoder/relative_attention_bias/embedding"]
        num_layers, _, inner = shapes["encoder/block/layer_0/SelfAttention/q/kernel"]
        ff_in = "wi_0" if feed_forward_proj.startswith("gated-") else "wi"
        return cls(vocab_size=vocab_size, d_model=d_model, d_kv=inner // table[1], num_heads=table[1],
                   d_ff=shapes[f"encoder/block/layer_1/DenseReluDense/{ff_in}/kernel"][-1], num_layers=num_layers,
                   relative_attention_num_buckets=table[0], feed_forward_proj=feed_forward_proj,
                   per_layer_position_bias=per_layer)

    @property
    def is_gated(self) -> bool:
        return self.feed_forward_proj.startswith("gated-")

    @property
    def act_name(self) -> str:
        # transformers maps "gated-gelu" to its tanh-approximate "gelu_new"
        name = self.feed_forward_proj.removeprefix("gated-")
        return "gelu_new" if name == "gelu" and self.is_gated else name

    @property
    def inner_dim(self) -> int:
        return self.num_heads * self.d_kv


def relative_position_buckets(length: int, num_buckets: int, max_distance: int) -> np.ndarray:
    """Bidirectional T5 buckets `[Sq, Sk]` of `key - query` (static: depends on the length only)."""
    relative = np.arange(length)[None, :] - np.arange(length)[:, None]
    half = num_buckets // 2
    buckets = (relative > 0).astype(np.int64) * half
    distance = np.abs(relative)
    max_exact = half // 2
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.maximum(distance, 1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (half - max_exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return (buckets + np.where(distance < max_exact, distance, large)).astype(np.int32)


class RelativeBias(nn.Module):
    """transformers' `relative_attention_bias` table `[buckets, H]`, looked up at `[Sq, Sk]` buckets."""

    num_buckets: int
    num_heads: int

    @nn.compact
    def __call__(self, buckets: jax.Array) -> jax.Array:
        table = logical_param(self, "embedding", (self.num_buckets, self.num_heads), (None, None))
        return jnp.take(table, buckets, axis=0).transpose(2, 0, 1)[None]  # [1, H, Sq, Sk]


class T5Attention(nn.Module):
    """transformers `T5Attention` (self-attention, encoder side)."""

    config: T5Config
    has_bias_table: bool

    @nn.compact
    def __call__(self, x, mask, buckets, shared_bias):
        c = self.config
        b, s, _ = x.shape
        q, k, v = (
            Dense(c.inner_dim, axes=("embed", "heads"), use_bias=False, name=n)(x).reshape(b, s, c.num_heads, c.d_kv)
            for n in ("q", "k", "v")
        )  # [B, S, H, D]
        bias = shared_bias
        if self.has_bias_table:
            bias = RelativeBias(c.relative_attention_num_buckets, c.num_heads, name="relative_attention_bias")(buckets)
        out = dense_attention(q, k, v, scale=1.0, bias=bias, mask=mask).reshape(b, s, c.inner_dim)
        return Dense(c.d_model, axes=("heads", "embed"), use_bias=False, name="o")(out)


class T5FeedForward(nn.Module):
    """transformers `T5DenseActDense` / `T5DenseGatedActDense` (`wi` or `wi_0`·`wi_1`, then `wo`)."""

    config: T5Config

    @nn.compact
    def __call__(self, x):
        c = self.config
        act = activation(c.act_name, "T5 feed-forward")
        if c.is_gated:
            h = act(Dense(c.d_ff, axes=("embed", "mlp"), use_bias=False, name="wi_0")(x))
            h = h * Dense(c.d_ff, axes=("embed", "mlp"), use_bias=False, name="wi_1")(x)
        else:
            h = act(Dense(c.d_ff, axes=("embed", "mlp"), use_bias=False, name="wi")(x))
        return Dense(c.d_model, axes=("mlp", "embed"), use_bias=False, name="wo")(h)


class T5SelfAttentionLayer(nn.Module):
    config: T5Config
    has_bias_table: bool

    @nn.compact
    def __call__(self, x, mask, buckets, shared_bias):
        h = RMSNorm(self.config.layer_norm_epsilon, name="layer_norm")(x)
        return x + T5Attention(self.config, self.has_bias_table, name="SelfAttention")(h, mask, buckets, shared_bias)


class T5FeedForwardLayer(nn.Module):
    config: T5Config

    @nn.compact
    def __call__(self, x):
        h = RMSNorm(self.config.layer_norm_epsilon, name="layer_norm")(x)
        return x + T5FeedForward(self.config, name="DenseReluDense")(h)


class T5Block(nn.Module):
    """transformers `T5Block` (encoder): `layer_0` self-attention, `layer_1` feed-forward."""

    config: T5Config

    @nn.compact
    def __call__(self, x, mask, buckets, shared_bias):
        x = T5SelfAttentionLayer(self.config, self.config.per_layer_position_bias, name="layer_0")(
            x, mask, buckets, shared_bias)
        x = T5FeedForwardLayer(self.config, name="layer_1")(x)
        return x, x


class T5Stack(nn.Module):
    config: T5Config

    @nn.compact
    def __call__(self, x, attention_mask):
        c = self.config
        buckets = jnp.asarray(relative_position_buckets(
            x.shape[1], c.relative_attention_num_buckets, c.relative_attention_max_distance))
        shared_bias = None
        if not c.per_layer_position_bias:
            table = RelativeBias(c.relative_attention_num_buckets, c.num_heads, name="relative_attention_bias")
            shared_bias = table(buckets)
        blocks = scanned(T5Block, c.num_layers, "block", config=c)
        last, per_layer = blocks(x, padding_mask(attention_mask), buckets, shared_bias)
        last = RMSNorm(c.layer_norm_epsilon, name="final_layer_norm")(last)
        return TextOutput(last, jnp.concatenate([x[None], per_layer[:-1], last[None]], axis=0))


class T5EncoderModel(nn.Module):
    """The T5 / UMT5 / ByT5 encoder.

    `__call__(input_ids [B, S] int, attention_mask [B, S] 0/1 or None)` returns a `TextOutput`
    (`last_hidden_state [B, S, d_model]`, `hidden_states [L+1, B, S, d_model]`); `hidden_states[i]`
    is transformers' `hidden_states[i]` (the embeddings, each block's output, and last the
    final-normed output). Padded keys are masked; padded queries still produce outputs, as in the
    reference.

    Attributes:
      config: the encoder's sizes.
      dtype: compute dtype (the pipelines that need it run T5 in fp32 and cast the output).
    """

    config: T5Config
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, attention_mask=None):
        x = Embed(self.config.vocab_size, self.config.d_model, name="shared")(input_ids).astype(self.dtype)
        return T5Stack(self.config, name="encoder")(x, attention_mask)
