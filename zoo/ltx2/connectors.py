"""LTX-2 text connectors (follows diffusers `LTX2TextConnectors`): Gemma features -> video and audio
prompt embeddings for the DiT.

1. Feature normalisation of the stacked Gemma hidden states `[B, T, D * (L + 1)]` (see
   `vidax.zoo.ltx2.text.stack_hidden_states`): LTX-2.0 standardises each sample's layers by their
   masked mean and range (x8) and projects once (`text_proj_in`); LTX-2.3+ RMS-normalises each
   token's layers and projects per modality (`video_text_proj_in`, `audio_text_proj_in`, inputs
   rescaled by sqrt(width / caption_channels)).
2. One 1-D transformer per modality (`video_connector`, `audio_connector`): padding replaced by the
   learnable registers (valid tokens moved to the front, registers by absolute position behind
   them; then no mask at all), 1-D RoPE, pre-norm attention + feed-forward blocks, final RMS norm.
3. The returned prompt mask is all ones: diffusers binarises the connector's additive mask with
   `< 1e-6` (true for 0 and for -max), so the DiT's cross-attention sees every position (registers
   fill the padding in every release; without registers the padded rows stay unmasked, as there).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.compute.layers import Dense, FeedForward, RMSNorm, logical_param
from vidax.zoo.ltx2.config import ConnectorsConfig
from vidax.zoo.ltx2.rope import rope_table
from vidax.zoo.ltx2.transformer import LTX2Attention

NORM_SCALE = 8.0  # diffusers' `scale_factor` of the LTX-2.0 masked mean/range normalisation


def masked_mean_range_norm(features: jax.Array, mask: jax.Array, eps: float = 1e-6) -> jax.Array:
    """diffusers `per_layer_masked_mean_norm` (LTX-2.0): `[B, T, D, L]` -> `[B, T, D * L]`, padding zeroed."""
    b, t, d, _ = features.shape
    valid = mask.astype(bool)[:, :, None, None]  # [B, T, 1, 1]
    x = features.astype(jnp.float32)
    lengths = mask.astype(jnp.float32).sum(axis=1)  # [B]
    mean = jnp.where(valid, x, 0.0).sum(axis=(1, 2), keepdims=True) / ((lengths * d).reshape(b, 1, 1, 1) + eps)
    x_min = jnp.where(valid, x, jnp.inf).min(axis=(1, 2), keepdims=True)
    x_max = jnp.where(valid, x, -jnp.inf).max(axis=(1, 2), keepdims=True)
    normed = (x - mean) / (x_max - x_min + eps) * NORM_SCALE
    normed = normed.reshape(b, t, -1)
    return jnp.where(valid[..., 0], normed, 0.0).astype(features.dtype)


def per_token_rms_norm(features: jax.Array, mask: jax.Array, eps: float = 1e-6) -> jax.Array:
    """diffusers `per_token_rms_norm` + mask (LTX-2.3+): each token's layers RMS-normalised over D."""
    x = features.astype(jnp.float32)
    normed = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=2, keepdims=True) + eps)
    normed = normed.reshape(*x.shape[:2], -1)
    return jnp.where(mask.astype(bool)[..., None], normed, 0.0).astype(features.dtype)


def replace_padding_with_registers(x: jax.Array, mask: jax.Array, registers: jax.Array) -> jax.Array:
    """Valid tokens moved to the front in order; position `t >= valid count` gets `registers[t % R]`."""
    t = x.shape[1]
    valid = mask.astype(jnp.int32)
    order = jnp.argsort(1 - valid, axis=1, stable=True)  # valid first, original order kept
    front = jnp.take_along_axis(x, order[..., None], axis=1)
    tiled = jnp.tile(registers, (t // registers.shape[0], 1))  # [T, D]
    keep = jnp.arange(t)[None, :] < valid.sum(axis=1, keepdims=True)
    return jnp.where(keep[..., None], front, tiled[None].astype(x.dtype))


class ConnectorBlock(nn.Module):
    """diffusers `LTX2TransformerBlock1d`: pre-norm self-attention (1-D RoPE) and feed-forward."""

    dim: int
    heads: int
    head_dim: int
    gated: bool
    rope_type: str

    @nn.compact
    def __call__(self, x, mask, rope):
        norm = RMSNorm(1e-6, use_scale=False)
        attn = LTX2Attention(self.heads, self.head_dim, self.dim, self.gated, 1e-6, self.rope_type, name="attn1")
        x = x + attn(norm(x), mask=mask, q_rope=rope)
        return x + FeedForward(self.dim, 4 * self.dim, name="ff")(norm(x))


class Connector1d(nn.Module):
    """diffusers `LTX2ConnectorTransformer1d`."""

    cfg: ConnectorsConfig
    modality: str  # "video" | "audio"
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        cfg = self.cfg
        heads = getattr(cfg, f"{self.modality}_connector_num_attention_heads")
        head_dim = getattr(cfg, f"{self.modality}_connector_attention_head_dim")
        registers = getattr(cfg, f"{self.modality}_connector_num_learnable_registers")
        dim, t = heads * head_dim, x.shape[1]
        attend = mask.astype(bool)
        if registers is not None:
            if t % registers:
                raise ValueError(f"LTX-2 connectors: the prompt length {t} must be a multiple of the "
                                 f"{registers} learnable registers (the pipeline pads to 1024)")
            table = logical_param(self, "learnable_registers", (registers, dim), (None, "embed"))
            x = replace_padding_with_registers(x, mask, table.astype(x.dtype))
            attend = jnp.ones_like(attend)  # every position is a real token or a register now
        cos, sin = rope_table(np.arange(t, dtype=np.float32)[None], (cfg.connector_rope_base_seq_len,), dim,
                              theta=cfg.rope_theta,
                              double=cfg.rope_double_precision, rope_type=cfg.rope_type, heads=heads)
        rope = (jnp.asarray(cos), jnp.asarray(sin))
        gated = getattr(cfg, f"{self.modality}_gated_attn")
        for i in range(getattr(cfg, f"{self.modality}_connector_num_layers")):
            x = ConnectorBlock(dim, heads, head_dim, gated, cfg.rope_type, name=f"transformer_blocks_{i}")(
                x.astype(self.dtype), attend, rope)
        return RMSNorm(1e-6, use_scale=False)(x), attend


class TextConnectors(nn.Module):
    """diffusers `LTX2TextConnectors`.

    `__call__(features [B, T, caption_channels * text_proj_in_factor], mask [B, T])` returns
    `(video [B, T, video width], audio [B, T, audio width], mask [B, T] int32 of ones)` as diffusers' forward.
    """

    cfg: ConnectorsConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, features: jax.Array, mask: jax.Array):
        cfg = self.cfg
        b, t, width = features.shape
        if width != cfg.text_dim:
            raise ValueError(f"LTX-2 connectors: text features must be [B, T, {cfg.text_dim}] "
                             f"({cfg.caption_channels} x {cfg.text_proj_in_factor} stacked states), got {features.shape}")
        stacked = features.reshape(b, t, cfg.caption_channels, cfg.text_proj_in_factor)  # [B, T, D, L]
        proj = lambda out, name: Dense(out, axes=(None, "embed"), use_bias=cfg.proj_bias, name=name)  # noqa: E731
        if cfg.per_modality_projections:  # LTX-2.3+
            normed = per_token_rms_norm(stacked, mask).astype(self.dtype)
            scale = lambda out: math.sqrt(out / cfg.caption_channels)  # noqa: E731
            video = proj(cfg.video_hidden_dim, "video_text_proj_in")(normed * scale(cfg.video_hidden_dim))
            audio = proj(cfg.audio_hidden_dim, "audio_text_proj_in")(normed * scale(cfg.audio_hidden_dim))
        else:  # LTX-2.0
            video = audio = proj(cfg.caption_channels, "text_proj_in")(
                masked_mean_range_norm(stacked, mask).astype(self.dtype))
        video, _ = Connector1d(cfg, "video", self.dtype, name="video_connector")(video, mask)
        audio, _ = Connector1d(cfg, "audio", self.dtype, name="audio_connector")(audio, mask)
        # diffusers binarises the connector's *additive* mask with `< 1e-6`, which holds for 0 and for
        # -max alike: the mask it returns (and the DiT then uses) is all ones, registers or not
        return video, audio, jnp.ones(mask.shape, jnp.int32)
