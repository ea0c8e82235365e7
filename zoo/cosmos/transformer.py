"""Cosmos-Predict2.5 diffusion transformer (follows diffusers `CosmosTransformer3DModel` as
`Cosmos2_5_PredictBasePipeline` configures it).

Split per `vidax.zoo.parts.dit`: `embed` concatenates the conditioning-frame mask and the padding mask to
the latents, patchifies them, builds the timestep embeddings (sigma in [0, 1], one per latent
frame), projects the Reason1 text features (`crossattn_proj`) and the RoPE tables; `block` is one
`CosmosTransformerBlock` (AdaLN-LoRA self-attention with 3D RoPE, AdaLN-LoRA cross-attention to
the text, AdaLN-LoRA GELU feed-forward); `head` is the final AdaLN, projection and unpatchify.
Module names mirror diffusers' so the spec `cosmos/transformer` stays short.

AdaLN-LoRA: each of the block's three norms maps `silu(embedded_timestep)` through a rank-256
bottleneck (`linear_1`, `linear_2`) and adds the shared `temb` (the timestep MLP's 3*D output).
Both depend on the frame only, so they are computed per latent frame and broadcast to the frame's
tokens (diffusers computes them per token: same values, H*W times the work).

Dtypes: `dtype` is the activations' (matmul inputs, attention), `residual_dtype` the hidden state
between blocks (fp32 by default). Norms, modulation and the time embedding run in fp32.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from vidax.zoo.compute.attention import attention
from vidax.zoo.cosmos.config import CosmosTransformerConfig
from vidax.zoo.cosmos.rope import rope_tables
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.compute.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    RMSNorm,
    gelu_exact,
    logical_param,
    modulate,
    patchify,
    split_heads,
    timestep_sinusoid,
    unpatchify,
)
from vidax.zoo.parts.rope import rotate_half
from vidax.zoo.compute.runtime import Precision, active_mesh
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain

QK_NORM_EPS = 1e-5  # diffusers `Attention(qk_norm="rms_norm")` keeps its default eps
ADALN_EPS = 1e-6


@struct.dataclass
class Context:
    """What every block needs besides the hidden state."""

    emb: jax.Array  # [B, F or 1, D] fp32 RMS-normed timestep sinusoid (diffusers `embedded_timestep`)
    temb: jax.Array  # [B, F or 1, 3D] fp32 timestep MLP output
    text: jax.Array  # [B, L, text_embed_dim] after `crossattn_proj`
    rope_cos: jax.Array  # [S, head_dim]
    rope_sin: jax.Array  # [S, head_dim]
    pos: jax.Array | None  # [1, S, D] learned position embedding (added in every block), or None
    grid: tuple[int, int, int] = struct.field(pytree_node=False, default=(0, 0, 0))  # post-patch (F, H, W)


def per_token(mod: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
    """`[B, F, k]` per-frame values -> `[B, F*H*W, k]` (a single frame `[B, 1, k]` just broadcasts)."""
    if mod.shape[1] == 1:
        return mod
    f, h, w = grid
    b, _, k = mod.shape
    tokens = jnp.broadcast_to(mod[:, :, None], (b, f, h * w, k)).reshape(b, f * h * w, k)
    return constrain(tokens, ("batch", "seq", None))


def by_frame(fn, tokens: tuple[jax.Array, ...], per_frame: tuple[jax.Array, ...], grid: tuple[int, int, int]):
    """`fn(*tokens, *per_frame)` with `[B, F, k]` per-frame values applied to each frame's `[B, S, D]` tokens through
    a `[B, F, H*W, D]` view, so that no `[B, S, k]` copy of them is made: on a TPU XLA kept each broadcast shift,
    scale and gate whole in fp32, several at once (Cosmos-Predict2.5-2B at 704x1280: 11.1 GB of the DiT step's
    temporaries). Under a mesh of several devices (the tokens split) the values go per token as before."""
    mesh = active_mesh()
    if all(m.shape[1] == 1 for m in per_frame) or (mesh is not None and mesh.size > 1):
        return fn(*tokens, *(per_token(m, grid) for m in per_frame))
    b, s = tokens[0].shape[:2]
    frames = grid[0]
    out = fn(*(t.reshape(b, frames, s // frames, t.shape[-1]) for t in tokens), *(m[:, :, None] for m in per_frame))
    return out.reshape(b, s, out.shape[-1])


def token_rows(mod: jax.Array, grid: tuple[int, int, int]):
    """`[B, F, k]` per-frame values as `rows(start, stop)` -> the `[B, stop - start, k]` of those tokens (a
    feed-forward's gate chunk by chunk: `layers.FeedForward`)."""
    if mod.shape[1] == 1:
        return lambda start, stop: mod
    frame_tokens = grid[1] * grid[2]
    return lambda start, stop: mod[:, np.arange(start, stop) // frame_tokens]


def nearest_resize(mask: jax.Array, size: tuple[int, int]) -> jax.Array:
    """torchvision's NEAREST resize of `[..., H, W]` (source index `floor(dst * in / out)`)."""
    (h_in, w_in), (h, w) = mask.shape[-2:], size
    if (h_in, w_in) == (h, w):
        return mask
    rows = np.floor(np.arange(h) * np.float32(h_in / h)).astype(np.int32)
    cols = np.floor(np.arange(w) * np.float32(w_in / w)).astype(np.int32)
    return mask[..., rows, :][..., cols]


# ---------------------------------------------------------------------------------------------
# Embeddings


class PatchEmbed(nn.Module):
    """diffusers `CosmosPatchEmbed`: patches flattened (C, pt, ph, pw), one bias-free Linear `proj`."""

    features: int
    patch: tuple[int, int, int]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = patchify(x, self.patch, channels_first=True)  # [B, S, C*pt*ph*pw]
        return Dense(self.features, axes=("conv_in", "embed"), use_bias=False, name="proj")(x)


class TimeEmbedding(nn.Module):
    """diffusers `CosmosEmbedding`: sinusoid -> (bias-free MLP to 3*D, RMS-normed sinusoid), fp32."""

    dim: int

    @nn.compact
    def __call__(self, timestep: jax.Array) -> tuple[jax.Array, jax.Array]:
        proj = timestep_sinusoid(timestep, self.dim)  # [..., D] (cos, sin)
        temb = TimestepMLP(self.dim, name="t_embedder")(proj)
        emb = RMSNorm(eps=1e-6, name="norm")(proj)
        return temb, emb


class TimestepMLP(nn.Module):
    """diffusers `CosmosTimestepEmbedding`: linear_1 (D -> D), SiLU, linear_2 (D -> 3D), no biases."""

    dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.silu(Dense(self.dim, axes=(None, "embed"), use_bias=False, dtype=jnp.float32, name="linear_1")(x))
        return Dense(3 * self.dim, axes=("embed", None), use_bias=False, dtype=jnp.float32, name="linear_2")(x)


class LearnablePosEmbed(nn.Module):
    """diffusers `CosmosLearnablePositionalEmbed`: per-axis tables summed, then L2-normalised
    (`emb / (eps + |emb| / sqrt(D))`) in fp32."""

    cfg: CosmosTransformerConfig
    eps: float = 1e-6

    @nn.compact
    def __call__(self, grid: tuple[int, int, int]) -> jax.Array:
        cfg = self.cfg
        d = cfg.inner_dim
        tables = [logical_param(self, f"pos_emb_{axis}", (n, d), (None, "embed"))
                  for axis, n in zip("thw", cfg.max_grid)]
        f, h, w = grid
        emb = (tables[0][:f, None, None] + tables[1][None, :h, None] + tables[2][None, None, :w]).reshape(1, -1, d)
        emb = emb.astype(jnp.float32)
        norm = jnp.linalg.norm(emb, axis=-1, keepdims=True)
        return emb / (self.eps + norm * np.float32(math.sqrt(1.0 / d)))


class Embedder(nn.Module):
    """Everything before the blocks: `patch_embed`, `time_embed`, `crossattn_proj_0`, `learnable_pos_embed`.

    Takes `CosmosTransformer.embed`'s inputs: the condition and padding masks are concatenated to
    the latents here, as the reference's forward does.
    """

    cfg: CosmosTransformerConfig
    dtype: Any = jnp.float32
    residual_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, latents, timestep, text, condition_mask=None, padding_mask=None):
        cfg = self.cfg
        x = concat_masks(cfg, latents, condition_mask, padding_mask)
        b = x.shape[0]
        grid = tuple(n // p for n, p in zip(x.shape[2:], cfg.patch_size))
        video = PatchEmbed(cfg.inner_dim, cfg.patch_size, name="patch_embed")(x.astype(self.dtype))
        temb, emb = TimeEmbedding(cfg.inner_dim, name="time_embed")(timestep.reshape(b, -1))  # [B, 1 or F, .]
        if cfg.use_crossattn_projection:
            proj = Dense(cfg.encoder_hidden_states_channels, axes=(None, "embed"), name="crossattn_proj_0")
            text = gelu_exact(proj(text.astype(self.dtype)))
        pos = LearnablePosEmbed(cfg, name="learnable_pos_embed")(grid) if cfg.extra_pos_embed_type else None
        return constrain(video.astype(self.residual_dtype), VIDEO_AXES), temb, emb, text.astype(self.dtype), pos


def concat_masks(cfg: CosmosTransformerConfig, latents, condition_mask=None, padding_mask=None) -> jax.Array:
    """`[latents, condition mask, padding mask]` on the channel axis, as the reference's forward builds
    its input (the padding mask `[1, 1, H', W']` resized nearest to the latent size; None = zeros)."""
    x = latents if condition_mask is None else jnp.concatenate([latents, condition_mask.astype(latents.dtype)], 1)
    if not cfg.concat_padding_mask:
        return x
    b, _, f, h, w = x.shape
    pad = jnp.zeros((1, 1, h, w), x.dtype) if padding_mask is None else nearest_resize(padding_mask, (h, w))
    return jnp.concatenate([x, jnp.broadcast_to(pad.astype(x.dtype)[:, :, None], (b, 1, f, h, w))], axis=1)


# ---------------------------------------------------------------------------------------------
# The block


class AdaLNLoRA(nn.Module):
    """diffusers `CosmosAdaLayerNormZero` (`chunks=3`) / `CosmosAdaLayerNorm` (`chunks=2`):
    `linear_2(linear_1(silu(emb))) + temb[..., :chunks*D]`, per frame, in fp32."""

    dim: int
    rank: int
    chunks: int

    @nn.compact
    def __call__(self, emb: jax.Array, temb: jax.Array) -> list[jax.Array]:
        x = Dense(self.rank, axes=("embed", None), use_bias=False, dtype=jnp.float32, name="linear_1")(nn.silu(emb))
        x = Dense(self.chunks * self.dim, axes=(None, "embed"), use_bias=False, dtype=jnp.float32, name="linear_2")(x)
        x = x + temb[..., : self.chunks * self.dim]
        return jnp.split(x, self.chunks, axis=-1)


class CosmosAttention(nn.Module):
    """diffusers `Attention` + `CosmosAttnProcessor2_0`: bias-free projections, per-head RMS q/k norms
    (eps 1e-5), RoPE (rotate-half) on self-attention only."""

    cfg: CosmosTransformerConfig
    cross: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, ctx: Context) -> jax.Array:
        cfg = self.cfg
        heads, dim = cfg.num_attention_heads, cfg.inner_dim
        dense = lambda name: Dense(dim, axes=("embed", "heads"), use_bias=False, name=name)
        source = ctx.text if self.cross else x
        q = RMSNorm(eps=QK_NORM_EPS, name="norm_q")(split_heads(dense("to_q")(x), heads))
        k = RMSNorm(eps=QK_NORM_EPS, name="norm_k")(split_heads(dense("to_k")(source), heads))
        v = split_heads(dense("to_v")(source), heads)
        if not self.cross:
            q, k = rotate_half(q, ctx.rope_cos, ctx.rope_sin), rotate_half(k, ctx.rope_cos, ctx.rope_sin)
        out = attention(q, k, v).reshape(*x.shape[:-1], dim)
        return Dense(dim, axes=("heads", "embed"), use_bias=False, name="to_out_0")(out)


class CosmosBlock(nn.Module):
    """diffusers `CosmosTransformerBlock`; the hidden state stays in `residual_dtype`."""

    cfg: CosmosTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: jax.Array, ctx: Context) -> jax.Array:
        cfg = self.cfg
        ada = lambda name: AdaLNLoRA(cfg.inner_dim, cfg.adaln_lora_dim, 3, name=name)
        norm = LayerNorm(eps=ADALN_EPS, use_scale=False, use_bias=False)
        residual = hidden.astype(jnp.float32)
        if ctx.pos is not None:  # the learned embedding is added again at the start of every block
            residual = residual + ctx.pos

        def adaln(name, stream):
            shift, scale, gate = ada(name)(ctx.emb, ctx.temb)  # [B, F or 1, D] each
            x = by_frame(lambda t, sh, sc: modulate(norm(t), sh, sc), (stream,), (shift, scale), ctx.grid)
            return x.astype(self.dtype), gate

        def gated_add(stream, out, gate):
            return by_frame(lambda r, o, g: r + g * o.astype(jnp.float32), (stream, out), (gate,), ctx.grid)

        # 1. Self-attention with 3D RoPE.
        x, gate = adaln("norm1", residual)
        residual = gated_add(residual, CosmosAttention(cfg, name="attn1")(x, ctx), gate)

        # 2. Cross-attention to the text (no mask: the pipeline pads to 512 and attends to all of it).
        x, gate = adaln("norm2", residual)
        residual = gated_add(residual, CosmosAttention(cfg, cross=True, name="attn2")(x, ctx), gate)

        # 3. GELU feed-forward.
        x, gate = adaln("norm3", residual)
        ff = FeedForward(cfg.inner_dim, cfg.mlp_dim, activation=gelu_exact, use_bias=False, name="ff")
        residual = ff(x, residual=residual, gate=token_rows(gate, ctx.grid))  # added in place, by token chunks
        return constrain(residual.astype(hidden.dtype), VIDEO_AXES)


class Head(nn.Module):
    """diffusers `CosmosAdaLayerNorm` (`norm_out`) and the bias-free `proj_out`."""

    cfg: CosmosTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: jax.Array, emb: jax.Array, temb: jax.Array, grid: tuple[int, int, int]) -> jax.Array:
        cfg = self.cfg
        shift, scale = AdaLNLoRA(cfg.inner_dim, cfg.adaln_lora_dim, 2, name="norm_out")(emb, temb)
        norm = LayerNorm(eps=ADALN_EPS, use_scale=False, use_bias=False)
        x = by_frame(lambda t, sh, sc: modulate(norm(t.astype(jnp.float32)), sh, sc), (hidden,), (shift, scale), grid)
        features = math.prod(cfg.patch_size) * cfg.out_channels
        return Dense(features, axes=("embed", None), use_bias=False, name="proj_out")(x.astype(self.dtype))


# ---------------------------------------------------------------------------------------------
# The model


def first_block_modulated(cfg: CosmosTransformerConfig, first: Params, hidden: jax.Array, ctx: Context) -> jax.Array:
    """Block 0's self-attention input: its hidden state (plus the learned position embedding, as the
    block adds it) under LayerNorm and `norm1`'s shift and scale, fp32 (TeaCache4Cosmos reads the same
    of Cosmos-1.0's first block)."""
    residual = hidden.astype(jnp.float32) if ctx.pos is None else hidden.astype(jnp.float32) + ctx.pos
    ada = AdaLNLoRA(cfg.inner_dim, cfg.adaln_lora_dim, 3).apply({"params": first["norm1"]}, ctx.emb, ctx.temb)
    norm = lambda t: LayerNorm(eps=ADALN_EPS, use_scale=False, use_bias=False).apply({}, t)  # noqa: E731
    return by_frame(lambda t, sh, sc: modulate(norm(t), sh, sc), (residual,), tuple(ada[:2]), ctx.grid)


class CosmosTransformer(StackedTransformer):
    """The Cosmos-Predict2.5 DiT in the `vidax.zoo.parts.dit.StackedDiT` shape.

    Args:
      cfg: `CosmosTransformerConfig.from_hf_config(config_json)` (or `.from_param_shapes`).
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of the hidden state between blocks.
    """

    def __init__(self, cfg: CosmosTransformerConfig, dtype: Any = jnp.float32, residual_dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.embedder = Embedder(cfg, dtype, residual_dtype)
        self.block = CosmosBlock(cfg, dtype)
        self.head_module = Head(cfg, dtype)

    embed_modules = ("patch_embed", "time_embed", "crossattn_proj_0", "learnable_pos_embed")
    head_modules = ("norm_out", "proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input); no set is published for Predict2.5
    modulated_inputs = {
        "modulated": lambda model, first, hidden, ctx: first_block_modulated(model.cfg, first, hidden, ctx)}

    @classmethod
    def with_precision(cls, cfg: CosmosTransformerConfig, precision: Precision) -> CosmosTransformer:
        """The model under a runtime `Precision` (its activations and residual dtypes)."""
        return cls(cfg, dtype=precision.activations, residual_dtype=precision.residual)

    def embed(self, params: Params, latents, timestep, text, condition_mask=None, padding_mask=None,
              fps=None) -> tuple[jax.Array, Context]:
        """Tokens and context from the diffusers forward's inputs.

        Args:
          params: the full parameter tree (only the embedders are read).
          latents: `[B, in_channels - 1, F, H, W]` (Predict2.5: 16 normalised Wan2.1 latent channels).
          timestep: sigma in [0, 1]: `[B]`, or `[B, F]` per latent frame (the pipeline gives
            conditioning frames 1e-4 and the others the step's sigma).
          text: Reason1 features `[B, L, crossattn_proj_in_channels]` (L = 512 as the pipeline pads).
          condition_mask: `[B, 1, F, H, W]`, 1 on conditioning frames (zeros for text-to-video);
            None only for a model whose `in_channels` leaves no room for it.
          padding_mask: `[1, 1, H', W']` (resized nearest to the latent size); None means zeros,
            which is what the pipeline passes.
          fps: frame rate for the temporal RoPE positions; the Predict2.5 pipeline passes None.
        """
        cfg = self.cfg
        grid = self._check_inputs(latents, timestep, text, condition_mask)
        sub = self.subtree(params, self.embed_modules)
        video, temb, emb, text, pos = self.embedder.apply({"params": sub}, latents, timestep, text, condition_mask,
                                                          padding_mask)
        cos, sin = rope_tables(cfg.attention_head_dim, grid, cfg.rope_scale, fps)
        if pos is not None:
            pos = constrain(pos, (None, "seq", "act_embed"))
        return video, Context(emb, temb, constrain(text, TEXT_AXES), jnp.asarray(cos), jnp.asarray(sin), pos, grid)

    def _check_inputs(self, latents, timestep, text, condition_mask) -> tuple[int, int, int]:
        """The post-patch grid; one clear error for inputs the reference would reject or misread."""
        cfg = self.cfg
        channels = latents.shape[1] + (0 if condition_mask is None else condition_mask.shape[1])
        if latents.ndim != 5 or channels != cfg.in_channels:
            raise ValueError(f"Cosmos transformer takes {cfg.in_channels} channels (latents + condition mask), got "
                             f"latents {latents.shape} and condition_mask "
                             f"{None if condition_mask is None else condition_mask.shape}")
        x = latents
        if any(n % p for n, p in zip(x.shape[2:], cfg.patch_size)):
            raise ValueError(f"latent size {x.shape[2:]} is not a multiple of the patch size {cfg.patch_size}")
        grid = tuple(n // p for n, p in zip(x.shape[2:], cfg.patch_size))
        if any(g > m for g, m in zip(grid, cfg.max_grid)):
            raise ValueError(f"latent grid {grid} exceeds the position tables {cfg.max_grid} (max_size / patch)")
        b = x.shape[0]
        if timestep.shape not in ((b,), (b, grid[0])) or (timestep.ndim == 2 and cfg.patch_size[0] != 1):
            raise ValueError(f"timestep must be [{b}] or per latent frame [{b}, {grid[0]}] (patch_t 1), "
                             f"got {timestep.shape}")
        if text.ndim != 3 or text.shape[-1] != cfg.text_in_dim:
            raise ValueError(f"text features must be [B, L, {cfg.text_in_dim}], got {text.shape}")
        return grid

    def head(self, params: Params, hidden: jax.Array, ctx: Context) -> jax.Array:
        """Final AdaLN, projection and unpatchify to `[B, out_channels, F, H, W]`.

        `proj_out` lays each token's features out (ph, pw, pt, C), not patchify's (C, pt, ph, pw)
        (diffusers' "not the inverse" permute); they are reordered to (pt, ph, pw, C) first.
        """
        cfg = self.cfg
        sub = self.subtree(params, self.head_modules)
        out = self.head_module.apply({"params": sub}, hidden, ctx.emb, ctx.temb, ctx.grid)
        out = constrain(out, ("batch", None, None))  # sequence parallel gathers here
        pt, ph, pw = cfg.patch_size
        b, s, _ = out.shape
        out = out.reshape(b, s, ph, pw, pt, cfg.out_channels).transpose(0, 1, 4, 2, 3, 5).reshape(b, s, -1)
        return unpatchify(out, ctx.grid, cfg.patch_size, cfg.out_channels)

    def head_inputs(self, hidden: jax.Array, ctx: Context) -> tuple:
        return hidden, ctx.emb, ctx.temb, ctx.grid

    def dummy_inputs(self, batch: int = 1):
        """Smallest valid inputs (one patch per axis) for `init` / `eval_shape`."""
        cfg = self.cfg
        f32 = jnp.float32
        pt, ph, pw = cfg.patch_size
        return (
            jnp.zeros((batch, cfg.in_channels - 1, pt, ph, pw), f32),
            jnp.zeros((batch,), f32),
            jnp.zeros((batch, 1, cfg.text_in_dim), f32),
            jnp.zeros((batch, 1, pt, ph, pw), f32),
        )
