"""HunyuanVideo-1.5 diffusion transformer (follows diffusers `HunyuanVideo15Transformer3DModel`).

Split per `vidax.zoo.parts.dit`: `embed` builds the video tokens, the joint text tokens (token refiner on
the Qwen2.5-VL features, ByT5 projection, SigLIP image tokens, each tagged by the
conditioning-type embedding), the timestep embedding and the RoPE tables; `block` is one
dual-stream block whose hidden state is the pair `DualStream(video, text)`; `head` is the final
AdaLN and the unpatchify. Module names mirror diffusers' so that the conversion specs stay short.
"""

from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from vidax.zoo.parts.dit import Params
from vidax.zoo.parts.dual_stream import (
    TEXT_AXES,
    VIDEO_AXES,
    DualStream,
    DualStreamBlock,
    DualStreamTransformer,
    Head,
    TokenRefiner,
    XEmbedder,
)
from vidax.zoo.hunyuan_video15.config import TransformerConfig
from vidax.zoo.compute.layers import (
    Dense,
    LayerNorm,
    MLPEmbedder,
    gelu_exact,
    logical_param,
    timestep_sinusoid,
)
from vidax.zoo.compute.sharding import constrain

# diffusers' `cond_type_embed` rows: which source a joint text token came from.
COND_MLLM, COND_BYT5, COND_IMAGE = 0, 1, 2


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


class _CondTypeEmbed(nn.Module):
    """diffusers `cond_type_embed` (`nn.Embedding(3, D)`): rows COND_MLLM, COND_BYT5, COND_IMAGE."""

    features: int

    @nn.compact
    def __call__(self):
        return logical_param(self, "embedding", (3, self.features), ("vocab", "embed"))


# ---------------------------------------------------------------------------------------------
# The model


class HunyuanVideo15Transformer(DualStreamTransformer):
    """HunyuanVideo-1.5 DiT in the `vidax.zoo.parts.dit.StackedDiT` shape.

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
