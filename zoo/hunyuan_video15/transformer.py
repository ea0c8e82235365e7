"""HunyuanVideo-1.5 diffusion transformer (follows diffusers `HunyuanVideo15Transformer3DModel`).

Split per `vidax.zoo.dit`: `embed` builds the video tokens, the joint text tokens (token refiner on
the Qwen2.5-VL features, ByT5 projection, SigLIP image tokens, each tagged by the
conditioning-type embedding), the timestep embedding and the RoPE tables; `block` is one
dual-stream block whose hidden state is the pair `DualStream(video, text)`; `head` is the final
AdaLN and the unpatchify. Module names mirror diffusers' so that the conversion specs stay short.
"""

from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vidax.zoo.attention import attention, joint_attention
from vidax.zoo.dit import Params, StackedTransformer
from vidax.zoo.hunyuan_video15.config import TransformerConfig
from vidax.zoo.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    Linear,
    MLPEmbedder,
    PatchEmbed,
    RMSNorm,
    gelu_exact,
    logical_param,
    modulate,
    split_heads,
    timestep_sinusoid,
    unpatchify,
)
from vidax.zoo.rope import rotate_interleaved as apply_rope
from vidax.zoo.sharding import constrain

# diffusers' `cond_type_embed` rows: which source a joint text token came from.
COND_MLLM, COND_BYT5, COND_IMAGE = 0, 1, 2

# Sequence parallel splits the video tokens and never the (short, replicated) joint text tokens.
VIDEO_AXES = ("batch", "seq", "act_embed")
TEXT_AXES = ("batch", "text_seq", "act_embed")


@struct.dataclass
class DualStream:
    """The hidden state between dual-stream blocks: video tokens and joint text tokens."""

    video: jax.Array  # [B, S, D], sequence-split under sequence parallel (VIDEO_AXES)
    text: jax.Array  # [B, T, D], whole on every device (TEXT_AXES); the block pins both parts itself


@struct.dataclass
class Context:
    """What every dual-stream block needs besides `(video, text)`."""

    temb: jax.Array  # [B, D] timestep embedding
    text_mask: jax.Array  # [B, T] bool, valid joint text tokens first
    rope_cos: jax.Array  # [S, head_dim]
    rope_sin: jax.Array  # [S, head_dim]
    grid: tuple[int, int, int] = struct.field(pytree_node=False, default=(0, 0, 0))  # post-patch (F, H, W)


# ---------------------------------------------------------------------------------------------
# Small pieces


def rope_tables(cfg: TransformerConfig, frames: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin `[F*H*W, head_dim]` per token (t, h, w order), pairs interleaved (diffusers `use_real`)."""
    sizes = (frames // cfg.patch_size_t, height // cfg.patch_size, width // cfg.patch_size)
    grid = np.meshgrid(*[np.arange(n, dtype=np.float32) for n in sizes], indexing="ij")
    cos, sin = [], []
    for axis_dim, pos in zip(cfg.rope_axes_dim, grid):
        inv = 1.0 / (cfg.rope_theta ** (np.arange(0, axis_dim, 2, dtype=np.float32) / axis_dim))
        angles = np.outer(pos.reshape(-1), inv).astype(np.float32)  # [S, axis_dim/2]
        cos.append(np.repeat(np.cos(angles), 2, axis=1))
        sin.append(np.repeat(np.sin(angles), 2, axis=1))
    return np.concatenate(cos, axis=1), np.concatenate(sin, axis=1)


class TimeEmbedding(nn.Module):
    """diffusers `HunyuanVideo15TimeEmbedding`; the meanflow variant adds an embedding of `timestep_r`."""

    features: int
    use_meanflow: bool = False

    @nn.compact
    def __call__(self, timestep: jax.Array, timestep_r: jax.Array | None = None) -> jax.Array:
        temb = MLPEmbedder(self.features, name="timestep_embedder")(timestep_sinusoid(timestep, 256))
        if self.use_meanflow:
            r = timestep if timestep_r is None else timestep_r
            embedder_r = MLPEmbedder(self.features, name="timestep_embedder_r")
            if timestep_r is not None:
                temb = temb + embedder_r(timestep_sinusoid(r, 256))
            else:  # still create the params so that `init` matches the checkpoint
                embedder_r(timestep_sinusoid(r, 256))
        return temb


# ---------------------------------------------------------------------------------------------
# Text conditioning: token refiner, ByT5 projection, image projection


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

    cfg: TransformerConfig

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

    cfg: TransformerConfig

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


class _TimeTextEmbed(nn.Module):
    """diffusers `CombinedTimestepTextProjEmbeddings`."""

    features: int

    @nn.compact
    def __call__(self, timestep: jax.Array, pooled: jax.Array) -> jax.Array:
        temb = MLPEmbedder(self.features, name="timestep_embedder")(timestep_sinusoid(timestep, 256).astype(pooled.dtype))
        return temb + MLPEmbedder(self.features, name="text_embedder")(pooled)


class _RefinerStack(nn.Module):
    cfg: TransformerConfig

    @nn.compact
    def __call__(self, x, temb, mask):
        for i in range(self.cfg.num_refiner_layers):
            x = RefinerBlock(self.cfg, name=f"refiner_blocks_{i}")(x, temb, mask)
        return x


class ByT5Projection(nn.Module):
    """diffusers `HunyuanVideo15ByT5TextProjection`."""

    hidden: int
    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = LayerNorm(eps=1e-5, name="norm")(x)
        x = gelu_exact(Dense(self.hidden, axes=(None, "mlp"), name="linear_1")(x))
        x = gelu_exact(Dense(self.hidden, axes=("mlp", None), name="linear_2")(x))
        return Dense(self.features, axes=(None, "embed"), name="linear_3")(x)


class ImageProjection(nn.Module):
    """diffusers `HunyuanVideo15ImageProjection` (SigLIP tokens into the model width)."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = LayerNorm(eps=1e-5, name="norm_in")(x)
        x = gelu_exact(Dense(x.shape[-1], axes=(None, None), name="linear_1")(x))
        x = Dense(self.features, axes=(None, "embed"), name="linear_2")(x)
        return LayerNorm(eps=1e-5, name="norm_out")(x)


def valid_tokens_first(tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Move each row's valid tokens to the front, order kept (diffusers' per-sample reorder)."""
    order = jnp.argsort(~mask, axis=1, stable=True)  # [B, T]
    return jnp.take_along_axis(tokens, order[..., None], axis=1), jnp.take_along_axis(mask, order, axis=1)


# ---------------------------------------------------------------------------------------------
# Embed / block / head


class Embedder(nn.Module):
    """Everything before the dual-stream blocks; param names are diffusers' top-level modules."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, latents, timestep, text, text_mask, text_2, text_mask_2, image_embeds, timestep_r=None):
        cfg = self.cfg
        temb = TimeEmbedding(cfg.inner_dim, cfg.use_meanflow, name="time_embed")(timestep, timestep_r)
        video = XEmbedder(cfg, name="x_embedder")(latents)
        cond_type = _CondTypeEmbed(cfg.inner_dim, name="cond_type_embed")()

        # 1. Qwen2.5-VL tokens through the refiner, ByT5 tokens through their projection.
        mllm = TokenRefiner(cfg, name="context_embedder")(text, timestep, text_mask) + cond_type[COND_MLLM]
        byt5 = ByT5Projection(cfg.byt5_hidden, cfg.inner_dim, name="context_embedder_2")(text_2)
        byt5 = byt5 + cond_type[COND_BYT5]

        # 2. SigLIP tokens; all-zero image embeds mean text-to-video: zeroed and masked out.
        image = ImageProjection(cfg.inner_dim, name="image_embedder")(image_embeds)
        is_t2v = jnp.all(image_embeds == 0)
        image = jnp.where(is_t2v, 0.0, image).astype(image.dtype) + cond_type[COND_IMAGE]
        image_mask = jnp.broadcast_to(~is_t2v, image.shape[:2])

        # 3. One joint text sequence [image, byt5, mllm], valid tokens first; invalid text zeroed.
        text_mask, text_mask_2 = text_mask.astype(bool), text_mask_2.astype(bool)
        mllm = jnp.where(text_mask[..., None], mllm, 0)
        byt5 = jnp.where(text_mask_2[..., None], byt5, 0)
        joint = jnp.concatenate([image, byt5, mllm], axis=1).astype(video.dtype)
        joint_mask = jnp.concatenate([image_mask, text_mask_2, text_mask], axis=1)
        joint, joint_mask = valid_tokens_first(joint, joint_mask)
        return constrain(video, VIDEO_AXES), constrain(joint, TEXT_AXES), joint_mask, temb


class XEmbedder(nn.Module):
    """diffusers `HunyuanVideo15PatchEmbed` (and 1.0's `HunyuanVideoPatchEmbed`): a strided Conv3d one
    level down, as `proj`."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        return PatchEmbed(cfg.inner_dim, (cfg.patch_size_t, cfg.patch_size, cfg.patch_size), name="proj")(x)


class _CondTypeEmbed(nn.Module):
    """diffusers `cond_type_embed` (`nn.Embedding(3, D)`): rows COND_MLLM, COND_BYT5, COND_IMAGE."""

    features: int

    @nn.compact
    def __call__(self):
        return logical_param(self, "embedding", (3, self.features), ("vocab", "embed"))


class JointAttention(nn.Module):
    """diffusers `Attention` with `HunyuanVideo15AttnProcessor2_0`: video and text share one softmax."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, video, text, ctx: Context):
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

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, hidden: DualStream, ctx: Context) -> DualStream:
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

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, video: jax.Array, temb: jax.Array) -> jax.Array:
        cfg = self.cfg
        scale, shift = _AdaNormOut(cfg.inner_dim, name="norm_out")(temb)
        scale, shift = scale.astype(video.dtype), shift.astype(video.dtype)
        video = modulate(LayerNorm(eps=1e-6, use_scale=False, use_bias=False)(video), shift[:, None], scale[:, None])
        out = cfg.patch_size_t * cfg.patch_size**2 * cfg.out_channels
        return Dense(out, axes=("embed", None), name="proj_out")(video)


# ---------------------------------------------------------------------------------------------
# The model


class DualStreamTransformer(StackedTransformer):
    """What both HunyuanVideo DiTs (1.0 and 1.5) do around their blocks on a `DualStream`: the RoPE
    tables and post-patch grid of the latents, and the head on the video stream."""

    head_modules = ("norm_out", "proj_out")

    def positions(self, latents: jax.Array) -> tuple[jax.Array, jax.Array, tuple[int, int, int]]:
        """RoPE cos/sin `[S, head_dim]` and the post-patch grid (F, H, W) of `[B, C, F, H, W]` latents."""
        cfg = self.cfg
        f, h, w = latents.shape[2:]
        cos, sin = rope_tables(cfg, f, h, w)
        return jnp.asarray(cos), jnp.asarray(sin), (f // cfg.patch_size_t, h // cfg.patch_size, w // cfg.patch_size)

    def head(self, params: Params, hidden: DualStream, ctx: Context) -> jax.Array:
        """Final AdaLN, projection and unpatchify to `[B, out_channels, F, H, W]`."""
        cfg = self.cfg
        sub = self.subtree(params, self.head_modules)
        out = self.head_module.apply({"params": sub}, hidden.video, ctx.temb)
        out = constrain(out, ("batch", None, None))  # sequence parallel gathers here
        patch = (cfg.patch_size_t, cfg.patch_size, cfg.patch_size)
        return unpatchify(out, ctx.grid, patch, cfg.out_channels, channels_first=True)

    def head_inputs(self, hidden: DualStream, ctx: Context) -> tuple:
        return hidden.video, ctx.temb


class HunyuanVideo15Transformer(DualStreamTransformer):
    """HunyuanVideo-1.5 DiT in the `vidax.zoo.dit.StackedDiT` shape.

    Args:
        cfg: the transformer config (`TransformerConfig.from_hf_config(config_json)`).
        dtype: the weights' dtype, which the DiT computes in (bf16 as shipped; fp32 for parity).
    """

    def __init__(self, cfg: TransformerConfig, dtype: str = "float32"):
        self.cfg = cfg
        self.dtype = dtype
        self.embedder = Embedder(cfg)
        self.block = DualStreamBlock(cfg)
        self.head_module = Head(cfg)

    embed_modules = ("time_embed", "x_embedder", "cond_type_embed", "context_embedder", "context_embedder_2",
                     "image_embedder")

    def embed(
        self,
        params: Params,
        latents: jax.Array,
        timestep: jax.Array,
        text: jax.Array,
        text_mask: jax.Array,
        text_2: jax.Array,
        text_mask_2: jax.Array,
        image_embeds: jax.Array,
        timestep_r: jax.Array | None = None,
    ) -> tuple[DualStream, Context]:
        """Tokens and context from the diffusers forward's inputs.

        Args:
            params: the full parameter tree (only the embedders are read).
            latents: `[B, in_channels, F, H, W]` (I2V: latent, condition latent and mask, concatenated).
            timestep: `[B]` in the scheduler's 0..1000 scale.
            text: Qwen2.5-VL features `[B, T1, text_embed_dim]`; text_mask `[B, T1]`.
            text_2: ByT5 features `[B, T2, text_embed_2_dim]`; text_mask_2 `[B, T2]`.
            image_embeds: SigLIP tokens `[B, N, image_embed_dim]`, all zeros for text-to-video.
            timestep_r: `[B]`, the meanflow (step-distilled) models' second time; ignored otherwise.
        """
        sub = self.subtree(params, self.embed_modules)
        video, joint, joint_mask, temb = self.embedder.apply(
            {"params": sub}, latents, timestep, text, text_mask, text_2, text_mask_2, image_embeds, timestep_r
        )
        cos, sin, grid = self.positions(latents)
        return DualStream(video, joint), Context(temb, joint_mask, cos, sin, grid)

    def dummy_inputs(self, batch: int = 1) -> tuple:
        return _dummy_inputs(self.cfg, batch, 1, 2, 2)


def _dummy_inputs(cfg: TransformerConfig, batch: int, frames: int, size: int, text_len: int):
    f32 = jnp.float32
    return (
        jnp.zeros((batch, cfg.in_channels, frames * cfg.patch_size_t, size * cfg.patch_size, size * cfg.patch_size), f32),
        jnp.zeros((batch,), f32),
        jnp.zeros((batch, text_len, cfg.text_embed_dim), f32),
        jnp.ones((batch, text_len), bool),
        jnp.zeros((batch, text_len, cfg.text_embed_2_dim), f32),
        jnp.ones((batch, text_len), bool),
        jnp.zeros((batch, 1, cfg.image_embed_dim), f32),
        jnp.zeros((batch,), f32) if cfg.use_meanflow else None,
    )
