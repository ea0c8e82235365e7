"""CogVideoX 1.0 / 1.5 diffusion transformer (follows diffusers `CogVideoXTransformer3DModel`).

Split per `vidax.zoo.parts.dit`: `embed` patchifies the latents, projects the T5 features, adds the
position table (2B sincos, 5B-I2V learned) and builds the time (+ ofs) embedding and the RoPE
tables; `block` is one `CogVideoXBlock` on the pair `JointStream(video, text)`: expert AdaLN (one
LayerNorm, separate video and text modulation), one joint attention over text and video tokens
with shared projections (RoPE on the video tokens only), one shared feed-forward; `head` is the
final LayerNorm, AdaLN, projection and unpatchify. Module names mirror diffusers' so the specs
`cogvideox/transformer` (1.0) and `cogvideox/transformer15` (1.5) stay short.

The AdaLN projections `norm1.linear` / `norm2.linear` are kept as their video and text halves
(`linear_video`, `linear_text`): the authors' SAT checkpoints store the four halves of a block
interleaved in one matrix, so named halves let both layouts' specs say where each comes from.

Dtypes: `dtype` is the activations' (matmul inputs, attention); the video hidden state between
blocks is `residual_dtype` (fp32 by default); the text hidden state is always fp32: CogVideoX runs
T5 over unmasked padding and its features are large, and in bf16 the text stream drifts from the
reference. Norms, the AdaLN modulation, the time/ofs embeddings and the text projection run in fp32.
No token is masked anywhere, as in the reference (its attention takes no mask; padded prompt
tokens take part).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from vidax.zoo.compute.attention import joint_attention
from vidax.zoo.cogvideox.config import CogVideoXConfigError, CogVideoXTransformerConfig
from vidax.zoo.cogvideox.rope import rotary_tables, sincos_table
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.compute.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    MLPEmbedder,
    gelu_tanh,
    logical_param,
    modulate,
    patchify,
    split_heads,
    timestep_sinusoid,
    unpatchify,
)
from vidax.zoo.parts.rope import rotate_interleaved as apply_rope
from vidax.zoo.compute.runtime import Precision
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain

# How the position table enters (static per input size).
SINCOS, LEARNED = "sincos", "learned"


@struct.dataclass
class JointStream:
    """The hidden state between blocks: video tokens and text tokens."""

    video: jax.Array  # [B, S, D] residual_dtype, sequence-split under sequence parallel
    text: jax.Array  # [B, T, D] float32, whole on every device


@struct.dataclass
class Context:
    """What every block needs besides the hidden state."""

    temb: jax.Array  # [B, time_embed_dim] float32 (time + ofs embedding)
    rope_cos: jax.Array | None  # [S, head_dim] (None: 2B, no RoPE)
    rope_sin: jax.Array | None
    grid: tuple[int, int, int] = struct.field(pytree_node=False, default=(0, 0, 0))  # post-patch (F, H, W)


def position_mode(cfg: CogVideoXTransformerConfig, frames: int, height: int, width: int) -> str | None:
    """Which table diffusers adds for these latent sizes: sincos, learned, or none (RoPE only).

    The 5B-I2V learned table covers the sample size only: other frame counts silently get the
    sincos table instead (diffusers recomputes it), other heights or widths are refused.
    """
    if not cfg.has_positional_table:
        return None
    if not cfg.use_learned_positional_embeddings:
        return SINCOS
    if (height, width) != (cfg.sample_height, cfg.sample_width):
        raise CogVideoXConfigError(
            f"this CogVideoX model's learned position table covers {cfg.sample_height} x {cfg.sample_width} "
            f"latents ({cfg.sample_height * 8} x {cfg.sample_width * 8} pixels) only, got {height} x {width}"
        )
    pixel_frames = (frames - 1) * cfg.temporal_compression_ratio + 1
    return LEARNED if pixel_frames == cfg.sample_frames else SINCOS


# ---------------------------------------------------------------------------------------------
# Embeddings


class _PatchProjection(nn.Module):
    """The patch projection with its kernel in the converted reference layout: 1.0's Conv2d as
    `[p, p, C, D]` (patches flattened (ph, pw, C)), 1.5's Linear as `[C*pt*p*p, D]` ((C, pt, ph, pw))."""

    features: int
    kernel_shape: tuple[int, ...]
    use_bias: bool

    @nn.compact
    def __call__(self, patches: jax.Array) -> jax.Array:
        axes = (None,) * (len(self.kernel_shape) - 2) + ("conv_in", "embed")
        kernel = logical_param(self, "kernel", self.kernel_shape, axes)
        y = jnp.dot(patches, kernel.reshape(-1, self.features).astype(patches.dtype))
        if self.use_bias:
            y = y + logical_param(self, "bias", (self.features,), ("embed",), nn.initializers.zeros).astype(y.dtype)
        return y


class PatchEmbed(nn.Module):
    """diffusers `CogVideoXPatchEmbed`: patch and text projections plus the joint position table."""

    cfg: CogVideoXTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, latents, text, table, mode):
        cfg = self.cfg
        pt, p, _ = cfg.patch
        c = latents.shape[1]
        if cfg.patch_size_t is None:
            proj = _PatchProjection(cfg.inner_dim, (p, p, c, cfg.inner_dim), cfg.patch_bias, name="proj")
        else:  # diffusers' 1.5 Linear always has a bias (`patch_bias` only concerns the Conv2d)
            proj = _PatchProjection(cfg.inner_dim, (c * pt * p * p, cfg.inner_dim), True, name="proj")
        # 1.0: a Conv2d per frame, features (ph, pw, C); 1.5: diffusers' unfold, (C, pt, ph, pw)
        tokens = patchify(latents.astype(self.dtype), cfg.patch, channels_first=cfg.patch_size_t is not None)
        video = proj(tokens).astype(jnp.float32)
        text = Dense(cfg.inner_dim, axes=(None, "embed"), dtype=jnp.float32, name="text_proj")(text)
        if cfg.use_learned_positional_embeddings:  # declared whenever the checkpoint has it
            n = cfg.sample_latent_frames * (cfg.sample_height // p) * (cfg.sample_width // p)
            learned = logical_param(self, "pos_embedding", (1, cfg.max_text_seq_length + n, cfg.inner_dim),
                                    (None, None, "embed"))
            if mode == LEARNED:
                t = text.shape[1]
                text = text + learned[:, :t].astype(jnp.float32)
                video = video + learned[:, t:].astype(jnp.float32)
        if mode == SINCOS:  # text positions of the sincos table are zeros
            video = video + table[None]
        return video, text


class Embedder(nn.Module):
    """Everything before the blocks; its params are `patch_embed`, `time_embedding`, `ofs_embedding`."""

    cfg: CogVideoXTransformerConfig
    dtype: Any = jnp.float32
    residual_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, latents, timestep, text, ofs=None):
        cfg = self.cfg
        f, h, w = latents.shape[2:]
        mode = position_mode(cfg, f, h, w)
        table = jnp.asarray(sincos_table(cfg, f, h, w)) if mode == SINCOS else None

        def sinusoid(t, dim):  # diffusers `Timesteps`
            return timestep_sinusoid(t, dim, flip_sin_to_cos=cfg.flip_sin_to_cos, downscale_freq_shift=cfg.freq_shift)

        temb = MLPEmbedder(cfg.time_embed_dim, dtype=jnp.float32, name="time_embedding")(sinusoid(timestep, cfg.inner_dim))
        if cfg.ofs_embed_dim:
            ofs_emb = MLPEmbedder(cfg.ofs_embed_dim, dtype=jnp.float32, name="ofs_embedding")
            temb = temb + ofs_emb(sinusoid(ofs, cfg.ofs_embed_dim))  # [1 or B, D]: one ofs for the batch
        video, text = PatchEmbed(cfg, self.dtype, name="patch_embed")(latents, text.astype(jnp.float32), table, mode)
        video = constrain(video.astype(self.residual_dtype), VIDEO_AXES)
        return video, constrain(text, TEXT_AXES), temb


# ---------------------------------------------------------------------------------------------
# The block


class AdaNormZero(nn.Module):
    """diffusers `CogVideoXLayerNormZero`: one LayerNorm, (shift, scale, gate) per stream.

    `linear_video` / `linear_text` are the two halves of diffusers' `linear` (its output chunks
    0-2 and 3-5). Returns the modulated streams (fp32) and the two gates `[B, 1, D]`.
    """

    cfg: CogVideoXTransformerConfig

    @nn.compact
    def __call__(self, video, text, temb):
        cfg = self.cfg
        act = nn.silu(temb)

        def half(name):  # (shift, scale, gate) of one stream
            return Dense(3 * cfg.inner_dim, axes=(None, None), dtype=jnp.float32, name=name)(act)

        shift, scale, gate = jnp.split(half("linear_video")[:, None], 3, axis=-1)
        c_shift, c_scale, c_gate = jnp.split(half("linear_text")[:, None], 3, axis=-1)
        norm = LayerNorm(eps=cfg.norm_eps, name="norm")  # shared by both streams
        video = modulate(norm(video.astype(jnp.float32)), shift, scale)
        text = modulate(norm(text.astype(jnp.float32)), c_shift, c_scale)
        return video, text, gate, c_gate


class JointAttention(nn.Module):
    """diffusers `Attention` with `CogVideoXAttnProcessor2_0`: text and video tokens through the
    same projections and per-head LayerNorms, RoPE on the video tokens, one softmax over both."""

    cfg: CogVideoXTransformerConfig

    @nn.compact
    def __call__(self, video: jax.Array, text: jax.Array, ctx: Context):
        cfg = self.cfg
        heads, dim = cfg.num_attention_heads, cfg.inner_dim
        to_q, to_k, to_v = (Dense(dim, axes=("embed", "heads"), use_bias=cfg.attention_bias, name=n)
                            for n in ("to_q", "to_k", "to_v"))
        norm_q, norm_k = LayerNorm(eps=1e-6, name="norm_q"), LayerNorm(eps=1e-6, name="norm_k")

        def project(x):  # [B, S, D] -> q, k, v [B, S, H, Dh]
            return norm_q(split_heads(to_q(x), heads)), norm_k(split_heads(to_k(x), heads)), split_heads(to_v(x), heads)

        q, k, v = project(video)
        if ctx.rope_cos is not None:
            q, k = apply_rope(q, ctx.rope_cos, ctx.rope_sin), apply_rope(k, ctx.rope_cos, ctx.rope_sin)
        q_txt, k_txt, v_txt = project(text)
        out, out_txt = joint_attention(q, k, v, q_txt, k_txt, v_txt)  # no text mask: the reference has none
        to_out = Dense(dim, axes=("heads", "embed"), name="to_out_0")
        return to_out(out.reshape(*video.shape[:-1], dim)), to_out(out_txt.reshape(*text.shape[:-1], dim))


class CogVideoXBlock(nn.Module):
    """diffusers `CogVideoXBlock` on a `JointStream`; residuals accumulate in fp32."""

    cfg: CogVideoXTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: JointStream, ctx: Context) -> JointStream:
        cfg = self.cfg
        video, text = hidden.video.astype(jnp.float32), hidden.text.astype(jnp.float32)

        # 1. Joint attention on the AdaLN-modulated streams.
        x, x_txt, gate, c_gate = AdaNormZero(cfg, name="norm1")(video, text, ctx.temb)
        out, out_txt = JointAttention(cfg, name="attn1")(x.astype(self.dtype), x_txt.astype(self.dtype), ctx)
        video = video + gate * out.astype(jnp.float32)
        text = text + c_gate * out_txt.astype(jnp.float32)

        # 2. One feed-forward for both streams (diffusers runs it on their concatenation).
        x, x_txt, gate, c_gate = AdaNormZero(cfg, name="norm2")(video, text, ctx.temb)
        ff = FeedForward(cfg.inner_dim, cfg.ff_inner_dim, activation=gelu_tanh, name="ff")
        video = video + gate * ff(x.astype(self.dtype)).astype(jnp.float32)
        text = text + c_gate * ff(x_txt.astype(self.dtype)).astype(jnp.float32)
        return JointStream(constrain(video.astype(hidden.video.dtype), VIDEO_AXES), constrain(text, TEXT_AXES))


# ---------------------------------------------------------------------------------------------
# The head


class AdaLayerNorm(nn.Module):
    """diffusers `AdaLayerNorm(chunk_dim=1)` (`norm_out`): `linear` gives (shift, scale), then `norm`."""

    cfg: CogVideoXTransformerConfig

    @nn.compact
    def __call__(self, x: jax.Array, temb: jax.Array) -> jax.Array:
        cfg = self.cfg
        mod = Dense(2 * cfg.inner_dim, axes=(None, None), dtype=jnp.float32, name="linear")(nn.silu(temb))
        shift, scale = jnp.split(mod[:, None], 2, axis=-1)
        return modulate(LayerNorm(eps=cfg.norm_eps, name="norm")(x), shift, scale)


class Head(nn.Module):
    """`norm_final`, `norm_out` and `proj_out` on the video tokens."""

    cfg: CogVideoXTransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, video: jax.Array, temb: jax.Array) -> jax.Array:
        cfg = self.cfg
        x = LayerNorm(eps=cfg.norm_eps, name="norm_final")(video.astype(jnp.float32))
        x = AdaLayerNorm(cfg, name="norm_out")(x, temb).astype(self.dtype)
        return Dense(math.prod(cfg.patch) * cfg.out_channels, axes=("embed", None), name="proj_out")(x)


# ---------------------------------------------------------------------------------------------
# The model


class CogVideoXTransformer(StackedTransformer):
    """The CogVideoX DiT in the `vidax.zoo.parts.dit.StackedDiT` shape.

    Args:
      cfg: `CogVideoXTransformerConfig.from_hf_config(config_json)`.
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of the video hidden state between blocks (the text one is fp32).
    """

    embed_modules = ("patch_embed", "time_embedding", "ofs_embedding")
    head_modules = ("norm_final", "norm_out", "proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input): the reference's time (+ ofs) embedding `emb`
    modulated_inputs = {"temb": lambda model, first, hidden, ctx: ctx.temb}

    def __init__(self, cfg: CogVideoXTransformerConfig, dtype: Any = jnp.float32, residual_dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.embedder = Embedder(cfg, dtype, residual_dtype)
        self.block = CogVideoXBlock(cfg, dtype)
        self.head_module = Head(cfg, dtype)

    @classmethod
    def with_precision(cls, cfg: CogVideoXTransformerConfig, precision: Precision) -> "CogVideoXTransformer":
        """The model under a runtime `Precision` (its activations and residual dtypes)."""
        return cls(cfg, dtype=precision.activations, residual_dtype=precision.residual)

    def embed(self, params: Params, latents, timestep, text, ofs=None) -> tuple[JointStream, Context]:
        """Tokens and context from the diffusers forward's inputs, in vidax's latent layout.

        Args:
          params: the full parameter tree (only the embedders are read).
          latents: `[B, in_channels, F, H, W]` (diffusers' `[B, F, C, H, W]` transposed; I2V: noisy
            latents then image latents on the channel axis; 1.5: F a multiple of `patch_size_t`).
          timestep: `[B]` in the 0..1000 scale.
          text: T5 features `[B, T, text_embed_dim]`, T = 226 as the pipelines pad them (required
            when a position table is added: 2B and 5B-I2V).
          ofs: the 1.5 I2V ofs value, `[1]` or `[B]` (the pipeline passes `[2.0]`); None otherwise.
        """
        cfg = self.cfg
        grid = self._check_inputs(latents, timestep, text, ofs)
        f, h, w = latents.shape[2:]
        sub = self.subtree(params, self.embed_modules)
        video, text, temb = self.embedder.apply({"params": sub}, latents, timestep, text, ofs)
        cos = sin = None
        if cfg.use_rotary_positional_embeddings:
            cos, sin = (jnp.asarray(t) for t in rotary_tables(cfg, f, h, w))
        return JointStream(video, text), Context(temb, cos, sin, grid)

    def _check_inputs(self, latents, timestep, text, ofs) -> tuple[int, int, int]:
        """The post-patch grid; one clear error for inputs the reference would reject."""
        cfg = self.cfg
        if latents.ndim != 5 or latents.shape[1] != cfg.in_channels:
            raise ValueError(f"CogVideoX transformer takes latents [B, {cfg.in_channels}, F, H, W], got {latents.shape}")
        b, _, f, h, w = latents.shape
        pt, p, _ = cfg.patch
        if h % p or w % p or f % pt:
            raise ValueError(f"latent size (F, H, W) = {(f, h, w)} is not a multiple of the patch {cfg.patch}")
        if timestep.shape != (b,):
            raise ValueError(f"timestep must be [{b}], got {timestep.shape}")
        if text.ndim != 3 or text.shape[0] != b or text.shape[-1] != cfg.text_embed_dim:
            raise ValueError(f"text embeddings must be [{b}, T, {cfg.text_embed_dim}], got {text.shape}")
        mode = position_mode(cfg, f, h, w)
        if mode is not None and text.shape[1] != cfg.max_text_seq_length:
            raise ValueError(f"this CogVideoX model adds a position table over {cfg.max_text_seq_length} text tokens "
                             f"then the video: pass exactly {cfg.max_text_seq_length} text tokens, got {text.shape[1]}")
        if cfg.ofs_embed_dim and (ofs is None or ofs.shape not in ((1,), (b,))):
            raise ValueError(f"this CogVideoX model (1.5 I2V) takes ofs [1] or [{b}], got "
                             f"{None if ofs is None else ofs.shape}")
        return (f // pt, h // p, w // p)

    def head(self, params: Params, hidden: JointStream, ctx: Context) -> jax.Array:
        """Final norms, projection and unpatchify to `[B, out_channels, F, H, W]`."""
        cfg = self.cfg
        out = self.head_module.apply({"params": self.subtree(params, self.head_modules)}, hidden.video, ctx.temb)
        out = constrain(out, ("batch", None, None))  # sequence parallel gathers here
        return unpatchify(out, ctx.grid, cfg.patch, cfg.out_channels, channels_first=True)

    def head_inputs(self, hidden: JointStream, ctx: Context) -> tuple:
        return hidden.video, ctx.temb

    def dummy_inputs(self, batch: int = 1) -> tuple:
        """Smallest valid inputs for `init` / `eval_shape` (the learned table's own latent size)."""
        cfg = self.cfg
        pt, p, _ = cfg.patch
        h, w = (cfg.sample_height, cfg.sample_width) if cfg.use_learned_positional_embeddings else (p, p)
        text = cfg.max_text_seq_length if cfg.has_positional_table else 1
        f32 = jnp.float32
        return (
            jnp.zeros((batch, cfg.in_channels, pt, h, w), f32),
            jnp.zeros((batch,), f32),
            jnp.zeros((batch, text, cfg.text_embed_dim), f32),
            jnp.zeros((1,), f32) if cfg.ofs_embed_dim else None,
        )

