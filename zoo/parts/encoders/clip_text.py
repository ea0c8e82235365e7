"""CLIP text tower (transformers `CLIPTextModel`): causal pre-norm transformer, final LayerNorm, pooled
token. HunyuanVideo 1.0 feeds the pooled output (`pooler_output`) of CLIP-L to its DiT.

Pooling follows the config's `eos_token_id` as transformers does: the legacy value 2 (what
openai/clip-vit-large-patch14 ships) means "the position of the largest token id" (the end token has
the largest id in CLIP's vocabulary); any other value means the first position holding that id.
Parameter paths mirror transformers' module names under `text_model/` (`embeddings/token_embedding`,
`encoder/layers/self_attn/q_proj`, `final_layer_norm`), layers stacked on a leading axis.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.parts.configs import check_known
from vidax.zoo.parts.encoders.common import ENCODER_SHARDING_RULES, Embed, dense_attention, pick_fields, scanned
from vidax.zoo.parts.encoders.vision import VisionMLP
from vidax.zoo.compute.layers import Dense, LayerNorm

SHARDING_RULES = ENCODER_SHARDING_RULES
LEGACY_EOS = 2  # transformers CLIPTextTransformer: eos_token_id == 2 -> pool at argmax(input_ids)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CLIPTextConfig:
    """Follows transformers `CLIPTextConfig` field names (defaults: CLIP-L/14's text tower)."""

    vocab_size: int = 49408
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    max_position_embeddings: int = 77
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    eos_token_id: int = LEGACY_EOS

    IGNORED: ClassVar[Mapping[str, str]] = {
        "dropout": "training only: dropout", "attention_dropout": "training only: dropout",
        "initializer_factor": "training only: weight-init scale", "initializer_range": "training only: weight-init scale",
        "projection_dim": "the text projection, which the tower's pooled output does not go through",
        "gradient_checkpointing": "training only: activation checkpointing",
    }
    # a full `CLIPConfig`: everything beside its `text_config`
    OUTER_IGNORED: ClassVar[Mapping[str, str]] = {
        "vision_config": "the image tower: vidax runs the text tower only",
        "vision_config_dict": "transformers 4 duplicate of vision_config", "text_config_dict":
        "transformers 4 duplicate of text_config", "projection_dim": "the shared projection width (not run)",
        "logit_scale_init_value": "training only: the contrastive loss's temperature",
        "initializer_factor": "training only: weight-init scale",
    }

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "CLIPTextConfig":
        """From a transformers `CLIPTextConfig` dict (or a full `CLIPConfig`'s `text_config`)."""
        if "text_config" in hf:
            check_known(cls.__name__, hf, ("text_config",), cls.OUTER_IGNORED)
        return cls(**pick_fields(cls, hf.get("text_config", hf)))


class CLIPTextOutput(NamedTuple):
    last_hidden_state: jax.Array  # [B, S, D], after the final LayerNorm
    pooler_output: jax.Array  # [B, D]
    hidden_states: jax.Array  # [L+1, B, S, D]: embeddings, then every layer's output


class _Attention(nn.Module):
    """transformers `CLIPAttention` under the causal mask (and the padding mask, when given)."""

    config: CLIPTextConfig

    @nn.compact
    def __call__(self, x, mask):
        c = self.config
        heads = lambda t: t.reshape(*t.shape[:2], c.num_attention_heads, c.head_dim)  # noqa: E731  [B, S, H, D]
        q, k, v = (heads(Dense(c.hidden_size, axes=("embed", "heads"), name=n)(x)) for n in ("q_proj", "k_proj", "v_proj"))
        out = dense_attention(q, k, v, scale=c.head_dim**-0.5, mask=mask).reshape(x.shape)
        return Dense(c.hidden_size, axes=("heads", "embed"), name="out_proj")(out)


class _Layer(nn.Module):
    """transformers `CLIPEncoderLayer` (the vision tower's MLP is the same module)."""

    config: CLIPTextConfig

    @nn.compact
    def __call__(self, x, mask):
        eps = self.config.layer_norm_eps
        x = x + _Attention(self.config, name="self_attn")(LayerNorm(eps, name="layer_norm1")(x), mask)
        x = x + VisionMLP(self.config, name="mlp")(LayerNorm(eps, name="layer_norm2")(x))
        return x, x


class _TextTransformer(nn.Module):
    config: CLIPTextConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, attention_mask=None) -> CLIPTextOutput:
        c = self.config
        s = input_ids.shape[1]
        x = _Embeddings(c, name="embeddings")(input_ids).astype(self.dtype)
        mask = jnp.tril(jnp.ones((s, s), bool))[None, None]  # [1, 1, Sq, Sk]
        if attention_mask is not None:
            mask = mask & attention_mask.astype(bool)[:, None, None, :]
        last, per_layer = _Encoder(c, name="encoder")(x, mask)
        last = LayerNorm(c.layer_norm_eps, name="final_layer_norm")(last)
        if c.eos_token_id == LEGACY_EOS:
            index = jnp.argmax(input_ids, axis=-1)
        else:
            index = jnp.argmax((input_ids == c.eos_token_id).astype(jnp.int32), axis=-1)
        pooled = jnp.take_along_axis(last, index[:, None, None], axis=1)[:, 0]
        return CLIPTextOutput(last, pooled, jnp.concatenate([x[None], per_layer], axis=0))


class _Embeddings(nn.Module):
    """transformers `CLIPTextEmbeddings`: token plus learned absolute position embeddings."""

    config: CLIPTextConfig

    @nn.compact
    def __call__(self, input_ids):
        c = self.config
        tokens = Embed(c.vocab_size, c.hidden_size, name="token_embedding")(input_ids)
        positions = Embed(c.max_position_embeddings, c.hidden_size, axes=(None, "embed"), name="position_embedding")
        return tokens + positions(jnp.arange(input_ids.shape[1]))[None]


class _Encoder(nn.Module):
    config: CLIPTextConfig

    @nn.compact
    def __call__(self, x, mask):
        return scanned(_Layer, self.config.num_hidden_layers, "layers", config=self.config)(x, mask)


class CLIPTextModel(nn.Module):
    """The CLIP text tower.

    `__call__(input_ids [B, S], attention_mask [B, S] or None)` returns a `CLIPTextOutput`;
    HunyuanVideo's pipeline passes no attention mask (padding is after the end token, and attention
    is causal, so the pooled end token never sees it).

    Attributes:
      config: sizes, activation and the pooling rule (`eos_token_id`).
      dtype: compute dtype.
    """

    config: CLIPTextConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, attention_mask=None) -> CLIPTextOutput:
        return _TextTransformer(self.config, self.dtype, name="text_model")(input_ids, attention_mask)
