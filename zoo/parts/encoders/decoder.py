"""A Llama / Qwen2-style causal decoder used as a text tower (transformers `LlamaModel`, `Qwen2Model`,
`Qwen2_5_VLTextModel`), returning every hidden state.

The families differ by data: Qwen2 gives q/k/v a bias and o none, Llama biases all four or none
(`attention_bias`) and may bias its MLP. Text-only Qwen2.5-VL input has the same position on its
three M-RoPE axes, which makes M-RoPE the plain 1-D RoPE implemented here. Positions are
`0..S-1` whatever the padding, as in the references when `position_ids` is not given.

Parameter paths mirror the transformers module names (`layers/self_attn/q_proj`,
`layers/mlp/gate_proj`, `embed_tokens`, `norm`), layers stacked on a leading axis.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.configs import check_known
from vidax.zoo.parts.encoders.common import (
    ENCODER_SHARDING_RULES,
    Embed,
    TextOutput,
    activation,
    dense_attention,
    pick_fields,
    scanned,
)
from vidax.zoo.compute.layers import Dense, RMSNorm

SHARDING_RULES = ENCODER_SHARDING_RULES

# transformers rope types supported: the default frequencies (M-RoPE is them for text-only input)
# and Llama 3.1's wavelength-banded rescaling
_ROPE_TYPES = ("default", "mrope", "llama3")


_VISION = "the vision side of a vision-language model: vidax runs the text tower on text only"
_WINDOW = ("Qwen2 sliding-window attention: off in every released text tower (use_sliding_window false), "
           "and prompts are far shorter than the window")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecoderConfig:
    """Follows transformers `LlamaConfig` / `Qwen2Config` / `Qwen2_5_VLTextConfig` field names."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    hidden_act: str = "silu"
    # Llama 3.1 rope scaling: (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
    llama3_rope: tuple[float, float, float, int] | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False

    IGNORED: ClassVar[Mapping[str, str]] = {
        "attention_dropout": "training only: dropout", "initializer_range": "training only: weight-init scale",
        "pretraining_tp": "how Llama pretraining sliced its matmuls across devices: the same sums",
        "use_cache": "generation's key/value cache (vidax runs one forward pass)",
        "use_sliding_window": _WINDOW, "sliding_window": _WINDOW, "max_window_layers": _WINDOW,
        "layer_types": _WINDOW,
        "vision_config": _VISION, "image_token_id": _VISION, "video_token_id": _VISION,
        "vision_start_token_id": _VISION, "vision_end_token_id": _VISION, "vision_token_id": _VISION,
    }
    # what `_rope_settings` and `_bias_switches` read beside the fields
    READ: ClassVar[tuple[str, ...]] = ("rope_parameters", "rope_scaling", "max_position_embeddings", "model_type",
                                       "attention_bias", "mlp_bias")

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> DecoderConfig:
        """From a transformers config dict: Llama, Qwen2, Qwen2.5-VL (full or `text_config`)."""
        if "text_config" in hf:  # a full vision-language config: the rest is its vision side
            check_known(cls.__name__, hf, ("text_config",), cls.IGNORED)
        hf = dict(hf.get("text_config", hf))
        theta, llama3 = _rope_settings(hf)
        return cls(**{**pick_fields(cls, hf, read=cls.READ), "rope_theta": theta, "llama3_rope": llama3, **_bias_switches(hf)})

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


def _rope_settings(hf: Mapping[str, Any]) -> tuple[float, tuple[float, float, float, int] | None]:
    """(rope_theta, llama3 scaling) from transformers 5 `rope_parameters` or transformers 4 `rope_scaling`."""
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in _ROPE_TYPES:
        raise ValueError(
            f"decoder text tower: rope type {rope_type!r} is not supported (supported: {', '.join(_ROPE_TYPES)})")
    theta = float(rope.get("rope_theta", hf.get("rope_theta", DecoderConfig.rope_theta)))
    if rope_type != "llama3":
        return theta, None
    original = int(rope.get("original_max_position_embeddings", hf.get("max_position_embeddings")))
    return theta, (float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]), original)


def _bias_switches(hf: Mapping[str, Any]) -> dict[str, bool]:
    model_type = hf.get("model_type", "llama")
    if model_type.startswith("qwen2"):  # Qwen2 / Qwen2.5-VL: biased q/k/v only
        return dict(qkv_bias=True, o_bias=False, mlp_bias=False)
    if model_type == "llama":
        attention = bool(hf.get("attention_bias", False))
        return dict(qkv_bias=attention, o_bias=attention, mlp_bias=bool(hf.get("mlp_bias", False)))
    raise ValueError(f"decoder text tower: model_type {model_type!r} is not a Llama/Qwen2 config")


def inverse_frequencies(head_dim: int, theta: float, llama3=None) -> np.ndarray:
    """RoPE inverse frequencies `[head_dim / 2]`; with `llama3`, Llama 3.1's rescaling: long wavelengths
    divided by `factor`, short ones kept, the band between blended linearly in 1 / wavelength."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    if llama3 is None:
        return inv_freq
    factor, low, high, original = llama3
    wavelength = 2 * np.pi / inv_freq
    scaled = np.where(wavelength > original / low, inv_freq / factor, inv_freq)
    blend = (original / wavelength - low) / (high - low)
    smoothed = (1 - blend) * scaled / factor + blend * scaled
    medium = (wavelength >= original / high) & (wavelength <= original / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_tables(length: int, head_dim: int, theta: float, llama3=None) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin `[S, head_dim]` in transformers' half-split layout (`cat(freqs, freqs)`)."""
    inv_freq = inverse_frequencies(head_dim, theta, llama3)
    freqs = np.arange(length, dtype=np.float32)[:, None] * inv_freq[None]
    angles = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(angles), np.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """`x [B, S, H, D]` rotated as transformers' `apply_rotary_pos_emb` (rotate_half convention)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos[:, None] + rotated * sin[:, None]).astype(x.dtype)


class DecoderAttention(nn.Module):
    """transformers `LlamaAttention` / `Qwen2Attention` (grouped-query, causal)."""

    config: DecoderConfig

    @nn.compact
    def __call__(self, x, mask, cos, sin):
        c = self.config
        b, s, _ = x.shape
        d = c.dim_per_head
        q = Dense(c.num_attention_heads * d, ("embed", "heads"), c.qkv_bias, name="q_proj")(x).reshape(b, s, -1, d)
        k = Dense(c.kv_heads * d, ("embed", "heads"), c.qkv_bias, name="k_proj")(x).reshape(b, s, -1, d)
        v = Dense(c.kv_heads * d, ("embed", "heads"), c.qkv_bias, name="v_proj")(x).reshape(b, s, -1, d)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = dense_attention(q, k, v, scale=d**-0.5, mask=mask).reshape(b, s, -1)  # [B, S, H*D]
        return Dense(c.hidden_size, ("heads", "embed"), c.o_bias, name="o_proj")(out)


class DecoderMLP(nn.Module):
    """transformers `LlamaMLP`: down(act(gate(x)) * up(x))."""

    config: DecoderConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        gate = Dense(c.intermediate_size, ("embed", "mlp"), c.mlp_bias, name="gate_proj")(x)
        up = Dense(c.intermediate_size, ("embed", "mlp"), c.mlp_bias, name="up_proj")(x)
        hidden = activation(c.hidden_act, "decoder MLP")(gate) * up
        return Dense(c.hidden_size, ("mlp", "embed"), c.mlp_bias, name="down_proj")(hidden)


class DecoderLayer(nn.Module):
    config: DecoderConfig

    @nn.compact
    def __call__(self, x, mask, cos, sin):
        eps = self.config.rms_norm_eps
        x = x + DecoderAttention(self.config, name="self_attn")(RMSNorm(eps, name="input_layernorm")(x), mask, cos, sin)
        x = x + DecoderMLP(self.config, name="mlp")(RMSNorm(eps, name="post_attention_layernorm")(x))
        return x, x


class DecoderTextModel(nn.Module):
    """The decoder text tower.

    `__call__(input_ids [B, S], attention_mask [B, S] 0/1 or None, inputs_embeds=None)` returns a
    `TextOutput` whose `hidden_states[i]` is transformers' `hidden_states[i]` (HunyuanVideo-1.5 takes
    `[-3]`). Attention is causal and masks padded keys, left or right padding alike; rows of padded
    queries carry no meaning (as in the reference) and are for the caller to drop.

    `inputs_embeds` `[B, S, D]` replaces the token embeddings (transformers' `inputs_embeds`): a
    multimodal tower (`encoders.llava`) embeds the ids with `embed`, merges its image features, and
    runs the decoder on the result.

    Attributes:
      config: the decoder's sizes and bias switches.
      dtype: compute dtype.
    """

    config: DecoderConfig
    dtype: Any = jnp.float32

    def setup(self):
        c = self.config
        self.embed_tokens = Embed(c.vocab_size, c.hidden_size)
        self.layers = scanned(DecoderLayer, c.num_hidden_layers, None, config=c)
        self.norm = RMSNorm(c.rms_norm_eps)

    def embed(self, input_ids) -> jax.Array:
        """Token embeddings `[B, S, D]` in the compute dtype (transformers' `get_input_embeddings()(ids)`)."""
        return self.embed_tokens(input_ids).astype(self.dtype)

    def __call__(self, input_ids=None, attention_mask=None, inputs_embeds=None) -> TextOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("DecoderTextModel: give exactly one of input_ids and inputs_embeds")
        c = self.config
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds.astype(self.dtype)
        s = x.shape[1]
        mask = jnp.tril(jnp.ones((s, s), bool))[None, None]  # [1, 1, Sq, Sk]
        if attention_mask is not None:
            mask = mask & attention_mask.astype(bool)[:, None, None, :]
        cos, sin = (jnp.asarray(t) for t in rope_tables(s, c.dim_per_head, c.rope_theta, c.llama3_rope))
        last, per_layer = self.layers(x, mask, cos, sin)
        last = self.norm(last)
        return TextOutput(last, jnp.concatenate([x[None], per_layer[:-1], last[None]], axis=0))
