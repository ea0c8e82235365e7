"""LTX-2.5's diffusion VAE decoder (follows diffusers `LTX2VideoDiffusionDecoderModel`).

A decoder, not an autoencoder: it turns the video VAE's latents (denormalised) into pixels.
1. Stages 1-4 upsample the latent deterministically into a context volume: a linear `conv_in`, then
   per stage pre-norm neighborhood-attention + SwiGLU blocks and a pixel-shuffle upsampler
   (a duplicated leading frame dropped after each temporal 2x; the last latent frame replicated
   `trailing_pad` times before stage 1 and its pixels cropped after stage 4, for NATTEN's
   inward-shifted border windows).
2. Stage 5 denoises patchified pixels conditioned on that context (added through `context_proj`,
   AdaLN-Zero scale/shift from the timestep): with the release's single x0 step its prediction from
   pure noise is the output; more steps run reverse Euler.

The blocks of a stage share their shapes and run as one `nn.scan` (params stacked on a leading
"layers" axis: `det_stages_{s}/...`, `diff_blocks/...`); attention is `neighborhood.neighborhood_attention`
(blocked, `lax.map` over query blocks) and the SwiGLU runs over token chunks (`lax.map`), so
compile time and memory stay bounded whatever the grid. The noise is an input (`noise`, the
pixel-space `x_t`): the pipeline draws it from the run's seed on the host.

Parameters drop diffusers' `decoder.` prefix (`det_stages_0/attn/to_q/kernel`, `conv_in_x_t/kernel`)
so that each stacked stage is its own top-level group.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.compute.attention import neighborhood_attention
from vidax.zoo.compute.kernels.neighborhood import DEFAULT_BLOCK
from vidax.zoo.compute.layers import Dense, RMSNorm, logical_param
from vidax.zoo.ltx2.config import DiffusionDecoderConfig
from vidax.zoo.ltx2.decoding.vae import TimestepEmbedder

Params = dict[str, Any]
SWIGLU_CHUNK = 16384  # tokens per SwiGLU step (diffusers' `_SWIGLU_TILE_SIZE`)


def _rope_split(head_dim: int) -> tuple[int, int, int]:
    """diffusers `LTX2VideoVaeRotaryPosEmbed3D.rope_dim_split`: a quarter of the head to T, H and W halves."""
    dim_t = (head_dim // 4) // 2 * 2
    dim_hw = (head_dim - dim_t) // 2
    if dim_hw % 2:
        dim_t -= 2
        dim_hw = (head_dim - dim_t) // 2
    return dim_t, dim_hw, dim_hw


def _rope_angles(n: int, dim: int, base: float = 10000.0) -> np.ndarray:
    inv = (1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)).astype(np.float32)
    return np.arange(n, dtype=np.float32)[:, None] * inv[None]  # [n, dim / 2]


def rope_3d(x: jax.Array) -> jax.Array:
    """Rotate `[B, T, H, W, heads, D]` by each axis' own index (pairs interleaved), in fp32."""
    grid, d = x.shape[1:4], x.shape[-1]
    out, offset = [], 0
    for axis, dim in enumerate(_rope_split(d)):
        angles = _rope_angles(grid[axis], dim)  # [n, dim / 2]
        shape = [1, 1, 1, 1, 1, dim // 2]
        shape[axis + 1] = grid[axis]
        cos, sin = (jnp.asarray(f(angles)).reshape(shape) for f in (np.cos, np.sin))
        pairs = x[..., offset: offset + dim].astype(jnp.float32).reshape(*x.shape[:-1], dim // 2, 2)
        even, odd = pairs[..., 0], pairs[..., 1]
        out.append(jnp.stack([even * cos - odd * sin, even * sin + odd * cos], -1).reshape(*x.shape[:-1], dim))
        offset += dim
    return jnp.concatenate(out, axis=-1).astype(x.dtype)


class NeighborhoodAttention(nn.Module):
    """diffusers `LTX2VideoVaeNeighborhoodAttention`: q/k per-head RMS norm, query pre-scaled, 3-D RoPE."""

    dim: int
    kernel: tuple[int, int, int]
    head_dim: int
    block: tuple[int, int, int] = DEFAULT_BLOCK
    blocks_per_step: int = 1

    @nn.compact
    def __call__(self, x):  # [B, T, H, W, C]
        heads = self.dim // self.head_dim
        shape = (*x.shape[:-1], heads, self.head_dim)
        dense = lambda name: Dense(self.dim, axes=("embed", "heads"), name=name)  # noqa: E731
        q = RMSNorm(1e-6, axis_name=None, name="norm_q")(dense("to_q")(x).reshape(shape)) * self.head_dim ** -0.5
        k = RMSNorm(1e-6, axis_name=None, name="norm_k")(dense("to_k")(x).reshape(shape))
        v = dense("to_v")(x).reshape(shape)
        out = neighborhood_attention(rope_3d(q), rope_3d(k), v, self.kernel, block=self.block,
                                     blocks_per_step=self.blocks_per_step)
        return Dense(self.dim, axes=("heads", "embed"), name="to_out_0")(out.reshape(x.shape))


class _Kernel(nn.Module):
    """A bias-free linear layer's `kernel` `[in, out]`, returned as an array (used inside `lax.map`)."""

    shape: tuple[int, int]
    axes: tuple[str | None, str | None]

    @nn.compact
    def __call__(self):
        return logical_param(self, "kernel", self.shape, self.axes)


class SwiGLU(nn.Module):
    """diffusers `LTX2VideoVaeSwiGLU`: `w_down(silu(w_gate(x)) * w_up(x))`, in token chunks (`lax.map`)."""

    dim: int
    hidden: int

    @nn.compact
    def __call__(self, x):
        up = _Kernel((self.dim, self.hidden), ("embed", "mlp"), name="w_up")()
        gate = _Kernel((self.dim, self.hidden), ("embed", "mlp"), name="w_gate")()
        down = _Kernel((self.hidden, self.dim), ("mlp", "embed"), name="w_down")()
        dt = x.dtype
        mlp = lambda t: jnp.dot(jax.nn.silu(jnp.dot(t, gate.astype(dt))) * jnp.dot(t, up.astype(dt)), down.astype(dt))  # noqa: E731
        flat = x.reshape(-1, x.shape[-1])
        n = flat.shape[0]
        if n <= SWIGLU_CHUNK:
            return mlp(flat).reshape(x.shape)
        pad = -n % SWIGLU_CHUNK
        tiles = jnp.pad(flat, ((0, pad), (0, 0))).reshape(-1, SWIGLU_CHUNK, x.shape[-1])
        return jax.lax.map(mlp, tiles).reshape(-1, x.shape[-1])[:n].reshape(x.shape)


def swiglu_hidden(dim: int, ratio: float = 4.0) -> int:
    return (int(dim * ratio) + 15) // 16 * 16


class NABlock(nn.Module):
    """diffusers `LTX2VideoVaeNABlock` (deterministic stages)."""

    dim: int
    kernel: tuple[int, int, int]
    head_dim: int
    block: tuple[int, int, int] = DEFAULT_BLOCK
    blocks_per_step: int = 1

    @nn.compact
    def __call__(self, x, _):
        x = x + NeighborhoodAttention(self.dim, self.kernel, self.head_dim, self.block, self.blocks_per_step,
                                      name="attn")(RMSNorm(1e-6, name="norm1")(x))
        return x + SwiGLU(self.dim, swiglu_hidden(self.dim), name="mlp")(RMSNorm(1e-6, name="norm2")(x)), None


class DiffusionNABlock(nn.Module):
    """diffusers `LTX2VideoVaeDiffusionNABlock`: context injected, AdaLN scale/shift, ungated residuals."""

    dim: int
    kernel: tuple[int, int, int]
    head_dim: int
    block: tuple[int, int, int] = DEFAULT_BLOCK
    blocks_per_step: int = 1

    @nn.compact
    def __call__(self, x, ctx):
        context, modulation = ctx  # [B, T, H, W, C], [B, 7, C]
        table = logical_param(self, "scale_shift_table", (7, self.dim), (None, "embed"), nn.initializers.zeros)
        mod = modulation + table[None].astype(jnp.float32)
        scale_msa, shift_msa, scale_mlp, shift_mlp = (mod[:, i, None, None, None] for i in (0, 1, 3, 4))
        dt = x.dtype  # the fp32 modulation must not promote the carried stream
        x = x + Dense(self.dim, axes=(None, "embed"), name="context_proj")(context).astype(dt)
        h = (RMSNorm(1e-6, name="norm1")(x) * (1 + scale_msa) + shift_msa).astype(dt)
        x = x + NeighborhoodAttention(self.dim, self.kernel, self.head_dim, self.block, self.blocks_per_step,
                                      name="attn")(h).astype(dt)
        h = (RMSNorm(1e-6, name="norm2")(x) * (1 + scale_mlp) + shift_mlp).astype(dt)
        return x + SwiGLU(self.dim, swiglu_hidden(self.dim), name="mlp")(h).astype(dt), None


def _stage(block_cls, depth: int, **kwargs):
    return nn.scan(block_cls, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=nn.broadcast,
                   length=depth, metadata_params={nn.PARTITION_NAME: "layers"})(**kwargs)


class PixelShuffleUpsampler(nn.Module):
    """diffusers `LTX2VideoVaePixelShuffleUpsampler`: linear `proj`, channels-last pixel shuffle, the
    duplicated leading frame of a temporal 2x dropped."""

    stride: tuple[int, int, int]
    reduction: int

    @nn.compact
    def __call__(self, x, drop_leading: bool = True):
        b, t, h, w, c = x.shape
        st, sh, sw = self.stride
        x = Dense(st * sh * sw * c // self.reduction, axes=("embed", None), name="proj")(x)
        x = x.reshape(b, t, h, w, -1, st, sh, sw).transpose(0, 1, 5, 2, 6, 3, 7, 4)
        x = x.reshape(b, t * st, h * sh, w * sw, -1)
        return x[:, 1:] if st == 2 and drop_leading else x


class AdaLNZero(nn.Module):
    """diffusers `LTX2VideoVaeAdaLNZero`: `proj(silu(t_emb))` as seven `[B, C]` chunks -> `[B, 7, C]`."""

    dim: int

    @nn.compact
    def __call__(self, t_emb):
        out = Dense(7 * self.dim, axes=(None, None), dtype=jnp.float32, name="proj")(jax.nn.silu(t_emb))
        return out.reshape(t_emb.shape[0], 7, self.dim)


def _patchify(x, p):
    """`[B, F, H, W, C]` pixels -> `[B, F, H/p, W/p, C*p*p]`, channels (c, pw, ph) as diffusers' `_patchify`."""
    b, f, h, w, c = x.shape
    x = x.reshape(b, f, h // p, p, w // p, p, c).transpose(0, 1, 2, 4, 6, 5, 3)
    return x.reshape(b, f, h // p, w // p, c * p * p)


def _unpatchify(x, p):
    b, f, h, w, _ = x.shape
    x = x.reshape(b, f, h, w, -1, p, p).transpose(0, 1, 2, 6, 3, 5, 4)  # [B, F, H', ph, W', pw, C]
    return x.reshape(b, f, h * p, w * p, -1)


class DiffusionDecoderModule(nn.Module):
    """Parameter tree and the three phases (`context`, `step`; `__call__` for init)."""

    cfg: DiffusionDecoderConfig
    block: tuple[int, int, int] = DEFAULT_BLOCK
    blocks_per_step: int = 1

    def setup(self):
        cfg = self.cfg
        chans, depths = cfg.decoder_stage_channels, cfg.decoder_stage_depths
        common = dict(head_dim=cfg.decoder_head_dim, block=self.block, blocks_per_step=self.blocks_per_step)
        self.conv_in = Dense(chans[0], axes=(None, "embed"))
        self.det_stages = [_stage(NABlock, depths[s], dim=chans[s], kernel=tuple(kern), **common)
                           for s, kern in enumerate(cfg.decoder_stage_kernels)]
        self.upsamples = [PixelShuffleUpsampler(tuple(st), r) for st, r in
                          zip(cfg.decoder_upsample_strides, cfg.decoder_upsample_channel_reductions)]
        self.t_embedder = TimestepEmbedder(cfg.decoder_t_emb_dim)
        self.conv_in_x_t = Dense(chans[-1], axes=(None, "embed"))
        self.shared_adaln = AdaLNZero(chans[-1])
        self.diff_blocks = _stage(DiffusionNABlock, depths[-1], dim=chans[-1], kernel=tuple(cfg.decoder_stage5_kernel),
                                  **common)
        self.norm_out = RMSNorm(1e-6)
        self.conv_out = Dense(cfg.out_channels * cfg.patch_size ** 2, axes=("embed", None))
        c = cfg.latent_channels
        self.latents_mean = self.param("latents_mean", nn.initializers.zeros, (c,), jnp.float32)
        self.latents_std = self.param("latents_std", nn.initializers.ones, (c,), jnp.float32)

    def context(self, z):
        """Stages 1-4: latents `[B, F', H', W', C]` -> context `[B, T5, H5, W5, C5]`."""
        cfg = self.cfg
        pad = cfg.trailing_pad
        x = jnp.concatenate([z, jnp.repeat(z[:, -1:], pad, axis=1)], axis=1) if pad else z
        x = self.conv_in(x)
        last = len(self.det_stages) - 1
        for s, (stage, up) in enumerate(zip(self.det_stages, self.upsamples)):
            x, _ = stage(x, None)
            x = up(x)
            if s == last and pad:
                x = x[:, : x.shape[1] - pad * cfg.temporal_compression_ratio]
        return x

    def step(self, context, x_t, t):
        """One stage-5 step: the model's prediction for pixels `x_t` `[B, F, H, W, C]` at `t` `[B]`."""
        cfg = self.cfg
        modulation = self.shared_adaln(self.t_embedder(cfg.decoder_timestep_scale_multiplier * t))
        x = self.conv_in_x_t(_patchify(x_t, cfg.patch_size))
        x, _ = self.diff_blocks(x, (context, modulation))
        return _unpatchify(self.conv_out(self.norm_out(x)), cfg.patch_size)

    def __call__(self, z, noise):
        context = self.context(z)
        return self.step(context, noise, jnp.ones((z.shape[0],))), self.latents_mean, self.latents_std


class LTX2DiffusionDecoder:
    """Decode denormalised video latents `[B, C, F', H', W']` to pixels `[B, 3, F, H, W]`.

    `decode(params, z, noise)` with `noise` the stage-5 `x_t` `[B, 3, 1 + 8 (F' - 1), 32 H', 32 W']`
    (diffusers draws it with `randn_tensor(..., generator)`; `noise_shape` gives the shape). Context
    and each denoising step are separate compiled units in `decode`'s host loop.

    Args:
      cfg: `DiffusionDecoderConfig.from_hf_config(config_json)`.
      block: neighborhood-attention query block (per axis).
      blocks_per_step: query blocks per `lax.map` step.
    """

    def __init__(self, cfg: DiffusionDecoderConfig, dtype: Any = jnp.float32,
                 block: tuple[int, int, int] = DEFAULT_BLOCK, blocks_per_step: int = 1):
        self.cfg, self.dtype = cfg, dtype
        self.module = DiffusionDecoderModule(cfg, tuple(block), blocks_per_step)
        self._context = jax.jit(lambda p, z: self.module.apply({"params": p}, z, method=DiffusionDecoderModule.context))
        self._step = jax.jit(lambda p, c, x, t: self.module.apply({"params": p}, c, x, t,
                                                                  method=DiffusionDecoderModule.step))

    def noise_shape(self, latent_shape: tuple[int, ...]) -> tuple[int, int, int, int, int]:
        """Pixel-space `x_t` shape for latents `[B, C, F', H', W']`: the stage-5 grid times the patch
        (`1 + 8 (F' - 1)` frames and 32x the latent size with the release's strides)."""
        cfg = self.cfg
        b, _, t, h, w = latent_shape
        t += cfg.trailing_pad
        for st, sh, sw in cfg.decoder_upsample_strides:
            t, h, w = t * st - (1 if st == 2 else 0), h * sh, w * sw
        t -= cfg.trailing_pad * cfg.temporal_compression_ratio
        return (b, cfg.out_channels, t, h * cfg.patch_size, w * cfg.patch_size)

    def init_params(self, rng):
        """Random parameters (for shapes): latents just large enough for every stage's kernel."""
        cfg = self.cfg
        kernels = (*cfg.decoder_stage_kernels, cfg.decoder_stage5_kernel)
        frames = 1 + -(-(max(k[0] for k in kernels) - 1) // cfg.temporal_compression_ratio)
        size = max(max(k[1], k[2]) for k in kernels)
        z = jnp.zeros((1, frames, size, size, cfg.latent_channels), jnp.float32)
        noise = jnp.zeros(self.noise_shape((1, cfg.latent_channels, frames, size, size)), jnp.float32)
        return nn.unbox(self.module.init(rng, z, jnp.moveaxis(noise, 1, -1))["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def decode(self, params: Params, z: jax.Array, noise: jax.Array, num_inference_steps: int | None = None):
        cfg = self.cfg
        steps = num_inference_steps or cfg.decoder_num_inference_steps
        if tuple(noise.shape) != self.noise_shape(z.shape):
            raise ValueError(f"LTX-2.5 diffusion decoder: noise must be {self.noise_shape(z.shape)} for latents "
                             f"{tuple(z.shape)}, got {tuple(noise.shape)}")
        context = self._context(params, jnp.moveaxis(z.astype(self.dtype), 1, -1))
        x = jnp.moveaxis(noise.astype(self.dtype), 1, -1)
        b = z.shape[0]
        times = np.linspace(1.0, 1.0 / steps, steps, dtype=np.float32)
        if steps == 1 and cfg.decoder_model_output_type == "x0":
            return jnp.moveaxis(self._step(params, context, x, jnp.full((b,), times[0])), -1, 1)
        for i, t in enumerate(times):  # reverse Euler in fp32, as diffusers' `denoise`
            t_next = times[i + 1] if i + 1 < steps else np.float32(0.0)
            out = self._step(params, context, x, jnp.full((b,), t)).astype(jnp.float32)
            if cfg.decoder_model_output_type == "x0":
                out = (x.astype(jnp.float32) - out) / t
            x = (x.astype(jnp.float32) - (t - t_next) * out).astype(x.dtype)
        return jnp.moveaxis(x, -1, 1)
