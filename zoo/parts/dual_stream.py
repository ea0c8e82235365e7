"""The dual-stream DiT pieces HunyuanVideo 1.0 and 1.5 share (diffusers' `HunyuanVideoTransformerBlock`,
`HunyuanVideoTokenRefiner`, the joint attention of video and text streams, the final AdaLN head).

A block's hidden state is the pair `DualStream(video, text)`; attention is joint over both streams'
tokens (`vidax.zoo.compute.attention.joint_attention`); sequence parallel splits the video tokens and never
the (short, replicated) text tokens. Each family's transformer subclasses `DualStreamTransformer` with
its own embedder and configs, and reads its sizes off the converted tree with `shared_sizes`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vidax.zoo.compute.attention import attention, joint_attention
from vidax.zoo.parts.configs import HeadsConfig, pick_fields
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.compute.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    Linear,
    MLPEmbedder,
    PatchEmbed,
    RMSNorm,
    modulate,
    split_heads,
    timestep_sinusoid,
    unpatchify,
)
from vidax.zoo.parts.rope import grid_table, rotate_interleaved as apply_rope
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain

# Either HunyuanVideo's transformer config (1.0's or 1.5's): the fields these pieces read have the same
# names and meanings in both. A block's `ctx` is the family's own `Context` (its `temb`, RoPE tables and
# grid; 1.0's adds the token-replace rows).
DiTConfig = Any


def check_attention(cfg: Any, where: str) -> None:
    """What both HunyuanVideo DiTs require of their attention: RMS q/k norms and RoPE axes that fill a head."""
    if cfg.qk_norm != "rms_norm":
        raise ValueError(f"{where}: qk_norm {cfg.qk_norm!r} is not supported (only 'rms_norm')")
    if sum(cfg.rope_axes_dim) != cfg.attention_head_dim:
        raise ValueError(f"{where}: rope_axes_dim {cfg.rope_axes_dim} must sum to attention_head_dim "
                         f"{cfg.attention_head_dim}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DualStreamConfig(HeadsConfig):
    """The transformer fields both HunyuanVideo DiTs take alike, with diffusers' shared defaults; each
    family's `TransformerConfig` adds its own and its own defaults for sizes."""

    where: ClassVar[str] = "HunyuanVideo transformer"  # names the model in errors
    attention_head_dim: int = 128
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size_t: int = 1
    qk_norm: str = "rms_norm"
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, int, int] = (16, 56, 56)

    def __post_init__(self):
        check_attention(self, self.where)

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]):
        """Build from a diffusers `transformer/config.json` dict."""
        return cls(**pick_fields(cls, hf))


def shared_sizes(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """The sizes both HunyuanVideo DiTs show alike in a converted tree: the patch embedding, heads, the
    dual-stream blocks, the token refiner, the text width and the output channels."""
    pt, p, _, in_channels, inner = shapes["x_embedder/proj/kernel"]
    head_dim = shapes["blocks/attn/norm_q/scale"][-1]
    refiners = {k.split("/")[2] for k in shapes if k.startswith("context_embedder/token_refiner/refiner_blocks_")}
    return dict(
        in_channels=in_channels,
        out_channels=shapes["proj_out/kernel"][1] // (pt * p * p),
        num_attention_heads=inner // head_dim,
        attention_head_dim=head_dim,
        num_layers=shapes["blocks/attn/norm_q/scale"][0],
        num_refiner_layers=len(refiners),
        patch_size=p,
        patch_size_t=pt,
        text_embed_dim=shapes["context_embedder/proj_in/kernel"][0],
    )


@struct.dataclass
class DualStream:
    """The hidden state between dual-stream blocks: video tokens and joint text tokens."""

    video: jax.Array  # [B, S, D], sequence-split under sequence parallel (VIDEO_AXES)
    text: jax.Array  # [B, T, D], whole on every device (TEXT_AXES); the block pins both parts itself


class RefinerAttention(nn.Module):
    """diffusers `Attention` (plain self-attention, biased projections) inside the token refiner."""

    heads: int
    dim: int

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
        q, k, v = (
            split_heads(Dense(self.dim, axes=("embed", "heads"), name=n)(x), self.heads)
            for n in ("to_q", "to_k", "to_v")
        )
        out = attention(q, k, v, kv_mask=mask)
        return Dense(self.dim, axes=("heads", "embed"), name="to_out_0")(out.reshape(*x.shape[:-1], -1))


class RefinerBlock(nn.Module):
    """diffusers `HunyuanVideo15IndividualTokenRefinerBlock`."""

    cfg: DiTConfig

    @nn.compact
    def __call__(self, x: jax.Array, temb: jax.Array, mask: jax.Array | None) -> jax.Array:
        cfg = self.cfg
        attn = RefinerAttention(cfg.num_attention_heads, cfg.inner_dim, name="attn")
        attn_out = attn(LayerNorm(eps=1e-6, name="norm1")(x), mask)
        gates = Linear(2 * cfg.inner_dim, child="linear", name="norm_out")(nn.silu(temb))
        gate_msa, gate_mlp = jnp.split(gates[:, None], 2, axis=-1)
        x = x + attn_out * gate_msa
        ff = FeedForward(cfg.inner_dim, cfg.mlp_dim, activation=nn.silu, name="ff")
        return x + ff(LayerNorm(eps=1e-6, name="norm2")(x)) * gate_mlp


class TokenRefiner(nn.Module):
    """diffusers `HunyuanVideo15TokenRefiner`: refines the Qwen2.5-VL features, conditioned on t and their mean."""

    cfg: DiTConfig

    @nn.compact
    def __call__(self, text: jax.Array, timestep: jax.Array, mask: jax.Array) -> jax.Array:
        cfg = self.cfg
        weights = mask.astype(jnp.float32)[..., None]
        pooled = (text.astype(jnp.float32) * weights).sum(1) / weights.sum(1)
        time_text = _TimeTextEmbed(cfg.inner_dim, name="time_text_embed")
        temb = time_text(timestep, pooled.astype(text.dtype))
        x = Dense(cfg.inner_dim, axes=(None, "embed"), name="proj_in")(text)
        refiner = _RefinerStack(cfg, name="token_refiner")
        return refiner(x, temb, mask.astype(bool))


class XEmbedder(nn.Module):
    """diffusers `HunyuanVideo15PatchEmbed` (and 1.0's `HunyuanVideoPatchEmbed`): a strided Conv3d one
    level down, as `proj`."""

    cfg: DiTConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        return PatchEmbed(cfg.inner_dim, (cfg.patch_size_t, cfg.patch_size, cfg.patch_size), name="proj")(x)


class JointAttention(nn.Module):
    """diffusers `Attention` with `HunyuanVideo15AttnProcessor2_0`: video and text share one softmax."""

    cfg: DiTConfig

    @nn.compact
    def __call__(self, video, text, ctx: Any):
        cfg = self.cfg
        heads, dim = cfg.num_attention_heads, cfg.inner_dim

        def project(x, names, norms):
            q, k, v = (split_heads(Dense(dim, axes=("embed", "heads"), name=n)(x), heads) for n in names)
            q = RMSNorm(eps=1e-6, name=norms[0])(q)
            k = RMSNorm(eps=1e-6, name=norms[1])(k)
            return q, k, v

        q, k, v = project(video, ("to_q", "to_k", "to_v"), ("norm_q", "norm_k"))
        q, k = apply_rope(q, ctx.rope_cos, ctx.rope_sin), apply_rope(k, ctx.rope_cos, ctx.rope_sin)
        tq, tk, tv = project(text, ("add_q_proj", "add_k_proj", "add_v_proj"), ("norm_added_q", "norm_added_k"))
        out, out_text = joint_attention(q, k, v, tq, tk, tv, txt_mask=ctx.text_mask)
        out = Dense(dim, axes=("heads", "embed"), name="to_out_0")(out.reshape(*video.shape[:-1], -1))
        out_text = Dense(dim, axes=("heads", "embed"), name="to_add_out")(out_text.reshape(*text.shape[:-1], -1))
        return out, out_text


class DualStreamBlock(nn.Module):
    """diffusers `HunyuanVideo15TransformerBlock` on a `DualStream`."""

    cfg: DiTConfig

    @nn.compact
    def __call__(self, hidden: DualStream, ctx: Any) -> DualStream:
        cfg = self.cfg
        video, text = hidden.video, hidden.text
        act = nn.silu(ctx.temb)
        mod = Linear(6 * cfg.inner_dim, child="linear", name="norm1")(act).astype(video.dtype)
        c_mod = Linear(6 * cfg.inner_dim, child="linear", name="norm1_context")(act).astype(text.dtype)
        shift, scale, gate, shift_mlp, scale_mlp, gate_mlp = jnp.split(mod, 6, axis=-1)
        c_shift, c_scale, c_gate, c_shift_mlp, c_scale_mlp, c_gate_mlp = jnp.split(c_mod, 6, axis=-1)
        norm = LayerNorm(eps=1e-6, use_scale=False, use_bias=False)

        # 1. Joint attention on the AdaLN-modulated streams.
        attn_out, text_attn_out = JointAttention(cfg, name="attn")(
            modulate(norm(video), shift[:, None], scale[:, None]), modulate(norm(text), c_shift[:, None], c_scale[:, None]), ctx
        )
        video = video + attn_out * gate[:, None]
        text = text + text_attn_out * c_gate[:, None]

        # 2. Feed-forward per stream.
        ff = FeedForward(cfg.inner_dim, cfg.mlp_dim, name="ff")
        ff_text = FeedForward(cfg.inner_dim, cfg.mlp_dim, name="ff_context")
        video = video + gate_mlp[:, None] * ff(modulate(norm(video), shift_mlp[:, None], scale_mlp[:, None]))
        text = text + c_gate_mlp[:, None] * ff_text(modulate(norm(text), c_shift_mlp[:, None], c_scale_mlp[:, None]))
        return DualStream(constrain(video, VIDEO_AXES), constrain(text, TEXT_AXES))


class _AdaNormOut(nn.Module):
    """diffusers `norm_out.linear` kept as its two halves, `linear_scale` and `linear_shift`.

    diffusers orders the halves (scale, shift), the official checkpoint (shift, scale): named halves
    let both layouts' specs say which is which by a split, with no reordering op.
    """

    features: int

    @nn.compact
    def __call__(self, temb: jax.Array) -> tuple[jax.Array, jax.Array]:
        act = nn.silu(temb)
        scale = Dense(self.features, axes=("embed", None), name="linear_scale")(act)
        return scale, Dense(self.features, axes=("embed", None), name="linear_shift")(act)


class Head(nn.Module):
    """diffusers `AdaLayerNormContinuous` (`norm_out`) then `proj_out`."""

    cfg: DiTConfig

    @nn.compact
    def __call__(self, video: jax.Array, temb: jax.Array) -> jax.Array:
        cfg = self.cfg
        scale, shift = _AdaNormOut(cfg.inner_dim, name="norm_out")(temb)
        scale, shift = scale.astype(video.dtype), shift.astype(video.dtype)
        video = modulate(LayerNorm(eps=1e-6, use_scale=False, use_bias=False)(video), shift[:, None], scale[:, None])
        out = cfg.patch_size_t * cfg.patch_size**2 * cfg.out_channels
        return Dense(out, axes=("embed", None), name="proj_out")(video)


def first_block_modulated(cfg: DiTConfig, first: Params, hidden: DualStream, ctx: Any) -> jax.Array:
    """Block 0's video stream under its first LayerNorm and `norm1`'s shift and scale of the time
    embedding (TeaCache4HunyuanVideo's `modulated_inp`), fp32."""
    mod = Linear(6 * cfg.inner_dim, child="linear").apply({"params": first["norm1"]}, nn.silu(ctx.temb))
    shift, scale = jnp.split(mod.astype(jnp.float32), 6, axis=-1)[:2]
    normed = LayerNorm(eps=1e-6, use_scale=False, use_bias=False).apply({}, hidden.video.astype(jnp.float32))
    return modulate(normed, shift[:, None], scale[:, None])


class DualStreamTransformer(StackedTransformer):
    """What both HunyuanVideo DiTs (1.0 and 1.5) do around their blocks on a `DualStream`: the RoPE
    tables and post-patch grid of the latents, and the head on the video stream."""

    head_modules = ("norm_out", "proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input); 1.0's I2V first-frame rows are read
    # under the time embedding too, as the reference (text-to-video) has no token-replace rows
    modulated_inputs = {
        "modulated": lambda model, first, hidden, ctx: first_block_modulated(model.cfg, first, hidden, ctx)}

    def positions(self, latents: jax.Array) -> tuple[jax.Array, jax.Array, tuple[int, int, int]]:
        """RoPE cos/sin `[S, head_dim]` and the post-patch grid (F, H, W) of `[B, C, F, H, W]` latents."""
        cfg = self.cfg
        f, h, w = latents.shape[2:]
        cos, sin = rope_tables(cfg, f, h, w)
        return jnp.asarray(cos), jnp.asarray(sin), (f // cfg.patch_size_t, h // cfg.patch_size, w // cfg.patch_size)

    def head(self, params: Params, hidden: DualStream, ctx: Any) -> jax.Array:
        """Final AdaLN, projection and unpatchify to `[B, out_channels, F, H, W]`."""
        cfg = self.cfg
        sub = self.subtree(params, self.head_modules)
        out = self.head_module.apply({"params": sub}, hidden.video, ctx.temb)
        out = constrain(out, ("batch", None, None))  # sequence parallel gathers here
        patch = (cfg.patch_size_t, cfg.patch_size, cfg.patch_size)
        return unpatchify(out, ctx.grid, patch, cfg.out_channels, channels_first=True)

    def head_inputs(self, hidden: DualStream, ctx: Any) -> tuple:
        return hidden.video, ctx.temb


def rope_tables(cfg: DiTConfig, frames: int, height: int, width: int) -> tuple[jax.Array, jax.Array]:
    """cos/sin `[F*H*W, head_dim]` per token (t, h, w order), pairs interleaved (diffusers `use_real`);
    per-axis tables from the host, expanded over the grid in the program (`parts.rope.grid_table`)."""
    sizes = (frames // cfg.patch_size_t, height // cfg.patch_size, width // cfg.patch_size)
    cos, sin = [], []
    for axis, (axis_dim, n) in enumerate(zip(cfg.rope_axes_dim, sizes)):
        inv = 1.0 / (cfg.rope_theta ** (np.arange(0, axis_dim, 2, dtype=np.float32) / axis_dim))
        angles = np.outer(np.arange(n, dtype=np.float32), inv).astype(np.float32)  # [n, axis_dim/2]
        cos.append((axis, np.repeat(np.cos(angles), 2, axis=1)))
        sin.append((axis, np.repeat(np.sin(angles), 2, axis=1)))
    return grid_table(cos, sizes), grid_table(sin, sizes)


class _TimeTextEmbed(nn.Module):
    """diffusers `CombinedTimestepTextProjEmbeddings`."""

    features: int

    @nn.compact
    def __call__(self, timestep: jax.Array, pooled: jax.Array) -> jax.Array:
        temb = MLPEmbedder(self.features, name="timestep_embedder")(timestep_sinusoid(timestep, 256).astype(pooled.dtype))
        return temb + MLPEmbedder(self.features, name="text_embedder")(pooled)


class _RefinerStack(nn.Module):
    cfg: DiTConfig

    @nn.compact
    def __call__(self, x, temb, mask):
        for i in range(self.cfg.num_refiner_layers):
            x = RefinerBlock(self.cfg, name=f"refiner_blocks_{i}")(x, temb, mask)
        return x
