"""LTX-Video 0.9.x diffusion transformer (follows diffusers `LTXVideoTransformer3DModel`).

Split per `vidax.zoo.parts.dit`: `embed` projects the packed latent tokens (`proj_in`), embeds the
timestep (AdaLN-single `time_embed`: one 6-way modulation shared by every block, per sample or per
token) and the T5 caption (`caption_projection`); `block` is one `LTXVideoTransformerBlock`
(RMS-normed AdaLN self-attention with 3D RoPE over the whole width, plain cross-attention to the
caption with its padding mask, AdaLN GELU feed-forward); `head` is the final LayerNorm modulated by
`scale_shift_table` and the timestep embedding, then `proj_out`. Tokens stay packed `[B, S, C]`
in and out: patching is the pipeline's (`latents.pack`).

Inputs, as the reference forward takes them: tokens `[B, S, in_channels]`, caption features
`[B, T, caption_channels]` with their mask `[B, T]`, timestep in 0..1000 `[B]` or per token
`[B, S]` (conditioning frames are denoised from a lower timestep: `LTXConditionPipeline`), and the
RoPE tables (`rope.rope_tables`, `[1 or B, S, inner_dim]`) built on the host from the positions.

Dtypes: `dtype` is the activations' (matmul inputs, attention), `residual_dtype` the hidden state
between blocks (fp32 by default). Norms, AdaLN modulation, the timestep embedding, RoPE, `proj_in`
and `proj_out` run in fp32.

Precision (where "highest" matters; the rest runs at the runtime's default matmul precision). A TPU's
default precision computes an fp32 matmul as one bf16 pass, ~2^-9 relative error per product: the
vidax paper's ~2-decimal agreement. Three places are set to "highest" here (`HIGH`), each a negligible
share of the FLOPs:
  1. `proj_in` and `proj_out` (128 <-> width, 0.1% of a 13B forward): the velocity leaves through
     `proj_out`, so its rounding is a floor on the output's error whatever the blocks do. Emulating
     bf16 passes per op group on a 4-block random-weight model (width 512, 320 tokens), the output's
     relative rms error is 3.4e-3 with every matmul at bf16, 3.3e-3 from proj_in/proj_out alone, and
     2.1e-4 with them (and 2.) at highest and all block matmuls, QK^T and PV at bf16
     (tests/ltx_video/references/precision_probe.py; trained weights put more of the output through the blocks,
     so expect less than that 15x there, never more error).
  2. The timestep path: `timestep_sinusoid` (t up to 1000) and `time_embed`'s three small matmuls set
     every block's six modulation vectors (5e-4 alone at bf16 in the same probe).
  3. RoPE: angles reach ±θ·π/2 ≈ 15708 rad; formed at anything below fp32 positions are noise. They are
     built on the host in fp32 with float64 trig (`rope.py`), never through a device matmul.
These run in fp32 (inputs and weights cast up) under any activation dtype. Block matmuls, QK^T and PV
stay at the default (alone in the probe: q/k/v/out and FFN ~1.5e-4 each, QK^T and PV ~2e-5).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vidax.zoo.compute.attention import attention
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.compute.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    MLPEmbedder,
    RMSNorm,
    gelu_tanh,
    logical_param,
    modulate,
    split_heads,
    timestep_sinusoid,
)
from vidax.zoo.ltx_video.config import TransformerConfig
from vidax.zoo.parts.rope import rotate_interleaved
from vidax.zoo.compute.runtime import Precision
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain

MOD_AXES = ("batch", "seq", "act_embed")  # per-token modulation follows its tokens
ROPE_AXES = ("batch", "seq", "act_heads")  # tables follow q/k: split by tokens (sp) and width (tp)
TIME_FREQ_DIM = 256  # PixArtAlphaCombinedTimestepSizeEmbeddings' Timesteps(256)
HIGH = "highest"  # the matmul precision of the ops the module docstring names


@struct.dataclass
class Context:
    """What every block needs besides the hidden state."""

    modulation: jax.Array  # [B, 1 or S, 6*D] fp32 AdaLN-single projection
    embedded_timestep: jax.Array  # [B, 1 or S, D] fp32 (the head's modulation)
    text: jax.Array  # [B, T, D] projected caption
    text_mask: jax.Array  # [B, T] bool
    rope_cos: jax.Array  # [1 or B, S, D] fp32
    rope_sin: jax.Array  # [1 or B, S, D] fp32
    skip: jax.Array | None = None  # [B, L] STG mask: 0 where block l's self-attention returns its values for row b


class _Emb(nn.Module):
    """diffusers `PixArtAlphaCombinedTimestepSizeEmbeddings` without size conditions: one `TimestepEmbedding`."""

    features: int

    @nn.compact
    def __call__(self, sinusoid: jax.Array) -> jax.Array:
        return MLPEmbedder(self.features, dtype=jnp.float32, name="timestep_embedder")(sinusoid)


class TimeEmbedding(nn.Module):
    """diffusers `AdaLayerNormSingle`: sinusoid(256) -> `emb` MLP -> SiLU -> `linear` (6·D), all fp32
    at the highest matmul precision (it modulates every block)."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, timestep: jax.Array) -> tuple[jax.Array, jax.Array]:
        d = self.cfg.inner_dim
        with jax.default_matmul_precision(HIGH):
            embedded = _Emb(d, name="emb")(timestep_sinusoid(timestep, TIME_FREQ_DIM))
            modulation = Dense(6 * d, axes=("embed", None), dtype=jnp.float32, name="linear")(nn.silu(embedded))
        return modulation, embedded


class Embedder(nn.Module):
    """Everything before the blocks; its params are `proj_in`, `time_embed` and `caption_projection`."""

    cfg: TransformerConfig
    dtype: Any = jnp.float32
    residual_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens, text, text_mask, timestep, *rope):
        """Takes `embed`'s inputs (the mask and RoPE tables pass through untouched)."""
        cfg = self.cfg
        b = tokens.shape[0]
        with jax.default_matmul_precision(HIGH):  # see the module docstring, "Precision"
            hidden = Dense(cfg.inner_dim, axes=(None, "embed"), dtype=jnp.float32, name="proj_in")(tokens)
        modulation, embedded = TimeEmbedding(cfg, name="time_embed")(timestep.reshape(-1))
        text = MLPEmbedder(cfg.inner_dim, activation=gelu_tanh, name="caption_projection")(text.astype(self.dtype))
        modulation = modulation.reshape(b, -1, 6 * cfg.inner_dim)  # [B, 1 or S, 6D], as diffusers' view
        embedded = embedded.reshape(b, -1, cfg.inner_dim)
        hidden = constrain(hidden.astype(self.residual_dtype), VIDEO_AXES)
        return hidden, modulation, embedded, constrain(text, TEXT_AXES)


# ---------------------------------------------------------------------------------------------
# The block


class LTXAttention(nn.Module):
    """diffusers `LTXAttention` + `LTXVideoAttnProcessor`: q/k RMS-normed across all heads (eps 1e-5,
    learned scale); self-attention rotates q/k over the whole width before the split into heads."""

    cfg: TransformerConfig
    cross: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, ctx: Context, keep: jax.Array | None = None) -> jax.Array:
        """`keep` `[B]` (self-attention, STG "attention_values"): rows with 0 take the value projection
        in place of the attention output (the official `SkipLayerStrategy.AttentionValues`)."""
        cfg = self.cfg
        heads, dim = cfg.num_attention_heads, cfg.inner_dim
        dense = lambda name: Dense(dim, axes=("embed", "heads"), name=name)  # noqa: E731
        norm = lambda name: RMSNorm(eps=1e-5, axis_name="heads", name=name)  # noqa: E731
        source = ctx.text if self.cross else x
        q = norm("norm_q")(dense("to_q")(x))
        k = norm("norm_k")(dense("to_k")(source))
        v = dense("to_v")(source)
        if not self.cross:  # [B, S, D] viewed as one head of width D: the tables span the width
            q = rotate_interleaved(q[:, :, None], ctx.rope_cos, ctx.rope_sin)[:, :, 0]
            k = rotate_interleaved(k[:, :, None], ctx.rope_cos, ctx.rope_sin)[:, :, 0]
        mask = ctx.text_mask if self.cross else None
        out = attention(split_heads(q, heads), split_heads(k, heads), split_heads(v, heads), kv_mask=mask)
        out = out.reshape(*x.shape[:-1], dim)
        if keep is not None:
            keep = keep.astype(out.dtype)[:, None, None]
            out = out * keep + v.astype(out.dtype) * (1 - keep)
        return Dense(dim, axes=("heads", "embed"), name="to_out_0")(out)


class LTXBlock(nn.Module):
    """diffusers `LTXVideoTransformerBlock`; the hidden state stays in `residual_dtype`."""

    cfg: TransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: jax.Array | tuple[jax.Array, jax.Array], ctx: Context):
        """The hidden state, or with STG (`ctx.skip`) `(hidden, block index)`: the block reads its row of
        the skip mask by the index it is handed and passes the index on, so scanned and streamed runs
        (any chunking) see the right block."""
        if ctx.skip is not None:
            hidden, layer = hidden
            keep = jax.lax.dynamic_index_in_dim(ctx.skip, layer, axis=1, keepdims=False)  # [B]
            return self._run(hidden, ctx, keep), layer + 1
        return self._run(hidden, ctx, None)

    def _run(self, hidden: jax.Array, ctx: Context, keep: jax.Array | None) -> jax.Array:
        cfg = self.cfg
        d = cfg.inner_dim
        table = logical_param(self, "scale_shift_table", (6, d), (None, "embed"))
        b, t = ctx.modulation.shape[:2]
        mod = table.astype(jnp.float32) + ctx.modulation.reshape(b, t, 6, d)  # [B, 1 or S, 6, D]
        shift, scale, gate, c_shift, c_scale, c_gate = (mod[:, :, i] for i in range(6))
        plain_norm = RMSNorm(eps=cfg.norm_eps, use_scale=False)
        residual = hidden.astype(jnp.float32)

        # 1. Self-attention on the RMS-normed, AdaLN-modulated stream.
        x = modulate(plain_norm(residual), shift, scale).astype(self.dtype)
        residual = residual + LTXAttention(cfg, name="attn1")(x, ctx, keep).astype(jnp.float32) * gate

        # 2. Cross-attention to the caption, on the un-normed stream (the reference has no norm here).
        residual = residual + LTXAttention(cfg, cross=True, name="attn2")(residual.astype(self.dtype), ctx).astype(
            jnp.float32
        )

        # 3. Feed-forward on the RMS-normed, AdaLN-modulated stream.
        x = modulate(plain_norm(residual), c_shift, c_scale).astype(self.dtype)
        residual = residual + FeedForward(d, cfg.ffn_dim, name="ff")(x).astype(jnp.float32) * c_gate
        return constrain(residual.astype(hidden.dtype), VIDEO_AXES)


class Head(nn.Module):
    """Final LayerNorm modulated by `scale_shift_table` + the embedded timestep, then `proj_out`."""

    cfg: TransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: jax.Array, embedded_timestep: jax.Array) -> jax.Array:
        cfg = self.cfg
        table = logical_param(self, "scale_shift_table", (2, cfg.inner_dim), (None, "embed"))
        mod = table.astype(jnp.float32) + embedded_timestep[:, :, None]  # [B, 1 or S, 2, D]
        norm = LayerNorm(eps=1e-6, use_scale=False, use_bias=False)(hidden.astype(jnp.float32))
        x = modulate(norm, mod[:, :, 0], mod[:, :, 1])  # fp32 into proj_out, whatever the activation dtype
        with jax.default_matmul_precision(HIGH):  # see the module docstring, "Precision"
            return Dense(cfg.out_channels, axes=("embed", None), dtype=jnp.float32, name="proj_out")(x)


# ---------------------------------------------------------------------------------------------
# The model


def first_block_modulated(cfg: TransformerConfig, first: Params, hidden: jax.Array, ctx: Context) -> jax.Array:
    """Block 0's self-attention input before its attention: RMS-normed `hidden` under the block's
    shift and scale (what the TeaCache reference compares between steps)."""
    b, t = ctx.modulation.shape[:2]
    mod = first["scale_shift_table"].astype(jnp.float32) + ctx.modulation.reshape(b, t, 6, cfg.inner_dim)
    normed = RMSNorm(eps=cfg.norm_eps, use_scale=False).apply({}, hidden.astype(jnp.float32))
    return modulate(normed, mod[:, :, 0], mod[:, :, 1])


class LTXVideoTransformer(StackedTransformer):
    """The LTX-Video DiT in the `vidax.zoo.parts.dit.StackedDiT` shape.

    Args:
      cfg: `TransformerConfig.from_hf_config(config_json)` (or `from_official_config`).
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of the hidden state between blocks.
    """

    def __init__(self, cfg: TransformerConfig, dtype: Any = jnp.float32, residual_dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.embedder = Embedder(cfg, dtype, residual_dtype)
        self.block = LTXBlock(cfg, dtype)
        self.head_module = Head(cfg, dtype)

    embed_modules = ("proj_in", "time_embed", "caption_projection")
    head_modules = ("scale_shift_table", "proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input): block 0's normed, modulated input
    modulated_inputs = {
        "modulated": lambda model, first, hidden, ctx: first_block_modulated(model.cfg, first, hidden, ctx)}

    @classmethod
    def with_precision(cls, cfg: TransformerConfig, precision: Precision) -> "LTXVideoTransformer":
        """The model under a runtime `Precision` (its activations and residual dtypes)."""
        return cls(cfg, dtype=precision.activations, residual_dtype=precision.residual)

    def embed(self, params: Params, tokens, text, text_mask, timestep, rope_cos, rope_sin, skip=None
              ) -> tuple[Any, Context]:
        """Hidden state and context from the diffusers forward's inputs.

        Args:
          params: the full parameter tree (only the embedders are read).
          tokens: packed latents `[B, S, in_channels]` (`latents.pack`).
          text: T5 features `[B, T, caption_channels]`.
          text_mask: `[B, T]`, nonzero for real caption tokens.
          timestep: `[B]` (or `[B, 1]`), or per token `[B, S]`, in the 0..1000 scale (σ · 1000).
          rope_cos, rope_sin: `rope.rope_tables(...)`, `[1 or B, S, inner_dim]` fp32.
          skip: None, or the spatio-temporal guidance mask `[B, num_layers]` (0: that block's
            self-attention returns its values for that row); the hidden state is then `(hidden, index)`.
        """
        self._check_inputs(tokens, text, text_mask, timestep, rope_cos, rope_sin)
        if skip is not None and tuple(skip.shape) != (tokens.shape[0], self.cfg.num_layers):
            raise ValueError(f"skip mask must be [{tokens.shape[0]}, {self.cfg.num_layers}], got {tuple(skip.shape)}")
        sub = self.subtree(params, self.embed_modules)
        hidden, modulation, embedded, text = self.embedder.apply({"params": sub}, tokens, text, text_mask, timestep)
        modulation = constrain(modulation, MOD_AXES)
        rope_cos = constrain(jnp.asarray(rope_cos, jnp.float32), ROPE_AXES)
        rope_sin = constrain(jnp.asarray(rope_sin, jnp.float32), ROPE_AXES)
        ctx = Context(modulation, embedded, text, jnp.asarray(text_mask).astype(bool), rope_cos, rope_sin,
                      None if skip is None else jnp.asarray(skip, jnp.float32))
        return (hidden, jnp.int32(0)) if skip is not None else hidden, ctx

    def _check_inputs(self, tokens, text, text_mask, timestep, rope_cos, rope_sin) -> None:
        """One clear error for inputs the reference would reject or silently misread."""
        cfg = self.cfg
        if tokens.ndim != 3 or tokens.shape[-1] != cfg.in_channels:
            raise ValueError(f"LTX transformer takes packed tokens [B, S, {cfg.in_channels}], got {tokens.shape}")
        b, s = tokens.shape[:2]
        if text.ndim != 3 or text.shape[0] != b or text.shape[-1] != cfg.caption_channels:
            raise ValueError(f"caption features must be [{b}, T, {cfg.caption_channels}], got {text.shape}")
        if tuple(text_mask.shape) != tuple(text.shape[:2]):
            raise ValueError(f"caption mask must be {tuple(text.shape[:2])}, got {tuple(text_mask.shape)}")
        if tuple(timestep.shape) not in ((b,), (b, 1), (b, s)):
            raise ValueError(f"timestep must be [{b}] or per token [{b}, {s}], got {tuple(timestep.shape)}")
        for name, table in (("rope_cos", rope_cos), ("rope_sin", rope_sin)):
            if table.ndim != 3 or table.shape[0] not in (1, b) or tuple(table.shape[1:]) != (s, cfg.inner_dim):
                raise ValueError(f"{name} must be [1 or {b}, {s}, {cfg.inner_dim}] (rope.rope_tables), "
                                 f"got {tuple(table.shape)}")

    def head(self, params: Params, hidden: jax.Array, ctx: Context) -> jax.Array:
        """Final modulation and projection: velocity tokens `[B, S, out_channels]`."""
        sub = self.subtree(params, self.head_modules)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden  # STG carries the block index
        out = self.head_module.apply({"params": sub}, hidden, ctx.embedded_timestep)
        return constrain(out, ("batch", None, None))  # sequence parallel gathers here

    def head_inputs(self, hidden: jax.Array, ctx: Context) -> tuple:
        return hidden, ctx.embedded_timestep

    def dummy_inputs(self, batch: int = 1):
        """Smallest valid inputs (one token, one caption token) for `init` / `eval_shape`."""
        cfg = self.cfg
        f32 = jnp.float32
        table = np.zeros((1, 1, cfg.inner_dim), np.float32)
        return (
            jnp.zeros((batch, 1, cfg.in_channels), f32),
            jnp.zeros((batch, 1, cfg.caption_channels), f32),
            jnp.ones((batch, 1), f32),
            jnp.zeros((batch,), f32),
            table,
            table,
        )
