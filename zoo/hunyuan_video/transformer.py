"""HunyuanVideo 1.0 diffusion transformer (follows diffusers `HunyuanVideoTransformer3DModel`).

Split per `vidax.zoo.parts.dit` into two block groups: 20 dual-stream blocks (`blocks`) and 40 single-stream
blocks (`single_blocks`). The hidden state is the pair `DualStream(video, text)` through both groups:
the single-stream blocks run one set of weights over the joint sequence [video; text], which is the
same computation as running it over each stream with one shared softmax (`joint_attention`), and
keeps the video tokens sequence-split and the text whole under sequence parallel.

What HunyuanVideo-1.5 already has with the same computation and parameter names is imported from
`vidax.zoo.hunyuan_video15.transformer`: the patch embedding, the token refiner, the joint attention,
the plain dual-stream block (T2V), and through `DualStreamTransformer` the RoPE tables and the output
head. What is this model's own: the condition embedding
(timestep + embedded guidance + pooled CLIP), the single-stream blocks, and the I2V "token_replace"
blocks, whose first-frame tokens are modulated by a timestep-0 embedding.

The single blocks' MLP is kept as `mlp_chunks` (4) column blocks of width D (`proj_mlp/chunk_c`,
`proj_out/chunk_c`) instead of diffusers' one `proj_mlp` [D, 4D]: the official checkpoint fuses
q, k, v and the MLP into one `linear1` [7D, D] that the spec can only cut into equal parts, and the
chunks are also exactly Megatron's column -> row split (each chunk column-parallel in, row-parallel out).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from vidax.zoo.compute.attention import joint_attention
from vidax.zoo.parts.dit import BlockGroup, Params
from vidax.zoo.hunyuan_video.config import TransformerConfig
from vidax.zoo.parts.dual_stream import (
    TEXT_AXES,
    VIDEO_AXES,
    DualStream,
    DualStreamBlock,
    DualStreamTransformer,
    Head,
    JointAttention,
    TokenRefiner,
    XEmbedder,
)
from vidax.zoo.compute.layers import (
    Dense,
    FeedForward,
    LayerNorm,
    Linear,
    MLPEmbedder,
    RMSNorm,
    gelu_tanh,
    logical_param,
    modulate,
    split_heads,
    timestep_sinusoid,
)
from vidax.zoo.parts.rope import rotate_interleaved as apply_rope
from vidax.zoo.compute.sharding import constrain


@struct.dataclass
class Context:
    """What every block needs besides `(video, text)`. The fields HunyuanVideo-1.5's blocks read
    (`temb`, `text_mask`, `rope_cos`, `rope_sin`) come first with the same meaning."""

    temb: jax.Array  # [B, D] timestep + guidance + pooled-text embedding
    text_mask: jax.Array  # [B, T] bool: the first `sum(encoder_attention_mask)` text tokens
    rope_cos: jax.Array  # [S, head_dim]
    rope_sin: jax.Array  # [S, head_dim]
    token_replace_emb: jax.Array | None = None  # [B, D] (I2V token_replace): timestep 0 + pooled text
    grid: tuple[int, int, int] = struct.field(pytree_node=False, default=(0, 0, 0))  # post-patch (F, H, W)

    @property
    def first_frame_tokens(self) -> int:
        return self.grid[1] * self.grid[2]


# ---------------------------------------------------------------------------------------------
# Embeddings


class ConditionEmbedding(nn.Module):
    """diffusers `HunyuanVideoConditionEmbedding`: `(temb, token_replace_emb or None)`."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, timestep, pooled, guidance):
        cfg, dim = self.cfg, self.cfg.inner_dim
        proj = lambda t: timestep_sinusoid(t, 256).astype(pooled.dtype)  # noqa: E731  diffusers casts to the text dtype
        time = MLPEmbedder(dim, name="timestep_embedder")
        text = MLPEmbedder(dim, name="text_embedder")(pooled)  # PixArtAlphaTextProjection, SiLU
        temb = time(proj(timestep)) + text
        if cfg.guidance_embeds:
            if guidance is None:
                raise ValueError("HunyuanVideo transformer: this checkpoint embeds guidance; pass `guidance` "
                                 "(guidance scale x 1000, as diffusers' pipeline does)")
            temb = temb + MLPEmbedder(dim, name="guidance_embedder")(proj(guidance))
        token_replace = time(proj(jnp.zeros_like(timestep))) + text if cfg.token_replace else None
        return temb, token_replace


class Embedder(nn.Module):
    """Everything before the blocks; param names are diffusers' top-level modules."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, latents, timestep, text, text_mask, pooled, guidance):
        cfg = self.cfg
        temb, token_replace = ConditionEmbedding(cfg, name="time_text_embed")(timestep, pooled, guidance)
        video = XEmbedder(cfg, name="x_embedder")(latents)
        text = TokenRefiner(cfg, name="context_embedder")(text, timestep, text_mask).astype(video.dtype)
        return constrain(video, VIDEO_AXES), constrain(text, TEXT_AXES), temb, token_replace


# ---------------------------------------------------------------------------------------------
# Blocks


def _first_frame(x: jax.Array, n: int) -> jax.Array:
    """`[1, S, 1]` bool: the first `n` (first latent frame's) tokens of a `[B, S, D]` video stream."""
    return (jnp.arange(x.shape[1]) < n)[None, :, None]


def _per_token(first: jax.Array | None, replaced: jax.Array, plain: jax.Array) -> jax.Array:
    """The token-replace value on first-frame tokens, the plain one elsewhere (select, no arithmetic)."""
    return plain if first is None else jnp.where(first, replaced, plain)


class TokenReplaceDualStreamBlock(nn.Module):
    """diffusers `HunyuanVideoTokenReplaceTransformerBlock`: `HunyuanVideoTransformerBlock` whose
    first-frame video tokens take their shift/scale/gate from `ctx.token_replace_emb`."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, hidden: DualStream, ctx: Context) -> DualStream:
        cfg = self.cfg
        video, text = hidden.video, hidden.text
        ada = Linear(6 * cfg.inner_dim, child="linear", name="norm1")  # one weight, two embeddings
        mod = jnp.split(ada(nn.silu(ctx.temb)).astype(video.dtype)[:, None], 6, axis=-1)
        tr_mod = jnp.split(ada(nn.silu(ctx.token_replace_emb)).astype(video.dtype)[:, None], 6, axis=-1)
        c_mod = Linear(6 * cfg.inner_dim, child="linear", name="norm1_context")(nn.silu(ctx.temb)).astype(text.dtype)
        c_shift, c_scale, c_gate, c_shift_mlp, c_scale_mlp, c_gate_mlp = jnp.split(c_mod[:, None], 6, axis=-1)
        first = _first_frame(video, ctx.first_frame_tokens)
        pick = lambda i: _per_token(first, tr_mod[i], mod[i])  # noqa: E731
        norm = LayerNorm(eps=1e-6, use_scale=False, use_bias=False)

        # 1. Joint attention on the AdaLN-modulated streams (first-frame tokens: their own shift/scale).
        normed = _per_token(first, modulate(norm(video), tr_mod[0], tr_mod[1]), modulate(norm(video), mod[0], mod[1]))
        attn_out, text_attn_out = JointAttention(cfg, name="attn")(normed, modulate(norm(text), c_shift, c_scale), ctx)
        video = video + attn_out * pick(2)
        text = text + text_attn_out * c_gate

        # 2. Feed-forward per stream.
        normed = _per_token(first, modulate(norm(video), tr_mod[3], tr_mod[4]), modulate(norm(video), mod[3], mod[4]))
        video = video + FeedForward(cfg.inner_dim, cfg.mlp_dim, name="ff")(normed) * pick(5)
        ff_text = FeedForward(cfg.inner_dim, cfg.mlp_dim, name="ff_context")
        text = text + c_gate_mlp * ff_text(modulate(norm(text), c_shift_mlp, c_scale_mlp))
        return DualStream(constrain(video, VIDEO_AXES), constrain(text, TEXT_AXES))


class _SingleAttention(nn.Module):
    """diffusers `Attention(pre_only=True)` with `HunyuanVideoAttnProcessor2_0`: one q/k/v projection
    over the joint sequence, RoPE on the video part only, no output projection."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, video, text, ctx: Context):
        cfg = self.cfg
        heads, dim = cfg.num_attention_heads, cfg.inner_dim
        proj = {n: Dense(dim, axes=("embed", "heads"), name=n) for n in ("to_q", "to_k", "to_v")}
        norm_q, norm_k = RMSNorm(eps=1e-6, name="norm_q"), RMSNorm(eps=1e-6, name="norm_k")

        def qkv(x):
            q, k, v = (split_heads(proj[n](x), heads) for n in ("to_q", "to_k", "to_v"))
            return norm_q(q), norm_k(k), v

        q, k, v = qkv(video)
        q, k = apply_rope(q, ctx.rope_cos, ctx.rope_sin), apply_rope(k, ctx.rope_cos, ctx.rope_sin)
        out, out_text = joint_attention(q, k, v, *qkv(text), txt_mask=ctx.text_mask)
        return out.reshape(*video.shape[:-1], -1), out_text.reshape(*text.shape[:-1], -1)  # [B, S, H*Dh]


class _ChunkedMLP(nn.Module):
    """`proj_mlp` as `chunks` column blocks `chunk_c` [D, D] (diffusers' `proj_mlp` [D, 4D] cut by columns),
    before its activation (`_SingleProjOut` applies it with its product)."""

    features: int
    chunks: int

    @nn.compact
    def __call__(self, x):
        return [Dense(self.features, axes=("embed", "mlp"), name=f"chunk_{c}")(x) for c in range(self.chunks)]


class _SingleProjOut(nn.Module):
    """diffusers `proj_out` on `cat([attn, mlp])`, kept as its row blocks: `attn`, `chunk_c`; one bias
    added after the sum (the row-parallel reduction)."""

    features: int

    @nn.compact
    def __call__(self, attn, mlp):
        y = Dense(self.features, axes=("heads", "embed"), use_bias=False, name="attn")(attn)
        for c, h in enumerate(mlp):
            y = y + Dense(self.features, axes=("mlp", "embed"), use_bias=False, input_activation=gelu_tanh,
                          name=f"chunk_{c}")(h)
        bias = logical_param(self, "bias", (self.features,), ("embed",), nn.initializers.zeros)
        return y + bias.astype(y.dtype)


class SingleStreamBlock(nn.Module):
    """diffusers `HunyuanVideoSingleTransformerBlock` (and, with `cfg.token_replace`,
    `HunyuanVideoTokenReplaceSingleTransformerBlock`) on a `DualStream`."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, hidden: DualStream, ctx: Context) -> DualStream:
        cfg = self.cfg
        video, text = hidden.video, hidden.text
        ada = Linear(3 * cfg.inner_dim, child="linear", name="norm")
        shift, scale, gate = jnp.split(ada(nn.silu(ctx.temb)).astype(video.dtype)[:, None], 3, axis=-1)
        first = None
        if cfg.token_replace:
            tr_shift, tr_scale, tr_gate = jnp.split(ada(nn.silu(ctx.token_replace_emb)).astype(video.dtype)[:, None], 3, -1)
            first = _first_frame(video, ctx.first_frame_tokens)
        norm = LayerNorm(eps=1e-6, use_scale=False, use_bias=False)

        # 1. AdaLN on both streams (first-frame video tokens: their own shift/scale).
        normed_text = modulate(norm(text), shift, scale)
        normed = modulate(norm(video), shift, scale)
        if first is not None:
            normed = jnp.where(first, modulate(norm(video), tr_shift, tr_scale), normed)

        # 2. Attention over [video; text] and the MLP, one set of weights for both streams.
        attn, attn_text = _SingleAttention(cfg, name="attn")(normed, normed_text, ctx)
        mlp = _ChunkedMLP(cfg.inner_dim, cfg.mlp_chunks, name="proj_mlp")
        proj_out = _SingleProjOut(cfg.inner_dim, name="proj_out")
        out, out_text = proj_out(attn, mlp(normed)), proj_out(attn_text, mlp(normed_text))

        # 3. Gated residual.
        video = video + out * (gate if first is None else jnp.where(first, tr_gate, gate))
        text = text + out_text * gate
        return DualStream(constrain(video, VIDEO_AXES), constrain(text, TEXT_AXES))


# ---------------------------------------------------------------------------------------------
# The model


class HunyuanVideoTransformer(DualStreamTransformer):
    """HunyuanVideo 1.0 DiT in the `vidax.zoo.parts.dit.StackedDiT` shape (two block groups).

    Args:
        cfg: the transformer config (`TransformerConfig.from_hf_config(config_json)`).
        dtype: the weights' dtype, which the DiT computes in (bf16 as shipped; fp32 for parity).
    """

    embed_modules = ("time_text_embed", "x_embedder", "context_embedder")

    def __init__(self, cfg: TransformerConfig, dtype: str = "float32"):
        self.cfg = cfg
        self.dtype = dtype
        self.embedder = Embedder(cfg)
        self.dual_block = TokenReplaceDualStreamBlock(cfg) if cfg.token_replace else DualStreamBlock(cfg)
        self.single_block = SingleStreamBlock(cfg)
        self.head_module = Head(cfg)

    @property
    def block_groups(self) -> tuple[BlockGroup, ...]:
        return BlockGroup("blocks", self.dual_block), BlockGroup("single_blocks", self.single_block)

    def num_blocks(self, group: str) -> int:
        return self.cfg.num_layers if group == "blocks" else self.cfg.num_single_layers

    def embed(
        self,
        params: Params,
        latents: jax.Array,
        timestep: jax.Array,
        text: jax.Array,
        text_mask: jax.Array,
        pooled: jax.Array,
        guidance: jax.Array | None = None,
    ) -> tuple[DualStream, Context]:
        """Tokens and context from the diffusers forward's inputs.

        Args:
            params: the full parameter tree (only the embedders are read).
            latents: `[B, in_channels, F, H, W]` (I2V token_replace: frame 0 is the image latent).
            timestep: `[B]` in the scheduler's 0..1000 scale.
            text: Llama (I2V: Llava) features `[B, T, text_embed_dim]`; text_mask `[B, T]`, valid first.
            pooled: CLIP-L pooled text embedding `[B, pooled_projection_dim]`.
            guidance: `[B]` embedded guidance scale x 1000 (diffusers' pipeline multiplies); required
                when the checkpoint has a guidance embedder (all released ones do).
        """
        sub = self.subtree(params, self.embed_modules)
        video, joint, temb, token_replace = self.embedder.apply(
            {"params": sub}, latents, timestep, text, text_mask, pooled, guidance
        )
        cos, sin, grid = self.positions(latents)
        # diffusers masks the text keys past the *count* of valid tokens (its attention mask is a prefix).
        count = jnp.sum(text_mask.astype(jnp.int32), axis=1, keepdims=True)
        joint_mask = jnp.arange(text.shape[1])[None] < count
        return DualStream(video, joint), Context(temb, joint_mask, cos, sin, token_replace, grid)

    def dummy_inputs(self, batch: int = 1) -> tuple:
        cfg, f32 = self.cfg, jnp.float32
        return (
            jnp.zeros((batch, cfg.in_channels, cfg.patch_size_t, 2 * cfg.patch_size, 2 * cfg.patch_size), f32),
            jnp.zeros((batch,), f32),
            jnp.zeros((batch, 2, cfg.text_embed_dim), f32),
            jnp.ones((batch, 2), bool),
            jnp.zeros((batch, cfg.pooled_projection_dim), f32),
            jnp.full((batch,), 6000.0, f32) if cfg.guidance_embeds else None,
        )

