"""LTX-2.x joint audio+video diffusion transformer (follows diffusers `LTX2VideoTransformer3DModel`).

Split per `vidax.zoo.parts.dit`: `embed` projects the packed video and audio tokens, builds every AdaLN
modulation from the timesteps (video, audio, the audio<->video cross-attention tables and, for
LTX-2.3, the prompt modulation) and the caption projections (LTX-2.0); `block` is one
`LTX2VideoTransformerBlock` whose hidden state is `Streams(video, audio, layer)`; `head` is the two
final AdaLN + projections. Module names mirror diffusers' so the spec `ltx2/transformer` stays short.

Guidance passes are data, not code: every sample carries `stg_keep[layer]` (1 keeps the
self-attention of that block, 0 replaces it by its value projection: spatio-temporal guidance, only
where the config has `perturbed_attn`, as diffusers) and `cross_keep` (0 switches the a2v / v2a
cross-attention off: modality-isolation guidance). So the conditional, unconditional, STG and
modality passes of one step can share one batch and one compiled unit. The block reads its row of
`stg_keep` through the layer counter it carries in the hidden state.

Dtypes: `dtype` is the activations' (matmul inputs, attention), `residual_dtype` the two streams
between blocks (fp32 by default). Norms, AdaLN modulation and the time embeddings run in fp32.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from vidax.zoo.compute.attention import attention
from vidax.zoo.parts.dit import Params, StackedTransformer
from vidax.zoo.compute.layers import Dense, FeedForward, LayerNorm, MLPEmbedder, RMSNorm, gelu_tanh, logical_param
from vidax.zoo.compute.layers import modulate, split_heads, timestep_sinusoid
from vidax.zoo.ltx2.config import TransformerConfig
from vidax.zoo.ltx2.rope import RopeTables, apply_rope
from vidax.zoo.compute.runtime import Precision
from vidax.zoo.compute.sharding import TEXT_AXES, VIDEO_AXES, constrain

# Audio tokens (~126 for 5 s) stay whole under sequence parallel, as text does (`TEXT_AXES`).
AUDIO_AXES = ("batch", "audio_seq", "act_embed")
VIDEO_MOD_AXES = ("batch", "seq", None, "act_embed")  # per-token (I2V) modulation follows its tokens
AUDIO_MOD_AXES = ("batch", "audio_seq", None, "act_embed")


@struct.dataclass
class DiTInputs:
    """One DiT call's per-sample inputs; every leaf is batch-first (so `cfg_batch` can join two).

    `timestep` is diffusers' `timestep` (0..1000 scale, `[B]` or per video token `[B, S]` for I2V),
    `sigma` / `audio_sigma` its `sigma` / `audio_sigma` (the prompt AdaLN and, with
    `use_cross_timestep`, the cross-modal modulation read them).
    """

    video: jax.Array  # [B, S, in_channels] packed latents
    audio: jax.Array  # [B, L, audio_in_channels] packed audio latents
    text: jax.Array  # [B, T, caption_channels or inner_dim] video connector output
    audio_text: jax.Array  # [B, T, caption_channels or audio_inner_dim] audio connector output
    text_mask: jax.Array  # [B, T] bool, True = attend
    timestep: jax.Array  # [B] or [B, S]
    audio_timestep: jax.Array  # [B] or [B, L]
    sigma: jax.Array  # [B]
    audio_sigma: jax.Array  # [B]
    stg_keep: jax.Array  # [B, num_layers] fp32: 1 = plain self-attention, 0 = value pass-through (STG)
    cross_keep: jax.Array  # [B] fp32: 1 = a2v / v2a on, 0 = modalities isolated
    keyframes: jax.Array | None = None  # [B, S, 1] marker of single-pixel-frame tokens (keyframe models)

    @classmethod
    def make(cls, video, audio, text, audio_text, timestep, *, num_layers: int, text_mask=None, audio_timestep=None,
             sigma=None, audio_sigma=None, stg_keep=None, cross_keep=None, keyframes=None) -> "DiTInputs":
        """Defaults as diffusers fills them: audio timestep = timestep, sigma = timestep (`[B]`), audio
        sigma = sigma, a full mask, no STG, cross-modal attention on."""
        b = video.shape[0]
        f32 = jnp.float32
        if timestep.ndim == 1:
            sigma = timestep if sigma is None else sigma
            audio_timestep = timestep if audio_timestep is None else audio_timestep
        if sigma is None or audio_timestep is None:
            raise ValueError("a per-token video timestep needs an explicit `sigma` and `audio_timestep` "
                             "(diffusers' I2V pipeline passes the step's t for both)")
        return cls(
            video, audio, text, audio_text,
            jnp.ones(text.shape[:2], bool) if text_mask is None else text_mask.astype(bool),
            timestep.astype(f32), audio_timestep.astype(f32), sigma.astype(f32),
            (sigma if audio_sigma is None else audio_sigma).astype(f32),
            jnp.ones((b, num_layers), f32) if stg_keep is None else stg_keep.astype(f32),
            jnp.ones((b,), f32) if cross_keep is None else cross_keep.astype(f32),
            keyframes,
        )


@struct.dataclass
class Streams:
    """The hidden state between blocks."""

    video: jax.Array  # [B, S, D] sequence-split under sequence parallel
    audio: jax.Array  # [B, L, Da] whole on every device
    layer: jax.Array  # [] int32: index of the next block (reads its STG row)


@struct.dataclass
class Context:
    """What every block needs besides the streams (modulations before the per-block tables)."""

    temb: jax.Array  # [B, 1 or S, 6 or 9, D]
    temb_audio: jax.Array  # [B, 1 or L, 6 or 9, Da]
    ca_video: jax.Array  # [B, 1 or S, 4, D]: a2v scale, a2v shift, v2a scale, v2a shift
    ca_video_gate: jax.Array  # [B, 1 or S, 1, D]
    ca_audio: jax.Array  # [B, 1 or L, 4, Da]
    ca_audio_gate: jax.Array  # [B, 1 or L, 1, Da]
    prompt: jax.Array | None  # [B, 1, 2, D] prompt K/V AdaLN (LTX-2.3), or None
    prompt_audio: jax.Array | None
    text: jax.Array  # [B, T, D]
    audio_text: jax.Array  # [B, T, Da]
    text_mask: jax.Array  # [B, T]
    rope: RopeTables
    stg_keep: jax.Array  # [B, num_layers]
    cross_keep: jax.Array  # [B]
    embedded: jax.Array  # [B, 1 or S, D] the head's modulation
    embedded_audio: jax.Array  # [B, 1 or L, Da]


# ---------------------------------------------------------------------------------------------
# Embeddings


class AdaLayerNormSingle(nn.Module):
    """diffusers `LTX2AdaLayerNormSingle`: sinusoid(256) -> `emb.timestep_embedder` MLP -> `linear` (fp32)."""

    dim: int
    num_params: int

    @nn.compact
    def __call__(self, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        """`t` `[N]` -> (`[N, num_params * dim]` modulation, `[N, dim]` embedding)."""
        embedded = _TimestepEmbedding(self.dim, name="emb")(t)
        mod = Dense(self.num_params * self.dim, axes=("embed", None), dtype=jnp.float32, name="linear")(
            nn.silu(embedded))
        return mod, embedded


class _TimestepEmbedding(nn.Module):
    """diffusers `PixArtAlphaCombinedTimestepSizeEmbeddings` without size conditions."""

    dim: int

    @nn.compact
    def __call__(self, t):
        proj = timestep_sinusoid(t, 256)
        return MLPEmbedder(self.dim, dtype=jnp.float32, name="timestep_embedder")(proj)


class Embedder(nn.Module):
    """Everything before the blocks (params: `Transformer.embed_modules`)."""

    cfg: TransformerConfig
    use_cross_timestep: bool = True
    dtype: Any = jnp.float32
    residual_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: DiTInputs, rope: RopeTables | None = None):
        del rope  # the tables are host-built; `embed` passes them on
        cfg = self.cfg
        b = x.video.shape[0]
        ada = lambda dim, k, name: AdaLayerNormSingle(dim, k, name=name)  # noqa: E731

        # 1. Patchify projections (tokens are packed 1x1x1 patches) and keyframe markers.
        video = Dense(cfg.inner_dim, axes=(None, "embed"), name="proj_in")(x.video.astype(self.dtype))
        audio = Dense(cfg.audio_inner_dim, axes=(None, "embed"), name="audio_proj_in")(x.audio.astype(self.dtype))
        if cfg.use_keyframes_abs_pos_embedding:
            table = logical_param(self, "keyframes_abs_pos_embedding", (1, cfg.inner_dim), (None, "embed"))
            if x.keyframes is not None:
                video = video + (x.keyframes > 0).astype(video.dtype) * table.astype(video.dtype)

        # 2. Timestep embeddings and global modulations (flattened timesteps, as diffusers).
        def per_sample(t, dim, k, name):
            mod, emb = ada(dim, k, name)(t.reshape(-1))
            return mod.reshape(b, -1, k, dim), emb.reshape(b, -1, dim)

        temb, embedded = per_sample(x.timestep, cfg.inner_dim, cfg.video_mod_params, "time_embed")
        temb_audio, embedded_audio = per_sample(x.audio_timestep, cfg.audio_inner_dim, cfg.audio_mod_params,
                                                "audio_time_embed")
        prompt = prompt_audio = None
        if cfg.prompt_adaln:
            prompt, _ = per_sample(x.sigma, cfg.inner_dim, 2, "prompt_adaln")
            prompt_audio, _ = per_sample(x.audio_sigma, cfg.audio_inner_dim, 2, "audio_prompt_adaln")

        # 3. Cross-modal modulations: from the other modality's sigma (LTX-2.3+) or own timestep.
        gate_factor = cfg.cross_attn_timestep_scale_multiplier / cfg.timestep_scale_multiplier
        video_t = x.audio_sigma if self.use_cross_timestep else x.timestep
        audio_t = x.sigma if self.use_cross_timestep else x.audio_timestep
        ca_video, _ = per_sample(video_t, cfg.inner_dim, 4, "av_cross_attn_video_scale_shift")
        ca_video_gate, _ = per_sample(video_t * gate_factor, cfg.inner_dim, 1, "av_cross_attn_video_a2v_gate")
        ca_audio, _ = per_sample(audio_t, cfg.audio_inner_dim, 4, "av_cross_attn_audio_scale_shift")
        ca_audio_gate, _ = per_sample(audio_t * gate_factor, cfg.audio_inner_dim, 1, "av_cross_attn_audio_v2a_gate")

        # 4. Caption projections (LTX-2.0; later releases project inside the connectors).
        text, audio_text = x.text.astype(self.dtype), x.audio_text.astype(self.dtype)
        if cfg.use_prompt_embeddings:
            text = MLPEmbedder(cfg.inner_dim, activation=gelu_tanh, name="caption_projection")(text)
            audio_text = MLPEmbedder(cfg.audio_inner_dim, activation=gelu_tanh, name="audio_caption_projection")(
                audio_text)

        streams = Streams(constrain(video.astype(self.residual_dtype), VIDEO_AXES),
                          constrain(audio.astype(self.residual_dtype), AUDIO_AXES), jnp.zeros((), jnp.int32))
        mods = dict(temb=constrain(temb, VIDEO_MOD_AXES), temb_audio=constrain(temb_audio, AUDIO_MOD_AXES),
                    ca_video=constrain(ca_video, VIDEO_MOD_AXES), ca_video_gate=constrain(ca_video_gate, VIDEO_MOD_AXES),
                    ca_audio=ca_audio, ca_audio_gate=ca_audio_gate, prompt=prompt, prompt_audio=prompt_audio,
                    embedded=embedded, embedded_audio=embedded_audio)
        return streams, mods, constrain(text, TEXT_AXES), constrain(audio_text, TEXT_AXES)


# ---------------------------------------------------------------------------------------------
# The block


class LTX2Attention(nn.Module):
    """diffusers `LTX2Attention` with `LTX2AudioVideoAttnProcessor` / `LTX2PerturbedAttnProcessor`.

    q/k are RMS-normed across all heads, rotated (queries and keys may use different tables: a2v,
    v2a), attended through the shared entry point; per-head gates (LTX-2.3+) scale the result before
    `to_out`. `keep` `[B]` blends the output with the value projection (STG) where it is not 1.
    """

    heads: int
    head_dim: int
    out_dim: int
    gated: bool = False
    eps: float = 1e-6
    rope_type: str = "interleaved"

    @nn.compact
    def __call__(self, x, context=None, mask=None, q_rope=None, k_rope=None, keep=None):
        inner = self.heads * self.head_dim
        dense = lambda name: Dense(inner, axes=("embed", "heads"), name=name)  # noqa: E731
        source = x if context is None else context
        q = RMSNorm(self.eps, axis_name="heads", name="norm_q")(dense("to_q")(x))
        k = RMSNorm(self.eps, axis_name="heads", name="norm_k")(dense("to_k")(source))
        v = dense("to_v")(source)
        if q_rope is not None:
            k_rope = q_rope if k_rope is None else k_rope
            q, k = apply_rope(q, *q_rope, self.rope_type), apply_rope(k, *k_rope, self.rope_type)
        out = attention(split_heads(q, self.heads), split_heads(k, self.heads), split_heads(v, self.heads),
                        kv_mask=mask)
        out = out.reshape(*x.shape[:-1], inner)
        if keep is not None:  # STG: attention where keep == 1, the value projection where 0
            w = keep[:, None, None].astype(out.dtype)  # torch.lerp(v, out, w), both of its branches
            out = jnp.where(w < 0.5, v + w * (out - v), out - (out - v) * (1 - w))
        if self.gated:
            logits = Dense(self.heads, axes=("embed", "heads"), name="to_gate_logits")(x)
            gates = 2.0 * jax.nn.sigmoid(logits)  # [B, T, H]: zero logits keep the output
            out = (split_heads(out, self.heads) * gates[..., None]).reshape(out.shape)
        return Dense(self.out_dim, axes=("heads", "embed"), name="to_out_0")(out)


def _table(module: nn.Module, name: str, rows: int, dim: int) -> jax.Array:
    return logical_param(module, name, (rows, dim), (None, "embed")).astype(jnp.float32)


def _mod(table: jax.Array, temb: jax.Array) -> list[jax.Array]:
    """diffusers `get_mod_params`: per-block table + global modulation, one `[B, 1 or S, D]` per row."""
    values = table[None, None] + temb  # [B, 1 or S, K, D]
    return [values[:, :, i] for i in range(table.shape[0])]


class LTX2Block(nn.Module):
    """diffusers `LTX2VideoTransformerBlock`; both streams stay in `residual_dtype`."""

    cfg: TransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, streams: Streams, ctx: Context) -> Streams:
        cfg = self.cfg
        f32 = jnp.float32
        norm = RMSNorm(cfg.norm_eps, use_scale=False)  # every block norm is parameter-free
        video, audio = streams.video.astype(f32), streams.audio.astype(f32)
        d, da = cfg.inner_dim, cfg.audio_inner_dim
        attn = lambda heads, head_dim, out, gated, name: LTX2Attention(  # noqa: E731
            heads, head_dim, out, gated, cfg.norm_eps, cfg.rope_type, name=name)
        vheads, aheads = (cfg.num_attention_heads, cfg.attention_head_dim), (cfg.audio_num_attention_heads,
                                                                                cfg.audio_attention_head_dim)
        act = lambda x: x.astype(self.dtype)  # noqa: E731
        stg = jnp.take(ctx.stg_keep, streams.layer, axis=1) if cfg.perturbed_attn else None

        # 1. Self-attention of each stream (AdaLN-modulated), STG-perturbable.
        v_mod = _mod(_table(self, "scale_shift_table", cfg.video_mod_params, d), ctx.temb)
        a_mod = _mod(_table(self, "audio_scale_shift_table", cfg.audio_mod_params, da), ctx.temb_audio)
        shift, scale, gate = v_mod[:3]
        out = attn(*vheads, d, cfg.gated_attn, "attn1")(act(modulate(norm(video), shift, scale)),
                                                         q_rope=ctx.rope.video, keep=stg)
        video = video + out.astype(f32) * gate
        shift, scale, gate = a_mod[:3]
        out = attn(*aheads, da, cfg.audio_gated_attn, "audio_attn1")(act(modulate(norm(audio), shift, scale)),
                                                                       q_rope=ctx.rope.audio, keep=stg)
        audio = audio + out.astype(f32) * gate

        # 2. Cross-attention to the prompt (LTX-2.3+: queries and keys/values AdaLN-modulated too).
        text, audio_text = ctx.text, ctx.audio_text
        if cfg.prompt_modulation:
            text = self._modulated_prompt(text, "prompt_scale_shift_table", ctx.prompt, d)
            audio_text = self._modulated_prompt(audio_text, "audio_prompt_scale_shift_table", ctx.prompt_audio, da)
        x = norm(video)
        if cfg.cross_attn_mod:
            x = modulate(x, v_mod[6], v_mod[7])
        out = attn(*vheads, d, cfg.gated_attn, "attn2")(act(x), act(text), mask=ctx.text_mask).astype(f32)
        video = video + (out * v_mod[8] if cfg.cross_attn_mod else out)
        x = norm(audio)
        if cfg.audio_cross_attn_mod:
            x = modulate(x, a_mod[6], a_mod[7])
        out = attn(*aheads, da, cfg.audio_gated_attn, "audio_attn2")(act(x), act(audio_text),
                                                                       mask=ctx.text_mask).astype(f32)
        audio = audio + (out * a_mod[8] if cfg.audio_cross_attn_mod else out)

        # 3. Audio-to-video and video-to-audio cross-attention (both read the post-step-2 streams).
        v_table = _table(self, "video_a2v_cross_attn_scale_shift_table", 5, d)
        a_table = _table(self, "audio_a2v_cross_attn_scale_shift_table", 5, da)
        v_ca, (v_gate,) = _mod(v_table[:4], ctx.ca_video), _mod(v_table[4:], ctx.ca_video_gate)
        a_ca, (a_gate,) = _mod(a_table[:4], ctx.ca_audio), _mod(a_table[4:], ctx.ca_audio_gate)
        keep = ctx.cross_keep[:, None, None]
        nv, na = norm(video), norm(audio)
        out = attn(*aheads, d, cfg.gated_attn, "audio_to_video_attn")(
            act(modulate(nv, v_ca[1], v_ca[0])), act(modulate(na, a_ca[1], a_ca[0])),
            q_rope=ctx.rope.cross_video, k_rope=ctx.rope.cross_audio)
        video_next = video + keep * (v_gate * out.astype(f32))
        out = attn(*aheads, da, cfg.audio_gated_attn, "video_to_audio_attn")(
            act(modulate(na, a_ca[3], a_ca[2])), act(modulate(nv, v_ca[3], v_ca[2])),
            q_rope=ctx.rope.cross_audio, k_rope=ctx.rope.cross_video)
        audio = audio + keep * (a_gate * out.astype(f32))
        video = video_next

        # 4. Feed-forward of each stream.
        shift, scale, gate = v_mod[3:6]
        out = FeedForward(d, 4 * d, use_bias=cfg.ff_bias, name="ff")(act(modulate(norm(video), shift, scale)))
        video = video + out.astype(f32) * gate
        shift, scale, gate = a_mod[3:6]
        out = FeedForward(da, 4 * da, use_bias=cfg.audio_ff_bias, name="audio_ff")(
            act(modulate(norm(audio), shift, scale)))
        audio = audio + out.astype(f32) * gate
        return Streams(constrain(video.astype(streams.video.dtype), VIDEO_AXES),
                       constrain(audio.astype(streams.audio.dtype), AUDIO_AXES), streams.layer + 1)

    def _modulated_prompt(self, text, name, temb, dim):
        """The prompt's K/V AdaLN: static table plus (LTX-2.3) the sigma modulation."""
        table = _table(self, name, 2, dim)
        if temb is None:  # LTX-2.5: KV-cacheable, the table alone
            shift, scale = table[None, None, 0], table[None, None, 1]
        else:
            shift, scale = _mod(table, temb)
        return modulate(text.astype(jnp.float32), shift, scale).astype(text.dtype)


class Head(nn.Module):
    """Final AdaLN (`scale_shift_table` + embedded timestep) and projection of each stream."""

    cfg: TransformerConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, streams: Streams, embedded: jax.Array, embedded_audio: jax.Array):
        cfg = self.cfg

        def out(x, emb, dim, channels, prefix):
            table = _table(self, f"{prefix}scale_shift_table", 2, dim)
            mod = table[None, None] + emb[:, :, None]  # [B, 1 or S, 2, D]
            x = LayerNorm(1e-6, use_scale=False, use_bias=False)(x.astype(jnp.float32))
            x = modulate(x, mod[:, :, 0], mod[:, :, 1]).astype(self.dtype)
            return Dense(channels, axes=("embed", None), name=f"{prefix}proj_out")(x)

        video = out(streams.video, embedded, cfg.inner_dim, cfg.video_out_channels, "")
        audio = out(streams.audio, embedded_audio, cfg.audio_inner_dim, cfg.audio_channels_out, "audio_")
        return video, audio


# ---------------------------------------------------------------------------------------------
# The model


def first_block_modulated(cfg: TransformerConfig, first: Params, hidden: Streams, ctx: Context) -> jax.Array:
    """Block 0's video self-attention input: the RMS-normed video stream under its shift and scale
    (the first block's statistic TeaCache4LTX-Video reads, on LTX-2's video stream), fp32."""
    table = first["scale_shift_table"].astype(jnp.float32)
    shift, scale = _mod(table, ctx.temb)[:2]
    normed = RMSNorm(cfg.norm_eps, use_scale=False).apply({}, hidden.video.astype(jnp.float32))
    return modulate(normed, shift, scale)


class LTX2Transformer(StackedTransformer):
    """The LTX-2 DiT in the `vidax.zoo.parts.dit.StackedDiT` shape.

    `model(params, inputs, rope)` returns `(video [B, S, out_channels], audio [B, L, audio_out_channels])`,
    the velocities diffusers' forward returns.

    Args:
      cfg: `TransformerConfig.from_hf_config(config_json)`.
      use_cross_timestep: the cross-modal modulation reads the other modality's sigma (diffusers'
        pipeline default, LTX-2.3/2.5 behaviour) instead of the own timestep (LTX-2.0 legacy).
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of the two streams between blocks.
    """

    embed_modules = (
        "proj_in", "audio_proj_in", "keyframes_abs_pos_embedding", "caption_projection", "audio_caption_projection",
        "time_embed", "audio_time_embed", "prompt_adaln", "audio_prompt_adaln", "av_cross_attn_video_scale_shift",
        "av_cross_attn_audio_scale_shift", "av_cross_attn_video_a2v_gate", "av_cross_attn_audio_v2a_gate",
    )
    head_modules = ("scale_shift_table", "audio_scale_shift_table", "proj_out", "audio_proj_out")
    # TeaCache's statistic (vidax.zoo.parts.block_split.modulated_input); no set is published for LTX-2
    modulated_inputs = {
        "modulated": lambda model, first, hidden, ctx: first_block_modulated(model.cfg, first, hidden, ctx)}

    def __init__(self, cfg: TransformerConfig, use_cross_timestep: bool = True, dtype: Any = jnp.float32,
                 residual_dtype: Any = jnp.float32):
        self.cfg = cfg
        self.use_cross_timestep = use_cross_timestep
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.embedder = Embedder(cfg, use_cross_timestep, dtype, residual_dtype)
        self.block = LTX2Block(cfg, dtype)
        self.head_module = Head(cfg, dtype)

    def _key(self) -> tuple:
        return (*super()._key(), self.use_cross_timestep)

    @classmethod
    def with_precision(cls, cfg: TransformerConfig, precision: Precision, **kwargs) -> "LTX2Transformer":
        return cls(cfg, dtype=precision.activations, residual_dtype=precision.residual, **kwargs)

    def embed(self, params: Params, inputs: DiTInputs, rope: RopeTables) -> tuple[Streams, Context]:
        """Streams and context; `rope` from `vidax.zoo.ltx2.rope.dit_rope_tables` (host-built)."""
        self._check_inputs(inputs, rope)
        sub = self.subtree(params, self.embed_modules)
        streams, mods, text, audio_text = self.embedder.apply({"params": sub}, inputs)
        rope = RopeTables(*(tuple(jnp.asarray(t, jnp.float32) for t in pair) for pair in
                            (rope.video, rope.audio, rope.cross_video, rope.cross_audio)), rope_type=rope.rope_type)
        rope = rope.replace(video=tuple(constrain(t, ("seq",) + (None,) * (t.ndim - 1)) for t in rope.video),
                            cross_video=tuple(constrain(t, ("seq",) + (None,) * (t.ndim - 1))
                                              for t in rope.cross_video))
        ctx = Context(text=text, audio_text=audio_text, text_mask=inputs.text_mask, rope=rope,
                      stg_keep=inputs.stg_keep, cross_keep=inputs.cross_keep, **mods)
        return streams, ctx

    def _check_inputs(self, x: DiTInputs, rope: RopeTables) -> None:
        """One clear error for inputs the reference would reject or silently misread."""
        cfg = self.cfg
        b, s = x.video.shape[:2]
        problems = []
        if x.video.ndim != 3 or x.video.shape[-1] != cfg.in_channels:
            problems.append(f"video tokens must be [B, S, {cfg.in_channels}], got {x.video.shape}")
        if x.audio.ndim != 3 or x.audio.shape[0] != b or x.audio.shape[-1] != cfg.audio_in_channels:
            problems.append(f"audio tokens must be [{b}, L, {cfg.audio_in_channels}], got {x.audio.shape}")
        width = (cfg.caption_channels, cfg.caption_channels) if cfg.use_prompt_embeddings else (
            cfg.inner_dim, cfg.audio_inner_dim)
        for name, t, w in (("text", x.text, width[0]), ("audio_text", x.audio_text, width[1])):
            if t.ndim != 3 or t.shape[0] != b or t.shape[-1] != w:
                problems.append(f"{name} must be [{b}, T, {w}], got {t.shape}")
        if x.timestep.shape not in ((b,), (b, s)):
            problems.append(f"timestep must be [{b}] or per token [{b}, {s}], got {x.timestep.shape}")
        if x.stg_keep.shape != (b, cfg.num_layers):
            problems.append(f"stg_keep must be [{b}, {cfg.num_layers}], got {x.stg_keep.shape}")
        if rope.rope_type != cfg.rope_type or rope.video[0].shape[-3 if cfg.rope_type == "split" else -2] != s:
            problems.append(f"RoPE tables ({rope.rope_type}, video {rope.video[0].shape}) do not fit "
                            f"{s} video tokens with rope_type {cfg.rope_type!r}")
        if problems:
            raise ValueError("LTX-2 transformer: " + "; ".join(problems))

    def head(self, params: Params, hidden: Streams, ctx: Context) -> tuple[jax.Array, jax.Array]:
        sub = self.subtree(params, self.head_modules)
        video, audio = self.head_module.apply({"params": sub}, hidden, ctx.embedded, ctx.embedded_audio)
        return constrain(video, ("batch", None, None)), audio  # sequence parallel gathers here

    def head_inputs(self, hidden: Streams, ctx: Context) -> tuple:
        return hidden, ctx.embedded, ctx.embedded_audio

    def dummy_inputs(self, batch: int = 1):
        """Smallest valid inputs (one video and one audio token, one text token) for `init`."""
        cfg = self.cfg
        f32 = jnp.float32
        text_w = (cfg.caption_channels,) * 2 if cfg.use_prompt_embeddings else (cfg.inner_dim, cfg.audio_inner_dim)
        inputs = DiTInputs.make(
            jnp.zeros((batch, 1, cfg.in_channels), f32), jnp.zeros((batch, 1, cfg.audio_in_channels), f32),
            jnp.zeros((batch, 1, text_w[0]), f32), jnp.zeros((batch, 1, text_w[1]), f32), jnp.zeros((batch,), f32),
            num_layers=cfg.num_layers,
        )
        from vidax.zoo.ltx2.rope import default_dit_rope_tables

        return inputs, default_dit_rope_tables(cfg, 1, 1, 1, 1, fps=24.0)
