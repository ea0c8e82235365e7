"""Gemma 3 and Gemma 4 text towers (transformers `Gemma3TextModel` inside
`Gemma3ForConditionalGeneration`, and `Gemma4UnifiedTextModel` inside
`Gemma4UnifiedForConditionalGeneration`), returning every hidden state.

The two generations share the layout (sandwich RMS norms around attention and MLP, per-head q/k
norms, GeGLU MLP, embeddings scaled by sqrt(hidden), alternating sliding-window and full
attention with their own RoPE) and differ by data:

| | Gemma 3 | Gemma 4 |
|---|---|---|
| RMS norm weight | `1 + w` | `w` (and a parameter-free v norm) |
| attention scale | `query_pre_attn_scalar ** -0.5` | 1 |
| full-attention layers | same shapes, RoPE scaled linearly | own head size / kv heads, keys reused as values (`attention_k_eq_v`), partial ("proportional") RoPE |
| per layer | | a `layer_scalar` |

Because Gemma 4's sliding and full layers have different shapes, the layers are not stacked:
parameters are `layers_{i}/...` and the tower is an unrolled loop (it runs once per prompt).
Positions are `0..S-1` whatever the padding (as transformers without `position_ids`); attention is
causal over the valid (mask=1) keys, so left-padded prompts give the reference's values at every
valid position (padded rows carry no meaning and are for the caller to drop).
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, ClassVar, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.configs import check_known
from vidax.zoo.parts.encoders.common import ENCODER_SHARDING_RULES, Embed, TextOutput, activation, dense_attention
from vidax.zoo.compute.layers import Dense, logical_param

SHARDING_RULES = ENCODER_SHARDING_RULES
SLIDING, FULL = "sliding_attention", "full_attention"
_ROPE_TYPES = ("default", "linear", "proportional")


@dataclasses.dataclass(frozen=True)
class RopeSpec:
    theta: float
    kind: str = "default"  # default | linear | proportional
    factor: float = 1.0
    partial_rotary_factor: float = 1.0


_MULTIMODAL = "the image/audio side of the multimodal model: vidax runs the text tower on text only"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemmaConfig:
    """The text tower's sizes, from transformers' `Gemma3TextConfig` / `Gemma4UnifiedTextConfig` names."""

    generation: int  # 3 or 4
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    layer_types: tuple[str, ...]
    rope: tuple[tuple[str, RopeSpec], ...]  # per layer type
    sliding_window: int = 4096
    rms_norm_eps: float = 1e-6
    hidden_activation: str = "gelu_pytorch_tanh"
    query_pre_attn_scalar: float = 256.0
    attn_logit_softcapping: float | None = None
    # Gemma 4: per-layer head sizes / kv heads (full-attention layers differ), keys-as-values, KV
    # sharing, double-wide MLP; empty tuples mean `head_dim` / `num_key_value_heads` everywhere
    layer_head_dims: tuple[int, ...] = ()
    layer_kv_heads_: tuple[int, ...] = ()
    attention_k_eq_v: bool = False
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False

    # the text config's keys `from_hf_config`, `_per_layer_sizes` and `_rope_specs` read
    READ: ClassVar[tuple[str, ...]] = (
        "model_type", "use_bidirectional_attention", "num_hidden_layers", "layer_types", "sliding_window_pattern",
        "_sliding_window_pattern", "vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "head_dim", "sliding_window", "rms_norm_eps", "hidden_activation",
        "query_pre_attn_scalar", "attn_logit_softcapping", "attention_k_eq_v", "num_kv_shared_layers",
        "use_double_wide_mlp", "per_layer_config", "global_head_dim", "num_global_key_value_heads",
        "rope_parameters", "rope_scaling", "rope_local_base_freq", "rope_theta", "attention_bias",
        "hidden_size_per_layer_input", "vocab_size_per_layer_input", "enable_moe_block")
    IGNORED: ClassVar[Mapping[str, str]] = {
        "attention_dropout": "training only: dropout", "initializer_range": "training only: weight-init scale",
        "use_cache": "generation's key/value cache (vidax runs one forward pass)",
        "final_logit_softcapping": "the LM head's logit cap: vidax returns hidden states, not logits",
        "max_position_embeddings": "the longest trained sequence; RoPE has no table to outgrow",
        **{key: "Gemma 4's mixture-of-experts sizes: used only with enable_moe_block, which is refused"
           for key in ("num_experts", "top_k_experts", "moe_intermediate_size")},
    }
    OUTER_IGNORED: ClassVar[Mapping[str, str]] = {key: _MULTIMODAL for key in (
        "vision_config", "audio_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index",
        "image_token_index", "boi_token_id", "eoi_token_id", "image_token_id", "video_token_id", "audio_token_id",
        "boa_token_id", "eoa_token_index", "eoa_token_id")} | {"initializer_range": "training only: weight-init scale"}

    def __post_init__(self):
        if self.generation not in (3, 4):
            raise ValueError(f"Gemma text tower: generation {self.generation} is not supported (3 or 4)")
        if len(self.layer_types) != self.num_hidden_layers or set(self.layer_types) - {SLIDING, FULL}:
            raise ValueError(f"Gemma text tower: layer_types {self.layer_types} do not describe "
                             f"{self.num_hidden_layers} sliding/full layers")
        for kind, spec in self.rope:
            if spec.kind not in _ROPE_TYPES:
                raise ValueError(f"Gemma text tower: {kind} rope type {spec.kind!r} is not supported "
                                 f"(supported: {', '.join(_ROPE_TYPES)})")

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "GemmaConfig":
        """From a transformers config dict: the full multimodal model's (reads `text_config`) or the text one's."""
        if "text_config" in hf:
            check_known(cls.__name__, hf, ("text_config",), cls.OUTER_IGNORED)
        hf = dict(hf.get("text_config", hf))
        check_known(cls.__name__, hf, cls.READ, cls.IGNORED)
        if hf.get("attention_bias"):
            raise ValueError("Gemma text tower: attention_bias=True is not supported (Gemma projections have none)")
        if hf.get("enable_moe_block"):
            raise ValueError("Gemma text tower: mixture-of-experts blocks (enable_moe_block) are not supported")
        if hf.get("hidden_size_per_layer_input"):  # the size of the per-layer table it indexes: read only with it
            raise ValueError(f"Gemma text tower: per-layer inputs (hidden_size_per_layer_input "
                             f"{hf['hidden_size_per_layer_input']}) are not supported")
        model_type = hf.get("model_type", "")
        generation = 4 if model_type.startswith("gemma4") else 3 if model_type.startswith("gemma3") else None
        if generation is None:
            raise ValueError(f"Gemma text tower: model_type {model_type!r} is not a Gemma 3 / Gemma 4 text config")
        if hf.get("use_bidirectional_attention") in (True, "all"):
            raise ValueError("Gemma text tower: bidirectional text attention is not supported (LTX uses causal)")
        layers = int(hf["num_hidden_layers"])
        types = hf.get("layer_types") or [SLIDING if (i + 1) % int(hf.get("sliding_window_pattern", 6)) else FULL
                                          for i in range(layers)]
        if generation == 4:
            types = list(types[:-1]) + [FULL]  # transformers forces the last layer to full attention
        return cls(
            generation=generation, vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"], num_hidden_layers=layers,
            num_attention_heads=hf["num_attention_heads"], num_key_value_heads=hf["num_key_value_heads"],
            head_dim=hf.get("head_dim", 256), layer_types=tuple(types), rope=_rope_specs(hf, generation),
            sliding_window=hf.get("sliding_window") or 4096, rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            hidden_activation=hf.get("hidden_activation", "gelu_pytorch_tanh"),
            query_pre_attn_scalar=hf.get("query_pre_attn_scalar", 256),
            attn_logit_softcapping=hf.get("attn_logit_softcapping"),
            **_per_layer_sizes(hf, types, generation),
            attention_k_eq_v=bool(hf.get("attention_k_eq_v", False)),
            num_kv_shared_layers=int(hf.get("num_kv_shared_layers", 0) or 0),
            use_double_wide_mlp=bool(hf.get("use_double_wide_mlp", False)),
        )

    def rope_for(self, kind: str) -> RopeSpec:
        return dict(self.rope)[kind]

    def layer_head_dim(self, index: int) -> int:
        return self.layer_head_dims[index] if self.layer_head_dims else self.head_dim

    def layer_kv_heads(self, index: int) -> int:
        return self.layer_kv_heads_[index] if self.layer_kv_heads_ else self.num_key_value_heads

    def keys_as_values(self, kind: str) -> bool:
        return self.generation == 4 and self.attention_k_eq_v and kind == FULL

    @cached_property
    def kv_modes(self) -> tuple[str | None, ...]:
        """Per layer: None (own K/V), "store" (own K/V, later layers reuse them) or "reuse" (transformers'
        `kv_sharing_modes`)."""
        n, shared = self.num_hidden_layers, self.num_kv_shared_layers
        if self.generation != 4 or shared == 0:
            return (None,) * n
        first = n - shared
        modes = [None if i < first else "reuse" for i in range(n)]
        for kind in set(self.layer_types):
            last = max(i for i in range(first) if self.layer_types[i] == kind)
            modes[last] = "store"
        return tuple(modes)

    def mlp_width(self, index: int) -> int:
        double = self.generation == 4 and self.use_double_wide_mlp and self.kv_modes[index] == "reuse"
        return self.intermediate_size * (2 if double else 1)


def _per_layer_sizes(hf: Mapping[str, Any], types, generation: int) -> dict[str, tuple[int, ...]]:
    """Gemma 4's per-layer head size and kv heads: transformers' serialised `per_layer_config`, or
    what its config builds from `global_head_dim` / `num_global_key_value_heads` for full layers."""
    if generation != 4:
        return {}
    per_layer = {int(k): v for k, v in (hf.get("per_layer_config") or {}).items()}
    if not per_layer:
        override = {"head_dim": hf.get("global_head_dim", 512)}
        if hf.get("attention_k_eq_v") and hf.get("num_global_key_value_heads") is not None:
            override["num_key_value_heads"] = hf["num_global_key_value_heads"]
        per_layer = {i: override for i, kind in enumerate(types) if kind == FULL}
    head_dim, kv_heads = hf.get("head_dim", 256), hf["num_key_value_heads"]
    return dict(
        layer_head_dims=tuple(per_layer.get(i, {}).get("head_dim", head_dim) for i in range(len(types))),
        layer_kv_heads_=tuple(per_layer.get(i, {}).get("num_key_value_heads", kv_heads) for i in range(len(types))),
    )


def _rope_specs(hf: Mapping[str, Any], generation: int) -> tuple[tuple[str, RopeSpec], ...]:
    """Per-layer-type RoPE from transformers 5 `rope_parameters` (or transformers 4 Gemma 3 fields)."""
    params = hf.get("rope_parameters")
    if params is None and generation == 4:
        params = {SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
                  FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}
    if params is None:  # transformers 4 Gemma 3: rope_theta / rope_local_base_freq / rope_scaling
        scaling = hf.get("rope_scaling") or {}
        params = {SLIDING: {"rope_type": "default", "rope_theta": hf.get("rope_local_base_freq", 10_000.0)},
                  FULL: {"rope_type": scaling.get("rope_type", scaling.get("type", "default")),
                         "factor": scaling.get("factor", 1.0), "rope_theta": hf.get("rope_theta", 1_000_000.0)}}
    out = []
    for kind in (SLIDING, FULL):
        p = dict(params.get(kind) or {})
        out.append((kind, RopeSpec(float(p.get("rope_theta", 10_000.0)), p.get("rope_type", "default"),
                                   float(p.get("factor", 1.0)), float(p.get("partial_rotary_factor", 1.0)))))
    return tuple(out)


def inverse_frequencies(head_dim: int, spec: RopeSpec) -> np.ndarray:
    """`[head_dim / 2]` fp32, as transformers' default / linear / proportional RoPE initialisers."""
    if spec.kind == "proportional":
        angles = int(spec.partial_rotary_factor * head_dim // 2)
        rotated = 1.0 / (spec.theta ** (np.arange(0, 2 * angles, 2).astype(np.float32) / head_dim))
        inv = np.concatenate([rotated, np.zeros(head_dim // 2 - angles, np.float32)])
    else:
        inv = 1.0 / (spec.theta ** (np.arange(0, head_dim, 2).astype(np.float32) / head_dim))
    return (inv.astype(np.float32) / np.float32(spec.factor)).astype(np.float32)


def rope_tables(length: int, head_dim: int, spec: RopeSpec) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin `[S, head_dim]` in the half-split layout (`cat(freqs, freqs)`)."""
    freqs = np.arange(length, dtype=np.float32)[:, None] * inverse_frequencies(head_dim, spec)[None]
    angles = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(angles), np.sin(angles)


def _rotate(x, cos, sin):
    """`x [B, S, H, D]` rotated as transformers' `apply_rotary_pos_emb` (half split)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None] + rotated * sin[:, None]


class GemmaRMSNorm(nn.Module):
    """Gemma 3: `x * rsqrt(ms + eps) * (1 + w)`; Gemma 4: `x * (ms + eps) ** -0.5 * w` (or no `w`)."""

    eps: float
    generation: int
    use_scale: bool = True
    axis_name: str | None = "norm"

    @nn.compact
    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        if self.use_scale:
            init = nn.initializers.zeros if self.generation == 3 else nn.initializers.ones
            w = logical_param(self, "scale", (x.shape[-1],), (self.axis_name,), init).astype(jnp.float32)
            y = y * (1.0 + w if self.generation == 3 else w)
        return y.astype(x.dtype)


class GemmaAttention(nn.Module):
    """transformers `Gemma3Attention` / `Gemma4UnifiedTextAttention` (grouped-query, causal, per-head q/k norms)."""

    config: GemmaConfig
    index: int

    @nn.compact
    def __call__(self, x, mask, cos, sin, shared=None):
        c, kind = self.config, self.config.layer_types[self.index]
        b, s, _ = x.shape
        d, kv_heads = c.layer_head_dim(self.index), c.layer_kv_heads(self.index)
        norm = lambda name, scale=True: GemmaRMSNorm(c.rms_norm_eps, c.generation, scale, None, name=name)  # noqa: E731
        q = Dense(c.num_attention_heads * d, ("embed", "heads"), False, name="q_proj")(x).reshape(b, s, -1, d)
        q = _rotate(norm("q_norm")(q).astype(jnp.float32), cos, sin)
        if shared is None:  # this layer's own keys and values
            k_raw = Dense(kv_heads * d, ("embed", "heads"), False, name="k_proj")(x).reshape(b, s, -1, d)
            v = k_raw if c.keys_as_values(kind) else Dense(kv_heads * d, ("embed", "heads"), False, name="v_proj")(
                x).reshape(b, s, -1, d)
            k = _rotate(norm("k_norm")(k_raw).astype(jnp.float32), cos, sin)
            if c.generation == 4:
                v = norm("v_norm", scale=False)(v)
        else:
            k, v = shared
        scale = c.query_pre_attn_scalar ** -0.5 if c.generation == 3 else 1.0
        out = _softcapped_attention(q, k, v, scale, mask, c.attn_logit_softcapping)
        return Dense(c.hidden_size, ("heads", "embed"), False, name="o_proj")(out.reshape(b, s, -1)), (k, v)


def _softcapped_attention(q, k, v, scale, mask, softcap):
    if softcap is None:
        return dense_attention(q, k, v, scale=scale, mask=mask)
    # Gemma 2-style logit soft-capping (no Gemma 3/4 release sets it; kept for the config field)
    reps = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, reps, axis=2), jnp.repeat(v, reps, axis=2)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    logits = jnp.tanh(logits / softcap) * softcap
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v.astype(jnp.float32)).astype(q.dtype)


class GemmaMLP(nn.Module):
    config: GemmaConfig
    width: int

    @nn.compact
    def __call__(self, x):
        c = self.config
        gate = Dense(self.width, ("embed", "mlp"), False, name="gate_proj")(x)
        up = Dense(self.width, ("embed", "mlp"), False, name="up_proj")(x)
        return Dense(c.hidden_size, ("mlp", "embed"), False, name="down_proj")(
            activation(c.hidden_activation, "Gemma MLP")(gate) * up)


class GemmaLayer(nn.Module):
    """transformers `Gemma3DecoderLayer` / `Gemma4UnifiedTextDecoderLayer` (sandwich norms)."""

    config: GemmaConfig
    index: int

    @nn.compact
    def __call__(self, x, mask, cos, sin, shared=None):
        c = self.config
        norm = lambda name: GemmaRMSNorm(c.rms_norm_eps, c.generation, name=name)  # noqa: E731
        attn, kv = GemmaAttention(c, self.index, name="self_attn")(norm("input_layernorm")(x), mask, cos, sin, shared)
        x = x + norm("post_attention_layernorm")(attn.astype(x.dtype))
        mlp = GemmaMLP(c, c.mlp_width(self.index), name="mlp")(norm("pre_feedforward_layernorm")(x))
        x = x + norm("post_feedforward_layernorm")(mlp)
        if c.generation == 4:
            x = x * logical_param(self, "layer_scalar", (1,), (None,), nn.initializers.ones).astype(x.dtype)
        return x, kv


class GemmaTextModel(nn.Module):
    """The Gemma text tower.

    `__call__(input_ids [B, S], attention_mask [B, S] 0/1 or None)` returns a `TextOutput` whose
    `hidden_states[i]` is transformers' `hidden_states[i]`: the scaled embeddings, each layer's
    output, and the last layer's output after the final norm (`L + 1` entries).

    Attributes:
      config: `GemmaConfig.from_hf_config(config_json)`.
      dtype: compute dtype.
    """

    config: GemmaConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, attention_mask=None) -> TextOutput:
        c = self.config
        s = input_ids.shape[1]
        table = Embed(c.vocab_size, c.hidden_size, name="embed_tokens")
        # transformers multiplies by sqrt(hidden) cast to the weights' dtype
        x = table(input_ids).astype(self.dtype) * jnp.asarray(c.hidden_size ** 0.5, jnp.float32).astype(self.dtype)
        q_pos, k_pos = jnp.arange(s)[:, None], jnp.arange(s)[None, :]
        causal = k_pos <= q_pos
        masks = {FULL: causal, SLIDING: causal & (k_pos > q_pos - c.sliding_window)}
        masks = {kind: m[None, None] for kind, m in masks.items()}  # [1, 1, Sq, Sk]
        if attention_mask is not None:
            keys = attention_mask.astype(bool)[:, None, None, :]
            masks = {kind: m & keys for kind, m in masks.items()}
        tables = {}
        for i, kind in enumerate(c.layer_types):
            key = (kind, c.layer_head_dim(i))
            if key not in tables:
                tables[key] = tuple(jnp.asarray(t) for t in rope_tables(s, key[1], c.rope_for(kind)))
        states, stored = [x], {}
        for i, kind in enumerate(c.layer_types):
            mode = c.kv_modes[i]
            x, kv = GemmaLayer(c, i, name=f"layers_{i}")(x, masks[kind], *tables[(kind, c.layer_head_dim(i))],
                                                        stored.get(kind) if mode == "reuse" else None)
            if mode == "store":
                stored[kind] = kv
            states.append(x)
        last = GemmaRMSNorm(c.rms_norm_eps, c.generation, name="norm")(x)
        return TextOutput(last, jnp.stack(states[:-1] + [last], axis=0))
