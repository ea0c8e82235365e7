"""Wan2.1 / Wan2.2 diffusion transformer (follows diffusers `WanTransformer3DModel`).

Split per `vidax.zoo.parts.dit`: `embed` patchifies the latents and builds the timestep modulation, the
text (and CLIP image) context and the RoPE tables; `block` is one `WanTransformerBlock` (AdaLN
self-attention with 3D RoPE, cross-attention to text plus, for I2V, image tokens through added
k/v, AdaLN feed-forward); `head` is the final AdaLN, projection and unpatchify. Module names mirror
diffusers' so the spec `wan/transformer` stays short.

Dtypes: `dtype` is the activations' (matmul inputs, attention), `residual_dtype` the hidden state
carried between blocks (fp32 by default, as the official code keeps it: the 14B models at 720p go
hazy with a bf16 residual stream). Norms, AdaLN modulation and the time embedding run in fp32.
Timesteps are `[B]` (Wan2.1, Wan2.2 A14B) or per token `[B, seq]` (Wan2.2 TI2V-5B).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from vidax.zoo.compute.attention import attention, heads_major_choice
from vidax.zoo.compute.kernels.heads_major import (
    HeadsDense,
    HeadsOut,
    HeadsRMSNorm,
    attention_rows,
    by_rows,
    pad_tokens,
    rotate_interleaved as rotate_heads_major,
)
from vidax.zoo.compute.kernels.pallas_tpu import padded_lengths, tpu_attention_heads_major
from vidax.zoo.parts.block_split import context_field
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.compute.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    MLPEmbedder,
    PatchEmbed,
    RMSNorm,
    gelu_exact,
    gelu_tanh,
    logical_param,
    modulate,
    split_heads,
    timestep_sinusoid,
    unpatchify,
)
from vidax.zoo.compute.runtime import Precision
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain
from vidax.zoo.wan.config import WanTransformerConfig
from vidax.zoo.parts.rope import rotate_interleaved as apply_rope
from vidax.zoo.wan.rope import rope_tables

MOD_AXES = ("batch", "seq", None, "act_embed")  # per-token modulation follows its tokens


@struct.dataclass
class Context:
    """What every block needs besides the hidden state."""

    modulation: jax.Array  # [B, 1 or S, 6, D] fp32 time projection (per token for TI2V)
    temb: jax.Array  # [B, 1 or S, D] fp32 time embedding (the head's modulation)
    text: jax.Array  # [B, T, D]
    image: jax.Array | None  # [B, N, D] CLIP tokens (Wan2.1 I2V / FLF2V) or None
    rope_cos: jax.Array  # [S, head_dim]
    rope_sin: jax.Array  # [S, head_dim]
    grid: tuple[int, int, int] = struct.field(pytree_node=False, default=(0, 0, 0))  # post-patch (F, H, W)


class ImageEmbedding(nn.Module):
    """diffusers `WanImageEmbedding`: (FLF2V position table) -> LayerNorm -> GELU MLP -> LayerNorm."""

    cfg: WanTransformerConfig

    @nn.compact
    def __call__(self, image: jax.Array, dtype: Any) -> jax.Array:
        cfg = self.cfg
        if cfg.pos_embed_seq_len is not None:
            # the reference folds first- and last-frame tokens of consecutive batch rows together
            pos = logical_param(self, "pos_embed", (1, cfg.pos_embed_seq_len, cfg.image_dim), (None, None, None))
            image = image.reshape(-1, 2 * image.shape[1], image.shape[2]) + pos
        x = LayerNorm(eps=1e-5, name="norm1")(image.astype(jnp.float32))
        ff = FeedForward(cfg.inner_dim, cfg.image_dim, activation=gelu_exact, hidden_axis=None, name="ff")
        x = ff(x.astype(dtype))
        return LayerNorm(eps=1e-5, name="norm2")(x.astype(jnp.float32)).astype(dtype)


class ConditionEmbedder(nn.Module):
    """diffusers `WanTimeTextImageEmbedding`; the time path stays fp32 (official code)."""

    cfg: WanTransformerConfig

    @nn.compact
    def __call__(self, timestep, text, image, dtype):
        cfg = self.cfg
        time_embedder = MLPEmbedder(cfg.inner_dim, dtype=jnp.float32, name="time_embedder")
        temb = time_embedder(timestep_sinusoid(timestep, cfg.freq_dim))
        proj = Dense(6 * cfg.inner_dim, axes=("embed", None), dtype=jnp.float32, name="time_proj")(nn.silu(temb))
        text = MLPEmbedder(cfg.inner_dim, activation=gelu_tanh, name="text_embedder")(text.astype(dtype))
        if cfg.has_image:
            image = ImageEmbedding(cfg, name="image_embedder")(image, dtype)
        return temb, proj, text, image


class Embedder(nn.Module):
    """Everything before the blocks; its params are `patch_embedding` and `condition_embedder`."""

    cfg: WanTransformerConfig
    dtype: Any = jnp.float32
    residual_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, latents, timestep, text, image=None):
        cfg = self.cfg
        b = latents.shape[0]
        video = PatchEmbed(cfg.inner_dim, cfg.patch_size, name="patch_embedding")(latents.astype(self.dtype))
        temb, proj, text, image = ConditionEmbedder(cfg, name="condition_embedder")(timestep, text, image, self.dtype)
        temb = temb.reshape(b, -1, cfg.inner_dim)  # [B, 1 or S, D]
        proj = proj.reshape(b, -1, 6, cfg.inner_dim)  # [B, 1 or S, 6, D]
        if image is not None:
            image = constrain(image, TEXT_AXES)
        video = constrain(video.astype(self.residual_dtype), VIDEO_AXES)
        return video, temb, proj, constrain(text, TEXT_AXES), image


# ---------------------------------------------------------------------------------------------
# The block


class WanAttention(nn.Module):
    """diffusers `WanAttention` + `WanAttnProcessor`: q/k RMS-normed across all heads.

    Self-attention rotates q/k by the RoPE tables; cross-attention adds, for I2V, the attention of
    the same queries to the image tokens through `add_k_proj` / `add_v_proj` (diffusers sums the
    two before `to_out`).
    """

    cfg: WanTransformerConfig
    cross: bool = False
    dtype: Any = None  # with `modulation`: the activations' dtype the modulated input is cast to

    @nn.compact
    def __call__(self, x: jax.Array, ctx: Context, *modulation: jax.Array) -> jax.Array:
        """`x` `[B, S, D]` in the activations' dtype; or, with `modulation` = (shift, scale), the fp32
        residual, normed and modulated here (the block's AdaLN; a row at a time under `by_rows`)."""
        cfg = self.cfg
        heads, dim = cfg.num_attention_heads, cfg.inner_dim
        if modulation:
            plain_norm = LayerNorm(eps=cfg.eps, use_scale=False, use_bias=False)
            x = modulate(plain_norm(x), *modulation).astype(self.dtype)
        if not self.cross:
            choice = heads_major_choice(x.shape[0], x.shape[1], x.shape[1], heads, dim // heads, x.dtype)
            if choice is not None:
                return self._heads_major(x, ctx, *choice)
        dense = lambda name: Dense(dim, axes=("embed", "heads"), name=name)  # noqa: E731
        norm = lambda name: RMSNorm(eps=cfg.eps, axis_name="heads", name=name)  # noqa: E731
        source = ctx.text if self.cross else x
        q = split_heads(norm("norm_q")(dense("to_q")(x)), heads)
        k = split_heads(norm("norm_k")(dense("to_k")(source)), heads)
        v = split_heads(dense("to_v")(source), heads)
        if not self.cross:
            q, k = apply_rope(q, ctx.rope_cos, ctx.rope_sin), apply_rope(k, ctx.rope_cos, ctx.rope_sin)
        out = attention(q, k, v)
        if self.cross and cfg.has_image:
            k_img = split_heads(norm("norm_added_k")(dense("add_k_proj")(ctx.image)), heads)
            v_img = split_heads(dense("add_v_proj")(ctx.image), heads)
            out = out + attention(q, k_img, v_img)
        out = out.reshape(*x.shape[:-1], dim)
        return Dense(cfg.inner_dim, axes=("heads", "embed"), name="to_out_0")(out)

    def _heads_major(self, x: jax.Array, ctx: Context, choice, interpret: bool) -> jax.Array:
        """Self-attention with q/k/v projected straight into the TPU kernel's `[B, H, S_pad, Dh]` (one pad
        of `x`; `kernels/heads_major.py`), the same params as the `[B, S, H, D]` form."""
        cfg = self.cfg
        heads, dim, s = cfg.num_attention_heads, cfg.inner_dim, x.shape[1]
        sq, skv = padded_lengths(choice, s, s)
        n = max(sq, skv)
        x = pad_tokens(x, n)
        cos, sin = pad_tokens(ctx.rope_cos, n, axis=0), pad_tokens(ctx.rope_sin, n, axis=0)

        def project(name, norm, rows):
            y = HeadsDense(dim, heads, name=name)(x[:, :rows])
            if norm is None:
                return y
            y = HeadsRMSNorm(cfg.eps, axis_name="heads", name=norm)(y)
            return rotate_heads_major(y, cos[:rows], sin[:rows])

        q, k, v = project("to_q", "norm_q", sq), project("to_k", "norm_k", skv), project("to_v", None, skv)
        out = tpu_attention_heads_major(q, k, v, (dim // heads) ** -0.5, choice, s, s, interpret=interpret)
        return HeadsOut(cfg.inner_dim, name="to_out_0")(out[:, :, :s])


class WanBlock(nn.Module):
    """diffusers `WanTransformerBlock`; the hidden state stays in `residual_dtype`."""

    cfg: WanTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: jax.Array, ctx: Context) -> jax.Array:
        cfg = self.cfg
        table = logical_param(self, "scale_shift_table", (1, 6, cfg.inner_dim), (None, None, "embed"))
        mod = table.astype(jnp.float32)[None] + ctx.modulation  # [B, 1 or S, 6, D]
        shift, scale, gate, c_shift, c_scale, c_gate = (mod[:, :, i] for i in range(6))
        plain_norm = LayerNorm(eps=cfg.eps, use_scale=False, use_bias=False)
        residual = hidden.astype(jnp.float32)

        # 1. Self-attention on the AdaLN-modulated stream (one CFG row at a time where the batch's q/k/v would
        #    crowd the device: `kernels/heads_major.attention_rows`).
        attn = WanAttention(cfg, dtype=self.dtype, name="attn1")
        if attention_rows(*residual.shape, self.dtype):
            heads = cfg.num_attention_heads  # the kernel a row runs, prepared outside the scan over rows
            heads_major_choice(1, residual.shape[1], residual.shape[1], heads, cfg.inner_dim // heads, self.dtype)
            out = by_rows(attn, lambda m, r, sh, sc: m(r, ctx, sh, sc), (residual, shift, scale))
        else:
            out = attn(modulate(plain_norm(residual), shift, scale).astype(self.dtype), ctx)
        residual = residual + out.astype(jnp.float32) * gate

        # 2. Cross-attention to the text (and image) context.
        x = LayerNorm(eps=cfg.eps, name="norm2")(residual) if cfg.cross_attn_norm else residual
        residual = residual + WanAttention(cfg, cross=True, name="attn2")(x.astype(self.dtype), ctx).astype(jnp.float32)

        # 3. Feed-forward on the AdaLN-modulated stream.
        x = modulate(plain_norm(residual), c_shift, c_scale).astype(self.dtype)
        residual = FeedForward(cfg.inner_dim, cfg.ffn_dim, name="ffn")(x, residual=residual, gate=c_gate)
        return constrain(residual.astype(hidden.dtype), VIDEO_AXES)


class Head(nn.Module):
    """Final AdaLN from `scale_shift_table` and the time embedding, then `proj_out`."""

    cfg: WanTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: jax.Array, temb: jax.Array) -> jax.Array:
        cfg = self.cfg
        table = logical_param(self, "scale_shift_table", (1, 2, cfg.inner_dim), (None, None, "embed"))
        mod = table.astype(jnp.float32)[None] + temb[:, :, None]  # [B, 1 or S, 2, D]
        norm = LayerNorm(eps=cfg.eps, use_scale=False, use_bias=False)(hidden.astype(jnp.float32))
        x = modulate(norm, mod[:, :, 0], mod[:, :, 1]).astype(self.dtype)
        return Dense(math.prod(cfg.patch_size) * cfg.out_channels, axes=("embed", None), name="proj_out")(x)


# ---------------------------------------------------------------------------------------------
# The model


class WanTransformer(StackedTransformer):
    """The Wan DiT in the `vidax.zoo.parts.dit.StackedDiT` shape.

    Args:
      cfg: `WanTransformerConfig.from_hf_config(config_json)`.
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of the hidden state between blocks (fp32 keeps 720p clean).
    """

    def __init__(self, cfg: WanTransformerConfig, dtype: Any = jnp.float32, residual_dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.embedder = Embedder(cfg, dtype, residual_dtype)
        self.block = WanBlock(cfg, dtype)
        self.head_module = Head(cfg, dtype)

    embed_modules = ("patch_embedding", "condition_embedder")
    head_modules = ("scale_shift_table", "proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input): the reference's time embedding `e`
    # and, with use_ret_steps, the time projection `e0`
    modulated_inputs = {"e": context_field("temb"), "e0": context_field("modulation")}

    @classmethod
    def with_precision(cls, cfg: WanTransformerConfig, precision: Precision) -> "WanTransformer":
        """The model under a runtime `Precision` (its activations and residual dtypes)."""
        return cls(cfg, dtype=precision.activations, residual_dtype=precision.residual)

    def embed(self, params: Params, latents, timestep, text, image=None) -> tuple[jax.Array, Context]:
        """Tokens and context from the diffusers forward's inputs.

        Args:
          params: the full parameter tree (only the embedders are read).
          latents: `[B, in_channels, F, H, W]` (I2V: latents, condition latents and mask concatenated).
          timestep: `[B]`, or `[B, seq]` per post-patch token (Wan2.2 TI2V), in the 0..1000 scale.
          text: UMT5 features `[B, T, text_dim]` (T = 512 as the pipelines pad them).
          image: CLIP `hidden_states[-2]` `[B, 257, image_dim]` for Wan2.1 I2V / FLF2V, else None.
        """
        cfg = self.cfg
        grid = self._check_inputs(latents, timestep, text, image)
        sub = self.subtree(params, self.embed_modules)
        video, temb, proj, text, image = self.embedder.apply({"params": sub}, latents, timestep, text, image)
        cos, sin = rope_tables(cfg.rope_dims, grid)
        proj = constrain(proj, MOD_AXES)
        image = image if cfg.has_image else None
        return video, Context(proj, temb, text, image, jnp.asarray(cos), jnp.asarray(sin), grid)

    def _check_inputs(self, latents, timestep, text, image) -> tuple[int, int, int]:
        """The post-patch grid; one clear error for inputs the reference would reject or misread."""
        cfg = self.cfg
        if latents.ndim != 5 or latents.shape[1] != cfg.in_channels:
            raise ValueError(f"Wan transformer takes latents [B, {cfg.in_channels}, F, H, W], got {latents.shape}")
        if any(n % p for n, p in zip(latents.shape[2:], cfg.patch_size)):
            raise ValueError(f"latent size {latents.shape[2:]} is not a multiple of the patch size {cfg.patch_size}")
        grid = tuple(n // p for n, p in zip(latents.shape[2:], cfg.patch_size))
        if max(grid) > cfg.rope_max_seq_len:
            raise ValueError(f"latent grid {grid} exceeds the RoPE table length {cfg.rope_max_seq_len}")
        b, tokens = latents.shape[0], math.prod(grid)
        if timestep.shape not in ((b,), (b, tokens)):
            raise ValueError(f"timestep must be [{b}] or per token [{b}, {tokens}], got {timestep.shape}")
        if text.ndim != 3 or text.shape[-1] != cfg.text_dim:
            raise ValueError(f"text embeddings must be [B, T, {cfg.text_dim}], got {text.shape}")
        if cfg.has_image and image is None:
            raise ValueError("this Wan transformer has an image branch (I2V/FLF2V): pass the CLIP image embeddings")
        return grid

    def head(self, params: Params, hidden: jax.Array, ctx: Context) -> jax.Array:
        """Final AdaLN, projection and unpatchify to `[B, out_channels, F, H, W]` (fp32 kept as computed)."""
        cfg = self.cfg
        sub = self.subtree(params, self.head_modules)
        out = self.head_module.apply({"params": sub}, hidden, ctx.temb)
        out = constrain(out, ("batch", None, None))  # sequence parallel gathers here
        return unpatchify(out, ctx.grid, cfg.patch_size, cfg.out_channels)

    def head_inputs(self, hidden: jax.Array, ctx: Context) -> tuple:
        return hidden, ctx.temb

    def dummy_inputs(self, batch: int = 1):
        """Smallest valid inputs (one patch per axis) for `init` / `eval_shape`."""
        cfg = self.cfg
        f32 = jnp.float32
        pt, ph, pw = cfg.patch_size
        image = None
        if cfg.has_image:
            tokens = cfg.pos_embed_seq_len // 2 if cfg.pos_embed_seq_len else 1
            rows = 2 * batch if cfg.pos_embed_seq_len else batch  # FLF2V folds two rows into one
            image = jnp.zeros((rows, tokens, cfg.image_dim), f32)
        return (
            jnp.zeros((batch, cfg.in_channels, pt, ph, pw), f32),
            jnp.zeros((batch,), f32),
            jnp.zeros((batch, 1, cfg.text_dim), f32),
            image,
        )
