"""LTX-Video VAE (follows diffusers `AutoencoderKLLTXVideo`): 128 latent channels, 32x space, 8x time.

Three generations share this code, told apart by the config (`config.VAEConfig`): 0.9.0 (conv
down/up sampling), 0.9.1 (residual depth-to-space decoder, timestep-conditioned, with injected
noise), 0.9.5 to 0.9.8 (space-to-depth encoder `LTXVideo095DownBlock3D`, the 0.9.1 decoder without
noise). Module names mirror diffusers' so the spec `ltx_video/vae` stays short.

Activations run channels-last (`[B, F, H, W, C]`); the public `encode` / `decode` take and return
diffusers' `[B, C, F, H, W]`. Encoder convolutions are causal in time (the first frame replicated
in front), the decoder's are not (first and last frames replicated); spatial padding is zeros.

`encode` / `decode` take `tiling=`: diffusers' overlapping tiles (`enable_tiling()`, and its frame-wise
windows), a host loop over one compiled tile body (`vidax.zoo.parts.vae_tiling`); every module takes the
padded tile's `Extent` so that each convolution sees the reference's padding at the tile's real edge.

Randomness is the caller's, drawn on the host from the run's seed:
  - `decode(..., noise=...)`: the 0.9.1 decoder adds a per-resnet spatial noise map `[H, W]` (one
    after each of its two convolutions) scaled per channel; the reference draws them from torch's
    global RNG in forward order (tiled: tile by tile, each at its tile's size). `decoder_noise_shapes`
    lists their shapes in that order.
  - the decode timestep's latent noise (`(1 − s)·z + s·ε`) is the pipeline's (`latents.decode_input`).
  - sampling the posterior (`latents.sample_posterior(moments, noise)`), as the pipelines'
    `retrieve_latents` does for conditioning frames.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.compute.layers import LayerNorm, MLPEmbedder, RMSNorm, logical_param, timestep_sinusoid
from vidax.zoo.compute.runtime import compile_step, xla_only_options  # no Pallas kernel in the VAE
from vidax.zoo.ltx_video.config import ENCODER_095, STRIDES, VAEConfig
from vidax.zoo.parts.vae_tiling import (
    Extent,
    TilePlan,
    TileSizes,
    decode_working_set,
    encode_working_set,
    fix_edges,
    pad_to,
    window,
)

Params = dict[str, Any]
NORM_EPS = 1e-8  # every RMS norm of the LTX VAE


# ---------------------------------------------------------------------------------------------
# Layers


class Conv3d(nn.Module):
    """torch `Conv3d` (kernel `[kt, kh, kw, I, O]`, zero spatial padding k//2, VALID in time)."""

    features: int
    kernel: int = 3
    stride: tuple[int, int, int] = (1, 1, 1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel
        w = logical_param(self, "kernel", (k, k, k, x.shape[-1], self.features), (None, None, None, "conv_in", "conv_out"))
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        pad = ((0, 0), (k // 2, k // 2), (k // 2, k // 2))
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), self.stride, pad,
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        return y + b.astype(x.dtype)


class CausalConv3d(nn.Module):
    """diffusers `LTXVideoCausalConv3d`: frames padded by replication (first frame k−1 times in front
    when causal, else (k−1)/2 first and last frames), then the conv as `conv`."""

    features: int
    kernel: int = 3
    stride: tuple[int, int, int] = (1, 1, 1)
    causal: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, counts=None) -> jax.Array:
        k = self.kernel
        if counts is not None and k > 1:  # a padded tile: what a tile cut at its real edge would see
            x = fix_edges(x, counts, time=None if self.causal else "replicate", space="zeros")
        if k > 1:
            before, after = (k - 1, 0) if self.causal else ((k - 1) // 2, (k - 1) // 2)
            x = jnp.pad(x, ((0, 0), (before, after), (0, 0), (0, 0), (0, 0)), mode="edge")
        return Conv3d(self.features, k, self.stride, name="conv")(x)


def _counts(extent: Extent | None, x: jax.Array):
    """A padded tile's real (frames, height, width) at `x`'s resolution (None: a whole video)."""
    return None if extent is None else extent.at(x.shape[1:4])


def channel_rms_norm(x: jax.Array) -> jax.Array:
    """diffusers `RMSNorm(C, eps=1e-8, elementwise_affine=False)` over channels (fp32 inside)."""
    return RMSNorm(eps=NORM_EPS, use_scale=False).apply({}, x)


class TimeEmbedder(nn.Module):
    """diffusers `PixArtAlphaCombinedTimestepSizeEmbeddings(features, 0)`: sinusoid(256) -> MLP."""

    features: int

    @nn.compact
    def __call__(self, timestep: jax.Array, dtype) -> jax.Array:
        sinusoid = timestep_sinusoid(timestep, 256).astype(dtype)
        return MLPEmbedder(self.features, name="timestep_embedder")(sinusoid)


class ResnetBlock(nn.Module):
    """diffusers `LTXVideoResnetBlock3d`: RMS norm, (timestep shift/scale), SiLU, conv, (noise), twice;
    LayerNorm + 1x1 conv shortcut when the width changes."""

    features: int
    causal: bool = True
    eps: float = 1e-6
    inject_noise: bool = False
    timestep_conditioning: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, temb: jax.Array | None, noise: Sequence[jax.Array],
                 extent: Extent | None = None) -> jax.Array:
        c_in = x.shape[-1]
        counts = _counts(extent, x)
        h = channel_rms_norm(x)
        if self.timestep_conditioning:  # temb [B, 4*C]: (shift1, scale1, shift2, scale2)
            table = logical_param(self, "scale_shift_table", (4, c_in), (None, "conv_in"))
            mod = temb.reshape(temb.shape[0], 4, c_in) + table.astype(temb.dtype)
            mod = mod[:, :, None, None, None, :]  # [B, 4, 1, 1, 1, C]
            h = h * (1 + mod[:, 1]) + mod[:, 0]
        h = CausalConv3d(self.features, causal=self.causal, name="conv1")(nn.silu(h), counts)
        if self.inject_noise:
            h = h + self._noise("per_channel_scale1", noise[0], c_in)
        h = channel_rms_norm(h)
        if self.timestep_conditioning:
            h = h * (1 + mod[:, 3]) + mod[:, 2]
        h = CausalConv3d(self.features, causal=self.causal, name="conv2")(nn.silu(h), counts)
        if self.inject_noise:
            h = h + self._noise("per_channel_scale2", noise[1], c_in)
        if c_in != self.features:
            x = LayerNorm(eps=self.eps, axis_name="conv_in", name="norm3")(x)
            x = CausalConv3d(self.features, kernel=1, causal=self.causal, name="conv_shortcut")(x)
        return h + x

    def _noise(self, name: str, spatial: jax.Array, channels: int) -> jax.Array:
        """The reference's `spatial_noise[H, W] · per_channel_scale[C]`, broadcast over batch and frames."""
        scale = logical_param(self, name, (channels,), ("conv_in",), nn.initializers.zeros)
        return spatial[None, None, :, :, None] * scale


def _run_resnets(x, temb, noise, layers: int, extent: Extent | None = None, **kwargs):
    """`layers` resnets named `resnets_{i}`, each taking its two noise maps in turn."""
    for i in range(layers):
        x = ResnetBlock(x.shape[-1], **kwargs, name=f"resnets_{i}")(x, temb, noise[2 * i: 2 * i + 2], extent)
    return x


def depth_to_space(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """`[B, F, H, W, C·s0·s1·s2]` -> `[B, F·s0, H·s1, W·s2, C]`, channels split (C, s0, s1, s2) as the
    reference's `reshape(B, -1, s0, s1, s2, F, H, W)` does."""
    b, f, h, w, packed = x.shape
    s0, s1, s2 = stride
    x = x.reshape(b, f, h, w, packed // (s0 * s1 * s2), s0, s1, s2)
    return x.transpose(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, f * s0, h * s1, w * s2, -1)


def space_to_depth(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """Inverse of `depth_to_space`: channels ordered (C, s0, s1, s2)."""
    b, f, h, w, c = x.shape
    s0, s1, s2 = stride
    x = x.reshape(b, f // s0, s0, h // s1, s1, w // s2, s2, c)
    return x.transpose(0, 1, 3, 5, 7, 2, 4, 6).reshape(b, f // s0, h // s1, w // s2, c * s0 * s1 * s2)


class Downsampler(nn.Module):
    """diffusers `LTXVideoDownsampler3d` (0.9.5 encoder): conv then space-to-depth, plus the input's
    space-to-depth averaged over channel groups; the first frame is repeated to fill the time stride."""

    features: int
    stride: tuple[int, int, int]
    causal: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, extent: Extent | None = None) -> jax.Array:
        s0 = self.stride[0]
        counts = _counts(extent, x)
        if counts is not None:  # the conv sees s0 - 1 more frames in front
            counts = (counts[0] + s0 - 1, *counts[1:])
        x = jnp.concatenate([x[:, : s0 - 1], x], axis=1)
        volume = int(np.prod(self.stride))
        residual = space_to_depth(x, self.stride)
        group = residual.shape[-1] // self.features
        residual = residual.reshape(*residual.shape[:-1], self.features, group).mean(-1)
        h = CausalConv3d(self.features // volume, causal=self.causal, name="conv")(x, counts)
        return space_to_depth(h, self.stride) + residual


class Upsampler(nn.Module):
    """diffusers `LTXVideoUpsampler3d` (stride 2 in time and space): conv then depth-to-space, the
    first output frame dropped; 0.9.1+: plus the input's depth-to-space tiled over channels."""

    upscale_factor: int = 1
    residual: bool = False
    causal: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, extent: Extent | None = None) -> jax.Array:
        stride = (2, 2, 2)
        c = x.shape[-1]
        h = CausalConv3d(c * 8 // self.upscale_factor, causal=self.causal, name="conv")(x, _counts(extent, x))
        h = depth_to_space(h, stride)[:, stride[0] - 1:]
        if self.residual:
            r = depth_to_space(x, stride)
            r = jnp.concatenate([r] * (8 // self.upscale_factor), axis=-1)[:, stride[0] - 1:]  # torch .repeat on C
            h = h + r
        return h


# ---------------------------------------------------------------------------------------------
# Encoder and decoder


class Encoder(nn.Module):
    """diffusers `LTXVideoEncoder3d`: patchify 4x4 (channels ordered c, t, w, h), down blocks, mid
    block, RMS norm, SiLU, conv to latent+1 channels; the last (log-variance) channel is repeated."""

    cfg: VAEConfig

    @nn.compact
    def __call__(self, x: jax.Array, extent: Extent | None = None) -> jax.Array:
        cfg = self.cfg
        p, pt = cfg.patch_size, cfg.patch_size_t
        b, f, h, w, c = x.shape
        x = x.reshape(b, f // pt, pt, h // p, p, w // p, p, c)
        x = x.transpose(0, 1, 3, 5, 7, 2, 6, 4).reshape(b, f // pt, h // p, w // p, c * pt * p * p)
        causal = cfg.encoder_causal
        x = CausalConv3d(cfg.block_out_channels[0], causal=causal, name="conv_in")(x, _counts(extent, x))
        for i in range(cfg.num_down_blocks):
            x = _DownBlock(cfg, i, name=f"down_blocks_{i}")(x, extent)
        x = _Stage(cfg.layers_per_block[-1], causal, cfg.resnet_norm_eps, name="mid_block")(x, None, (), extent)
        x = nn.silu(channel_rms_norm(x))
        x = CausalConv3d(cfg.latent_channels + 1, causal=causal, name="conv_out")(x, _counts(extent, x))
        return jnp.concatenate([x, jnp.repeat(x[..., -1:], cfg.latent_channels - 1, axis=-1)], axis=-1)


class _Stage(nn.Module):
    """A run of resnets at one width (diffusers' mid blocks), with its own time embedder when conditioned."""

    layers: int
    causal: bool
    eps: float
    inject_noise: bool = False
    timestep_conditioning: bool = False

    @nn.compact
    def __call__(self, x, temb, noise, extent: Extent | None = None):
        if self.timestep_conditioning:
            temb = TimeEmbedder(4 * x.shape[-1], name="time_embedder")(temb, x.dtype)
        return _run_resnets(x, temb, noise, self.layers, extent, causal=self.causal, eps=self.eps,
                            inject_noise=self.inject_noise, timestep_conditioning=self.timestep_conditioning)


class _DownBlock(nn.Module):
    """diffusers `LTXVideoDownBlock3D` (resnets, stride-2 conv, widening resnet `conv_out`) or
    `LTXVideo095DownBlock3D` (resnets, a space-to-depth downsampler or a stride-2 conv), by
    `down_block_types[index]`."""

    cfg: VAEConfig
    index: int

    @nn.compact
    def __call__(self, x, extent: Extent | None = None):
        cfg, i = self.cfg, self.index
        causal, eps = cfg.encoder_causal, cfg.resnet_norm_eps
        x = _run_resnets(x, None, (), cfg.layers_per_block[i], extent, causal=causal, eps=eps)
        kind, out = cfg.downsample_kind(i), cfg.encoder_width(i)
        if kind == "conv":  # a stride-2 `LTXVideoCausalConv3d` (`downsamplers.0.conv`)
            x = CausalConv3d(x.shape[-1], stride=(2, 2, 2), causal=causal, name="downsamplers_0")(x, _counts(extent, x))
        elif kind is not None:
            x = Downsampler(out, STRIDES[kind], causal, name="downsamplers_0")(x, extent)
        if cfg.down_block_types[i] != ENCODER_095 and out != x.shape[-1]:
            x = ResnetBlock(out, causal=causal, eps=eps, name="conv_out")(x, None, (), extent)
        return x


class _UpBlock(nn.Module):
    """diffusers `LTXVideoUpBlock3d`: (widening-down resnet `conv_in`), time embedder, upsampler, resnets."""

    cfg: VAEConfig
    index: int

    @nn.compact
    def __call__(self, x, temb, noise, extent: Extent | None = None):
        cfg, i = self.cfg, self.index
        r = cfg.decoder_stages
        causal, eps, tc = cfg.decoder_causal, cfg.resnet_norm_eps, cfg.timestep_conditioning
        factor, inject = r["factor"][i], r["noise"][i + 1]
        out = r["channels"][i] // factor
        used = 0
        if x.shape[-1] // factor != out:
            if tc:
                raise ValueError("LTX-Video VAE: a width-changing up block under timestep conditioning is not "
                                 "runnable (the reference's conv_in would receive the raw timestep)")
            x = ResnetBlock(out, causal=causal, eps=eps, inject_noise=inject, name="conv_in")(
                x, None, noise[:2], extent)
            used = 2 if inject else 0
        if tc:
            temb = TimeEmbedder(4 * x.shape[-1] // factor, name="time_embedder")(temb, x.dtype)
        if r["scaling"][i]:
            x = Upsampler(factor, r["residual"][i], causal, name="upsamplers_0")(x, extent)
        return _run_resnets(x, temb, noise[used:], r["layers"][i + 1], extent, causal=causal, eps=eps,
                            inject_noise=inject, timestep_conditioning=tc)


class Decoder(nn.Module):
    """diffusers `LTXVideoDecoder3d`: conv, mid block, up blocks, RMS norm, (timestep shift/scale),
    SiLU, conv to 3·4·4 channels, unpatchify. The timestep is scaled by `timestep_scale_multiplier`."""

    cfg: VAEConfig

    @nn.compact
    def __call__(self, z: jax.Array, temb: jax.Array | None, noise: Sequence[jax.Array],
                 extent: Extent | None = None) -> jax.Array:
        cfg = self.cfg
        r = cfg.decoder_stages
        causal, eps, tc = cfg.decoder_causal, cfg.resnet_norm_eps, cfg.timestep_conditioning
        x = CausalConv3d(r["channels"][0], causal=causal, name="conv_in")(z, _counts(extent, z))
        if tc:
            multiplier = self.param("timestep_scale_multiplier", nn.initializers.constant(1000.0), (), jnp.float32)
            temb = temb.astype(jnp.float32) * multiplier
        counts = decoder_noise_counts(cfg)
        starts = np.cumsum((0,) + counts)
        x = _Stage(r["layers"][0], causal, eps, r["noise"][0], tc, name="mid_block")(
            x, temb, noise[starts[0]: starts[1]], extent)
        for i in range(len(r["channels"])):
            x = _UpBlock(cfg, i, name=f"up_blocks_{i}")(x, temb, noise[starts[i + 1]: starts[i + 2]], extent)
        x = channel_rms_norm(x)
        if tc:
            c = x.shape[-1]
            table = logical_param(self, "scale_shift_table", (2, c), (None, "conv_in"))
            mod = TimeEmbedder(2 * c, name="time_embedder")(temb, x.dtype).reshape(-1, 2, c) + table.astype(x.dtype)
            x = x * (1 + mod[:, 1, None, None, None]) + mod[:, 0, None, None, None]
        p = cfg.patch_size
        x = CausalConv3d(cfg.out_channels * p * p, causal=causal, name="conv_out")(nn.silu(x), _counts(extent, x))
        b, f, h, w, _ = x.shape
        x = x.reshape(b, f, h, w, cfg.out_channels, cfg.patch_size_t, p, p)  # channels (c, t, w, h)
        return x.transpose(0, 1, 5, 2, 7, 3, 6, 4).reshape(b, f * cfg.patch_size_t, h * p, w * p, cfg.out_channels)


def decoder_noise_counts(cfg: VAEConfig) -> tuple[int, ...]:
    """Noise maps drawn by the mid block and by each up block (two per noise-injecting resnet)."""
    r = cfg.decoder_stages
    counts = [2 * r["layers"][0] if r["noise"][0] else 0]
    channels = r["channels"][0]
    for i, out in enumerate(r["channels"]):
        per = 2 if r["noise"][i + 1] else 0
        out //= r["factor"][i]
        widen = channels // r["factor"][i] != out
        counts.append(per * (r["layers"][i + 1] + (1 if widen else 0)))
        channels = out
    return tuple(counts)


def decoder_noise_shapes(cfg: VAEConfig, latent_height: int, latent_width: int) -> list[tuple[int, int]]:
    """The `[H, W]` of every noise map the decoder adds, in the order the reference draws them."""
    r = cfg.decoder_stages
    counts = decoder_noise_counts(cfg)
    shapes = [(latent_height, latent_width)] * counts[0]
    h, w = latent_height, latent_width
    channels = r["channels"][0]
    for i, count in enumerate(counts[1:]):
        out = r["channels"][i] // r["factor"][i]
        widen = channels // r["factor"][i] != out
        before = 2 if (widen and count) else 0  # conv_in runs before the upsampler
        shapes += [(h, w)] * before
        if r["scaling"][i]:
            h, w = 2 * h, 2 * w
        shapes += [(h, w)] * (count - before)
        channels = out
    return shapes


# ---------------------------------------------------------------------------------------------
# The model


class LTXVideoVAE:
    """Encode `[B, 3, F, H, W]` video in [-1, 1] to posterior moments, decode latents back.

    Args:
      cfg: `VAEConfig.from_hf_config(config_json)` (or `from_official_config`).
      dtype: activation dtype of the convolutions (norms run in fp32 inside).
    """

    def __init__(self, cfg: VAEConfig, dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def __hash__(self):
        return hash((self.cfg, jnp.dtype(self.dtype).name))

    def __eq__(self, other):
        return isinstance(other, LTXVideoVAE) and (self.cfg, self.dtype) == (other.cfg, other.dtype)

    # --- shapes --------------------------------------------------------------------------------

    def latent_shape(self, frames: int, height: int, width: int) -> tuple[int, int, int, int]:
        """`(C, F', H', W')` of a `frames x height x width` video (frames = 8k + 1)."""
        cfg = self.cfg
        return (cfg.latent_channels, (frames - 1) // cfg.temporal_ratio + 1, height // cfg.spatial_ratio,
                width // cfg.spatial_ratio)

    def _dummy_video(self):
        cfg = self.cfg
        size = cfg.spatial_ratio
        return jnp.zeros((1, 1 + cfg.temporal_ratio, size, size, cfg.in_channels), jnp.float32)

    def _dummy_latents(self):
        cfg = self.cfg
        return jnp.zeros((1, 2, 1, 1, cfg.latent_channels), jnp.float32)

    def init_params(self, rng: jax.Array) -> Params:
        """Random parameters of the full tree (the statistics buffers as zeros / ones)."""
        k1, k2 = jax.random.split(rng)
        enc = nn.unbox(self.encoder.init(k1, self._dummy_video())["params"])
        temb = jnp.zeros((1,), jnp.float32) if self.cfg.timestep_conditioning else None
        noise = [jnp.zeros(s) for s in decoder_noise_shapes(self.cfg, 1, 1)]
        dec = nn.unbox(self.decoder.init(k2, self._dummy_latents(), temb, noise)["params"])
        c = self.cfg.latent_channels
        return {"encoder": enc, "decoder": dec, "latents_mean": jnp.zeros((c,)), "latents_std": jnp.ones((c,))}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat `{"a/b/kernel": shape}` of the full tree: the translator's expected tree."""
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    # --- encode / decode -----------------------------------------------------------------------

    def encode(self, params: Params, video: jax.Array, tiling: TileSizes | None = None) -> jax.Array:
        """Posterior moments `[B, 2·C, F', H', W']` (mean, then the log-variance channel repeated) of
        video `[B, 3, F, H, W]` in [-1, 1] (F = 8k + 1; H, W multiples of 32).

        Args:
          tiling: encode in overlapping tiles as diffusers does after `enable_tiling()` (spatial) and with
            `use_framewise_decoding` (temporal); the moments then come back as a host array.
        """
        cfg = self.cfg
        _, c, f, h, w = video.shape
        if c != cfg.in_channels or (f - 1) % cfg.temporal_ratio or h % cfg.spatial_ratio or w % cfg.spatial_ratio:
            raise ValueError(f"LTX VAE encodes [B, {cfg.in_channels}, 8k+1, 32m, 32n] video, got {tuple(video.shape)}")
        plan = None if tiling is None else TilePlan((f, h, w), tiling, cfg.spatial_ratio, cfg.temporal_ratio,
                                                    decode=False)
        if plan is None or plan.single:
            return _encode(self, params["encoder"], video)
        x = pad_to(jnp.moveaxis(jnp.asarray(video, jnp.float32), 1, -1), plan.padded, (1, 2, 3))
        body = plan.body
        out = plan.run(lambda t: _encode_tile(self, body, params["encoder"], x, *_ints(t)))
        return np.moveaxis(out, -1, 1)

    def decode(self, params: Params, latents: jax.Array, timestep: jax.Array | None = None,
               noise: Sequence[jax.Array] | Callable = (), tiling: TileSizes | None = None) -> jax.Array:
        """Video `[B, 3, 8(F'-1)+1, 32H', 32W']` from unnormalised latents `[B, C, F', H', W']`.

        Args:
          timestep: the decode timestep `[B]` (0.9.1+: the decoder is timestep-conditioned; the
            pipelines pass `decode_timestep`, 0.05 in the 0.9.5+ configs), else None.
          noise: the injected spatial noise maps (0.9.1 only): the maps in the reference's order (shapes
            `decoder_noise_shapes`), or `noise(k, shape)` giving the k-th map it draws (each tile draws its
            own, tile by tile: the only form tiled decoding takes).
          tiling: decode in overlapping tiles as diffusers does after `enable_tiling()` (spatial) and with
            `use_framewise_decoding` (temporal), each tile padded to one compiled shape; the video then
            comes back as a host array.
        """
        cfg = self.cfg
        if latents.ndim != 5 or latents.shape[1] != cfg.latent_channels:
            raise ValueError(f"LTX VAE decodes latents [B, {cfg.latent_channels}, F, H, W], got {tuple(latents.shape)}")
        if cfg.timestep_conditioning and timestep is None:
            raise ValueError("this LTX VAE decoder is timestep-conditioned (0.9.1+): pass the decode timestep")
        temb = None if not cfg.timestep_conditioning else jnp.broadcast_to(jnp.asarray(timestep, jnp.float32).reshape(-1),
                                                                           (latents.shape[0],))
        plan = None if tiling is None else TilePlan(tuple(latents.shape[2:]), tiling, cfg.spatial_ratio,
                                                    cfg.temporal_ratio)
        if plan is None or plan.single:
            want = decoder_noise_shapes(cfg, *latents.shape[3:])
            if callable(noise):
                noise = [noise(k, shape) for k, shape in enumerate(want)]
            if [tuple(n.shape) for n in noise] != want:
                raise ValueError(f"the decoder adds {len(want)} noise maps of shapes {want}; got "
                                 f"{[tuple(n.shape) for n in noise]}")
            return _decode(self, params["decoder"], latents, temb, tuple(jnp.asarray(n) for n in noise))
        if any(decoder_noise_counts(cfg)) and not callable(noise):
            raise ValueError("tiled decoding draws noise maps per tile: pass noise as a callable noise(k, shape)")
        return np.moveaxis(self._decode_tiles(params["decoder"], latents, temb, noise, plan), -1, 1)

    def _decode_tiles(self, params: Params, latents, temb, noise, plan: TilePlan) -> np.ndarray:
        """The host loop: each tile's noise maps drawn in the reference's order and zero-padded to the body's."""
        z = pad_to(jnp.moveaxis(jnp.asarray(latents, jnp.float32), 1, -1), plan.padded, (1, 2, 3))
        body = plan.body
        padded_shapes = decoder_noise_shapes(self.cfg, *body[1:])
        drawn = [0]

        def run(tile):
            maps = []
            for shape, full in zip(decoder_noise_shapes(self.cfg, *tile.counts[1:]), padded_shapes):
                m = jnp.asarray(noise(drawn[0], shape), jnp.float32)
                maps.append(jnp.pad(m, ((0, full[0] - shape[0]), (0, full[1] - shape[1]))))
                drawn[0] += 1
            return _decode_tile(self, body, params, z, *_ints(tile), temb, tuple(maps))

        return plan.run(run)


def _ints(tile) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(tile.start, np.int32), np.asarray(tile.counts, np.int32)


@partial(compile_step, donate=(), static=(0,), options=xla_only_options)
def _encode(vae: LTXVideoVAE, params: Params, video: jax.Array) -> jax.Array:
    x = jnp.moveaxis(video, 1, -1).astype(vae.dtype)
    moments = vae.encoder.apply({"params": params}, x)
    return jnp.moveaxis(moments, -1, 1).astype(jnp.float32)


@partial(compile_step, donate=(), static=(0,), options=xla_only_options)
def _decode(vae: LTXVideoVAE, params: Params, latents: jax.Array, temb, noise) -> jax.Array:
    z = jnp.moveaxis(latents, 1, -1).astype(vae.dtype)
    noise = tuple(n.astype(vae.dtype) for n in noise)
    video = vae.decoder.apply({"params": params}, z, temb, noise)
    return jnp.moveaxis(video, -1, 1).astype(jnp.float32)


@partial(compile_step, donate=(), static=(0, 1), options=xla_only_options)
def _encode_tile(vae: LTXVideoVAE, body: tuple[int, int, int], params: Params, video, start, counts) -> jax.Array:
    """One padded tile of channels-last `video` at `start` (every tile: this one compiled unit)."""
    x = window(video, start, body).astype(vae.dtype)
    return vae.encoder.apply({"params": params}, x, Extent(body, counts)).astype(jnp.float32)


@partial(compile_step, donate=(), static=(0, 1), options=xla_only_options)
def _decode_tile(vae: LTXVideoVAE, body: tuple[int, int, int], params: Params, z, start, counts, temb,
                 noise) -> jax.Array:
    """One padded tile of channels-last latents `z` at `start` -> its channels-last video."""
    x = window(z, start, body).astype(vae.dtype)
    noise = tuple(n.astype(vae.dtype) for n in noise)
    return vae.decoder.apply({"params": params}, x, temb, noise, Extent(body, counts)).astype(jnp.float32)


# ---------------------------------------------------------------------------------------------
# Memory


# XLA's buffer assignment for one compiled decode keeps this many fp32 maps of `[frames, H/p, W/p,
# decoder_block_out_channels[0]]` alive at its widest point (the last upsampler and the full-resolution
# resnets after it): about 2.6 (CPU, tiles of 2-3 latent frames and 4-8 latents a side); the encoder
# about 4.2 maps of its first level `[frames, H/p, W/p, block_out_channels[0]]`.
# tests/ltx_video/test_vae.py checks the decode figure against `memory_analysis()`.
DECODE_LIVE_MAPS = 2.6
ENCODE_LIVE_MAPS = 4.2


def decode_peak_bytes(cfg: VAEConfig, frames: int, height: int, width: int, tiling: TileSizes | None = None) -> int:
    """The decode's device working set beyond its weights (`vae_tiling.decode_working_set`)."""
    return decode_working_set(frames, height, width, spatial_ratio=cfg.spatial_ratio, temporal_ratio=cfg.temporal_ratio,
                              patch=cfg.patch_size, channels=cfg.decoder_block_out_channels[0],
                              out_channels=cfg.out_channels, live_maps=DECODE_LIVE_MAPS, tiling=tiling)


def encode_peak_bytes(cfg: VAEConfig, frames: int, height: int, width: int, tiling: TileSizes | None = None) -> int:
    """The encode's device working set beyond its weights (`vae_tiling.encode_working_set`)."""
    return encode_working_set(frames, height, width, spatial_ratio=cfg.spatial_ratio, temporal_ratio=cfg.temporal_ratio,
                              patch=cfg.patch_size, channels=cfg.block_out_channels[0], live_maps=ENCODE_LIVE_MAPS,
                              tiling=tiling)
