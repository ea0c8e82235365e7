"""Cosmos3's mixture-of-transformers (follows diffusers `Cosmos3OmniTransformer`, vision generation).

Two token streams share every layer's attention but have their own weights: the "understanding"
stream (the prompt's token ids, embedded by the LM's `embed_tokens`, causal) and the "generation"
stream (the video latents, patchified 2x2 and projected by `proj_in`). Per layer: each stream is
RMS-normed by its own norm, projected by its own q/k/v (`to_*` / `add_*_proj`), q/k-normed per head,
rotated by its part of the unified 3D mRoPE; the text attends causally to itself only, the video
attends to the text keys (re-normed by `k_norm_und_for_gen` on Edge) and to itself, bidirectionally;
each stream has its own output projection and MLP (`mlp` / `mlp_moe_gen`: SwiGLU, or relu2 on Edge).
The timestep (t in [0, 1000], as the scheduler's integer timesteps give it) is scaled by
`timestep_scale` (0.001) inside, embedded, and added to the tokens of the noisy latent frames only;
conditioning frames get none, and their outputs are zeroed (the reference leaves them out). Latents
whose height or width is not a multiple of the patch are zero-padded at the bottom and right to the
next multiple before patchifying, and the velocity is cropped back, as the reference packs them.

Split per `vidax.zoo.parts.dit`: `embed` builds both streams and the context; `block` is one
`Cosmos3VLTextMoTDecoderLayer` on a `Streams` pair; `head` is `norm_moe_gen`, `proj_out` and the
unpatchify. The text stream's final norm and the LM head (text generation) are not used.

Batching: classifier-free guidance's two prompts differ in length; they are right-padded to one
length, and `text_mask` keeps the video from attending to the padding (the text's causal attention
never reaches it). RoPE tables are per sample (`[B, S, head_dim]`): the video's positions start
after each prompt's own length.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from vidax.zoo.compute.attention import joint_attention
from vidax.zoo.cosmos3.config import Cosmos3TransformerConfig
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.parts.encoders.common import Embed, dense_attention
from vidax.zoo.compute.layers import Dense, RMSNorm, patchify, timestep_sinusoid, unpatchify
from vidax.zoo.parts.rope import rotate_half
from vidax.zoo.compute.runtime import Precision
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain

TIME_PROJ_DIM = 256


@struct.dataclass
class Streams:
    """The hidden state between layers: the text (understanding) and video (generation) streams."""

    und: jax.Array  # [B, L, D], whole on every device
    gen: jax.Array  # [B, N, D], sequence-split under sequence parallel


@struct.dataclass
class Context:
    """What every layer needs besides the streams."""

    text_mask: jax.Array  # [B, L] bool, True for real prompt tokens
    und_cos: jax.Array  # [B, L, head_dim]
    und_sin: jax.Array
    gen_cos: jax.Array  # [B, N, head_dim]
    gen_sin: jax.Array
    noisy: jax.Array  # [B, T] 1 on noisy latent frames (the head zeroes the others)
    grid: tuple[int, int, int] = struct.field(pytree_node=False, default=(0, 0, 0))  # post-patch (T, H, W)
    size: tuple[int, int] = struct.field(pytree_node=False, default=(0, 0))  # latent (H, W) before padding


def _patch(cfg: Cosmos3TransformerConfig) -> tuple[int, int, int]:
    """The latent patch (one frame by p x p)."""
    return 1, cfg.latent_patch_size, cfg.latent_patch_size


def patch_grid(size: tuple[int, int, int], p: int) -> tuple[int, int, int]:
    """Post-patch `(T, H, W)` of latents `(T, H, W)`: H and W rounded up (the reference zero-pads them)."""
    t, h, w = size
    return t, -(-h // p), -(-w // p)


def pad_to_patch(latents: jax.Array, p: int) -> jax.Array:
    """Latents `[B, C, T, H, W]` zero-padded at the bottom and right to multiples of `p`."""
    h, w = latents.shape[-2:]
    return jnp.pad(latents, [(0, 0)] * 3 + [(0, -h % p), (0, -w % p)])


def relu2(x: jax.Array) -> jax.Array:
    return jnp.square(jax.nn.relu(x))


class Embedder(nn.Module):
    """`embed_tokens`, `proj_in` and the fp32 timestep MLP (`time_embedder`, diffusers `TimestepEmbedding`)."""

    cfg: Cosmos3TransformerConfig
    dtype: Any = jnp.float32
    residual_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, text_mask, latents, timestep, noisy, *_rope):
        cfg = self.cfg
        und = Embed(cfg.vocab_size, cfg.hidden_size, name="embed_tokens")(input_ids)
        gen = Dense(cfg.hidden_size, axes=("conv_in", "embed"), dtype=self.dtype, name="proj_in")(
            patchify(pad_to_patch(latents.astype(self.dtype), cfg.latent_patch_size), _patch(cfg)))  # "cthpwq->thwpqc"
        t = timestep.astype(jnp.float32) * cfg.timestep_scale
        temb = TimestepMLP(cfg.hidden_size, name="time_embedder")(timestep_sinusoid(t, TIME_PROJ_DIM))  # [B, D]
        # The time embedding is added to the noisy frames' tokens only (the reference's scatter_add).
        frames = latents.shape[2]
        per_frame = noisy.astype(jnp.float32)[:, :, None] * temb[:, None, :]  # [B, T, D]
        gen = gen + jnp.repeat(per_frame.astype(self.dtype), gen.shape[1] // frames, axis=1)
        return (constrain(und.astype(self.residual_dtype), TEXT_AXES),
                constrain(gen.astype(self.residual_dtype), VIDEO_AXES))


class TimestepMLP(nn.Module):
    """diffusers `TimestepEmbedding`: linear_1, SiLU, linear_2 (biased), kept in fp32."""

    dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.silu(Dense(self.dim, axes=(None, "embed"), dtype=jnp.float32, name="linear_1")(x))
        return Dense(self.dim, axes=("embed", None), dtype=jnp.float32, name="linear_2")(x)


# ---------------------------------------------------------------------------------------------
# The layer


class MLP(nn.Module):
    """diffusers `Cosmos3VLTextMLP`: `down(silu(gate(x)) * up(x))`, or `down(relu(up(x))^2)` (relu2)."""

    cfg: Cosmos3TransformerConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.cfg
        up = Dense(cfg.intermediate_size, ("embed", "mlp"), use_bias=False, name="up_proj")(x)
        if cfg.gated_mlp:
            hidden = jax.nn.silu(Dense(cfg.intermediate_size, ("embed", "mlp"), use_bias=False, name="gate_proj")(x)) * up
        else:
            hidden = relu2(up)
        return Dense(cfg.hidden_size, ("mlp", "embed"), use_bias=False, name="down_proj")(hidden)


class MoTAttention(nn.Module):
    """diffusers `Cosmos3PackedMoTAttention` + `Cosmos3AttnProcessor` on batched, padded streams."""

    cfg: Cosmos3TransformerConfig

    @nn.compact
    def __call__(self, und: jax.Array, gen: jax.Array, ctx: Context) -> tuple[jax.Array, jax.Array]:
        cfg = self.cfg
        h, kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        proj = lambda n, name, x: Dense(n * d, ("embed", "heads"), bias, name=name)(x).reshape(*x.shape[:-1], n, d)
        norm = lambda name: RMSNorm(eps=cfg.rms_norm_eps, name=name)

        # 1. Per-pathway projections and per-head q/k norms.
        q_und, k_und, v_und = proj(h, "to_q", und), proj(kv, "to_k", und), proj(kv, "to_v", und)
        q_gen, k_gen, v_gen = proj(h, "add_q_proj", gen), proj(kv, "add_k_proj", gen), proj(kv, "add_v_proj", gen)
        if cfg.qk_norm_for_text:
            q_und, k_und = norm("norm_q")(q_und), norm("norm_k")(k_und)
        k_und_for_gen = norm("k_norm_und_for_gen")(k_und) if cfg.und_k_norm_for_gen else k_und
        q_gen, k_gen = norm("norm_added_q")(q_gen), norm("norm_added_k")(k_gen)

        # 2. RoPE, each pathway with its part of the joint positions.
        und_rot = lambda x: rotate_half(x, ctx.und_cos, ctx.und_sin)
        gen_rot = lambda x: rotate_half(x, ctx.gen_cos, ctx.gen_sin)
        q_und, k_und, k_und_for_gen = und_rot(q_und), und_rot(k_und), und_rot(k_und_for_gen)
        q_gen, k_gen = gen_rot(q_gen), gen_rot(k_gen)

        # 3. Text: causal self-attention over the prompt (short; the encoders' dense kernel).
        length = und.shape[1]
        causal = jnp.tril(jnp.ones((length, length), bool))[None, None] & ctx.text_mask[:, None, None, :]
        und_out = dense_attention(q_und, k_und, v_und, scale=d**-0.5, mask=causal)

        # 4. Video: full attention to the text keys and its own (grouped-query heads repeated); the text
        #    rows joint_attention also returns are not the text pathway's and are dropped.
        rep = lambda x: jnp.repeat(x, h // kv, axis=2)
        gen_out, _ = joint_attention(q_gen, rep(k_gen), rep(v_gen), q_und, rep(k_und_for_gen), rep(v_und),
                                     txt_mask=ctx.text_mask)
        und_out = Dense(cfg.hidden_size, ("heads", "embed"), bias, name="to_out")(und_out.reshape(*und.shape[:-1], -1))
        gen_out = Dense(cfg.hidden_size, ("heads", "embed"), bias, name="to_add_out")(gen_out.reshape(*gen.shape[:-1], -1))
        return und_out, gen_out


class MoTLayer(nn.Module):
    """diffusers `Cosmos3VLTextMoTDecoderLayer`; both streams stay in `residual_dtype`."""

    cfg: Cosmos3TransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: Streams, ctx: Context) -> Streams:
        cfg = self.cfg
        norm = lambda name: RMSNorm(eps=cfg.rms_norm_eps, name=name)
        und, gen = hidden.und.astype(jnp.float32), hidden.gen.astype(jnp.float32)

        # 1. Mixture-of-transformers attention.
        und_attn, gen_attn = MoTAttention(cfg, name="self_attn")(
            norm("input_layernorm")(und).astype(self.dtype), norm("input_layernorm_moe_gen")(gen).astype(self.dtype), ctx)
        und = und + und_attn.astype(jnp.float32)
        gen = gen + gen_attn.astype(jnp.float32)

        # 2. Per-pathway MLPs.
        und = und + MLP(cfg, name="mlp")(norm("post_attention_layernorm")(und).astype(self.dtype)).astype(jnp.float32)
        gen_mlp = MLP(cfg, name="mlp_moe_gen")(norm("post_attention_layernorm_moe_gen")(gen).astype(self.dtype))
        gen = gen + gen_mlp.astype(jnp.float32)
        return Streams(constrain(und.astype(hidden.und.dtype), TEXT_AXES),
                       constrain(gen.astype(hidden.gen.dtype), VIDEO_AXES))


class Head(nn.Module):
    """`norm_moe_gen` then `proj_out` (biased) on the video stream."""

    cfg: Cosmos3TransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, gen: jax.Array) -> jax.Array:
        cfg = self.cfg
        x = RMSNorm(eps=cfg.rms_norm_eps, name="norm_moe_gen")(gen.astype(jnp.float32)).astype(self.dtype)
        return Dense(cfg.patch_latent_dim, ("embed", None), name="proj_out")(x)


# ---------------------------------------------------------------------------------------------
# The model


class Cosmos3Transformer(StackedTransformer):
    """The Cosmos3 DiT in the `vidax.zoo.parts.dit.StackedDiT` shape (vision generation).

    Args:
      cfg: `Cosmos3TransformerConfig.from_hf_config(config_json)`.
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of both streams between layers.
    """

    def __init__(self, cfg: Cosmos3TransformerConfig, dtype: Any = jnp.float32, residual_dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.embedder = Embedder(cfg, dtype, residual_dtype)
        self.block = MoTLayer(cfg, dtype)
        self.head_module = Head(cfg, dtype)

    embed_modules = ("embed_tokens", "proj_in", "time_embedder")
    head_modules = ("norm_moe_gen", "proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input), no published set: layer 0 has no AdaLN
    # (the time embedding is added to the video tokens), so its normed video input to attention stands in
    modulated_inputs = {"modulated": lambda model, first, hidden, ctx: RMSNorm(eps=model.cfg.rms_norm_eps).apply(
        {"params": first["input_layernorm_moe_gen"]}, hidden.gen.astype(jnp.float32))}

    def num_blocks(self, group: str) -> int:
        return self.cfg.num_hidden_layers

    @classmethod
    def with_precision(cls, cfg: Cosmos3TransformerConfig, precision: Precision) -> Cosmos3Transformer:
        return cls(cfg, dtype=precision.activations, residual_dtype=precision.residual)

    def embed(self, params: Params, input_ids, text_mask, latents, timestep, noisy, rope_cos, rope_sin
              ) -> tuple[Streams, Context]:
        """Both streams and the context.

        Args:
          params: the full parameter tree (only the embedders are read).
          input_ids: `[B, L]` prompt token ids (`cosmos3.text.prompt_ids`), right-padded.
          text_mask: `[B, L]` bool, True on real tokens.
          latents: `[B, latent_channel, T, H, W]` normalised Wan2.2 latents (conditioning frames clean).
          timestep: `[B]` t in [0, 1000]: the scheduler's integer timestep (`conditioning.vision_timestep`).
          noisy: `[B, T]` 1 on the latent frames being denoised, 0 on conditioning frames.
          rope_cos, rope_sin: `[B, L + T*ceil(H/p)*ceil(W/p), head_dim]` from `cosmos3.rope` (per prompt's length).
        """
        grid = self._check_inputs(input_ids, text_mask, latents, timestep, noisy, rope_cos)
        sub = self.subtree(params, self.embed_modules)
        und, gen = self.embedder.apply({"params": sub}, input_ids, text_mask, latents, timestep, noisy)
        length = input_ids.shape[1]
        tables = lambda t: jnp.asarray(t, jnp.float32)
        ctx = Context(jnp.asarray(text_mask, bool), tables(rope_cos)[:, :length], tables(rope_sin)[:, :length],
                      constrain(tables(rope_cos)[:, length:], ("batch", "seq", None)),
                      constrain(tables(rope_sin)[:, length:], ("batch", "seq", None)), jnp.asarray(noisy), grid,
                      latents.shape[-2:])
        return Streams(und, gen), ctx

    def _check_inputs(self, input_ids, text_mask, latents, timestep, noisy, rope) -> tuple[int, int, int]:
        cfg = self.cfg
        p = cfg.latent_patch_size
        if latents.ndim != 5 or latents.shape[1] != cfg.latent_channel:
            raise ValueError(f"Cosmos3 transformer takes latents [B, {cfg.latent_channel}, T, H, W], got {latents.shape}")
        b, _, t, h, w = latents.shape
        grid = patch_grid((t, h, w), p)
        if input_ids.shape[0] != b or text_mask.shape != input_ids.shape:
            raise ValueError(f"input_ids {input_ids.shape} and text_mask {text_mask.shape} must be [{b}, L]")
        if timestep.shape != (b,) or noisy.shape != (b, t):
            raise ValueError(f"timestep must be [{b}] and noisy [{b}, {t}], got {timestep.shape} and {noisy.shape}")
        tokens = input_ids.shape[1] + t * grid[1] * grid[2]
        if rope.shape != (b, tokens, cfg.head_dim):
            raise ValueError(f"RoPE tables must be [{b}, {tokens}, {cfg.head_dim}] (text then video), got {rope.shape}")
        return grid

    def head(self, params: Params, hidden: Streams, ctx: Context) -> jax.Array:
        """`[B, latent_channel, T, H, W]` velocities, zero on the conditioning frames."""
        cfg = self.cfg
        out = self.head_module.apply({"params": self.subtree(params, self.head_modules)}, hidden.gen)
        out = constrain(out, ("batch", None, None))  # sequence parallel gathers here
        h, w = ctx.size
        video = unpatchify(out, ctx.grid, _patch(cfg), cfg.latent_channel)[..., :h, :w]  # the padding cropped
        return video * ctx.noisy[:, None, :, None, None].astype(video.dtype)

    def head_inputs(self, hidden: Streams, ctx: Context) -> tuple:
        return (hidden.gen,)

    def dummy_inputs(self, batch: int = 1):
        cfg = self.cfg
        p = cfg.latent_patch_size
        return (jnp.zeros((batch, 1), jnp.int32), jnp.ones((batch, 1), bool),
                jnp.zeros((batch, cfg.latent_channel, 1, p, p), jnp.float32), jnp.zeros((batch,), jnp.float32),
                jnp.ones((batch, 1), jnp.float32), jnp.zeros((batch, 2, cfg.head_dim), jnp.float32),
                jnp.zeros((batch, 2, cfg.head_dim), jnp.float32))
