"""LTX-2 video VAE (follows diffusers `AutoencoderKLLTX2Video`): causal 3D conv encoder and decoder.

Activations run channels-last (`[B, F, H, W, C]`, what XLA's convolutions want); `LTX2VideoVAE.encode`
and `.decode` take and return diffusers' `[B, C, F, H, W]`. Every convolution pads time by repeating
its edge frames (causally: the first frame only) and space with zeros (encoder) or reflection
(decoder); resampling is space-to-depth / depth-to-space with a parameter-free residual path.
The 32x spatial / 8x temporal compression comes from a 4x4 patchify plus three to four 2x stages.

`encode` / `decode` take `tiling=`: diffusers' overlapping tiles (`enable_tiling()`, and its frame-wise
windows), a host loop over one compiled tile body (`vidax.zoo.parts.vae_tiling`); every module takes the
padded tile's `Extent` so that each convolution sees the reference's padding at the tile's real edge.

Parameter paths mirror diffusers' (`encoder/down_blocks_0/resnets_1/conv1/conv/kernel`,
`decoder/up_blocks_2/upsamplers_0/conv/conv/kernel`); the latent statistics `latents_mean` /
`latents_std` ride in the same tree (the pipeline normalises with them).

LTX-Video 0.9.x's VAE (`vidax.zoo.ltx_video.vae`) has the same causal conv, per-channel RMS norm and
depth-to-space upsampler; LTX-2 adds the space-to-depth downsampler, runtime causality and the reflect
padding.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.compute.layers import LayerNorm, MLPEmbedder, logical_param, timestep_sinusoid
from vidax.zoo.compute.runtime import compile_step, xla_only_options  # no Pallas kernel in the VAE
from vidax.zoo.ltx2.config import VideoVAEConfig
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


def rms_channels(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    """diffusers `PerChannelRMSNorm` over the channel axis (last here)."""
    x32 = x.astype(jnp.float32)
    return (x32 / jnp.sqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)).astype(x.dtype)


class CausalConv3d(nn.Module):
    """diffusers `LTX2VideoCausalConv3d` (params under `conv`): time padded by edge frames, space by
    `padding_mode`, then a VALID convolution."""

    features: int
    kernel: int = 3
    stride: tuple[int, int, int] = (1, 1, 1)
    padding_mode: str = "zeros"

    @nn.compact
    def __call__(self, x: jax.Array, causal: bool, counts=None) -> jax.Array:
        k = self.kernel
        if counts is not None and k > 1:  # a padded tile: what a tile cut at its real edge would see
            x = fix_edges(x, counts, time=None if causal else "replicate", space=self.padding_mode)
        if causal:
            x = jnp.concatenate([jnp.repeat(x[:, :1], k - 1, axis=1), x], axis=1)
        else:
            edge = (k - 1) // 2
            x = jnp.concatenate([jnp.repeat(x[:, :1], edge, axis=1), x, jnp.repeat(x[:, -1:], edge, axis=1)], axis=1)
        pad = ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2), (0, 0))
        x = jnp.pad(x, pad, mode="reflect" if self.padding_mode == "reflect" else "constant")
        return Conv3d(self.features, self.kernel, self.stride, name="conv")(x)


def _counts(extent: Extent | None, x: jax.Array):
    """A padded tile's real (frames, height, width) at `x`'s resolution (None: a whole video)."""
    return None if extent is None else extent.at(x.shape[1:4])


class Conv3d(nn.Module):
    """A plain `nn.Conv3d` without padding: kernel `[k, k, k, in, out]` (the spec's conv op)."""

    features: int
    kernel: int = 1
    stride: tuple[int, int, int] = (1, 1, 1)

    @nn.compact
    def __call__(self, x):
        k = self.kernel
        w = logical_param(self, "kernel", (k, k, k, x.shape[-1], self.features), (None, None, None, "conv_in", "conv_out"))
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), self.stride, "VALID",
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        return y + b.astype(x.dtype)


class TimestepEmbedder(nn.Module):
    """diffusers `PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)` (module `timestep_embedder`)."""

    dim: int

    @nn.compact
    def __call__(self, t):
        return MLPEmbedder(self.dim, dtype=jnp.float32, name="timestep_embedder")(timestep_sinusoid(t, 256))


class ResnetBlock3d(nn.Module):
    """diffusers `LTX2VideoResnetBlock3d` (no noise injection: no release uses it)."""

    features: int
    eps: float
    padding_mode: str
    timestep_conditioning: bool = False

    @nn.compact
    def __call__(self, x, temb, causal: bool, extent: Extent | None = None):
        c_in = x.shape[-1]
        conv = lambda name: CausalConv3d(self.features, padding_mode=self.padding_mode, name=name)  # noqa: E731
        counts = _counts(extent, x)
        h = rms_channels(x)
        if self.timestep_conditioning:
            table = logical_param(self, "scale_shift_table", (4, c_in), (None, "conv_in"))
            mod = temb.reshape(temb.shape[0], 4, -1) + table[None].astype(jnp.float32)  # [B, 4, C]
            shift1, scale1, shift2, scale2 = (mod[:, i, None, None, None] for i in range(4))
            h = h * (1 + scale1) + shift1
        h = conv("conv1")(jax.nn.silu(h), causal, counts)
        h = rms_channels(h)
        if self.timestep_conditioning:
            h = h * (1 + scale2) + shift2
        h = conv("conv2")(jax.nn.silu(h), causal, counts)
        if c_in != self.features:
            x = LayerNorm(self.eps, name="norm3")(x)
            x = Conv3d(self.features, name="conv_shortcut")(x)
        return h + x


def _space_to_depth(x, stride):
    """`[B, F, H, W, C]` -> `[B, F/s0, H/s1, W/s2, C*s0*s1*s2]`, channels (c, s0, s1, s2)."""
    b, f, h, w, c = x.shape
    s0, s1, s2 = stride
    x = x.reshape(b, f // s0, s0, h // s1, s1, w // s2, s2, c)
    return x.transpose(0, 1, 3, 5, 7, 2, 4, 6).reshape(b, f // s0, h // s1, w // s2, c * s0 * s1 * s2)


def _depth_to_space(x, stride):
    """Inverse of `_space_to_depth`."""
    b, f, h, w, c = x.shape
    s0, s1, s2 = stride
    x = x.reshape(b, f, h, w, c // (s0 * s1 * s2), s0, s1, s2)
    return x.transpose(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, f * s0, h * s1, w * s2, -1)


class Downsampler3d(nn.Module):
    """diffusers `LTX2VideoDownsampler3d`: conv then space-to-depth, plus the grouped mean of the input's."""

    features: int
    stride: tuple[int, int, int]
    padding_mode: str

    @nn.compact
    def __call__(self, x, causal: bool, extent: Extent | None = None):
        s0 = self.stride[0]
        counts = _counts(extent, x)
        if counts is not None:  # the conv sees s0 - 1 more frames in front
            counts = (counts[0] + s0 - 1, *counts[1:])
        x = jnp.concatenate([x[:, : s0 - 1], x], axis=1)  # the first frame stands in for the missing past
        residual = _space_to_depth(x, self.stride)
        group = residual.shape[-1] // self.features
        residual = residual.reshape(*residual.shape[:-1], self.features, group).mean(axis=-1)
        conv = CausalConv3d(self.features // (s0 * self.stride[1] * self.stride[2]), padding_mode=self.padding_mode,
                            name="conv")
        return _space_to_depth(conv(x, causal, counts), self.stride) + residual


class Upsampler3d(nn.Module):
    """diffusers `LTX2VideoUpsampler3d`: conv then depth-to-space (first `s0 - 1` frames dropped),
    plus the input's depth-to-space tiled over channels when `residual`."""

    stride: tuple[int, int, int]
    residual: bool
    upscale_factor: int
    padding_mode: str

    @nn.compact
    def __call__(self, x, causal: bool, extent: Extent | None = None):
        s0, s1, s2 = self.stride
        volume = s0 * s1 * s2
        out = CausalConv3d(x.shape[-1] * volume // self.upscale_factor, padding_mode=self.padding_mode, name="conv")
        h = _depth_to_space(out(x, causal, _counts(extent, x)), self.stride)[:, s0 - 1:]
        if self.residual:
            res = _depth_to_space(x, self.stride)
            res = jnp.tile(res, (1, 1, 1, 1, volume // self.upscale_factor))[:, s0 - 1:]
            h = h + res
        return h


_STRIDES = {"spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}


class DownBlock(nn.Module):
    """diffusers `LTX2VideoDownBlock3D`: resnets at the input width, then the downsampler."""

    features: int
    layers: int
    downsample: str | None  # None, "conv" or a `_STRIDES` key
    eps: float
    padding_mode: str

    @nn.compact
    def __call__(self, x, causal: bool, extent: Extent | None = None):
        width = x.shape[-1]
        for j in range(self.layers):
            x = ResnetBlock3d(width, self.eps, self.padding_mode, name=f"resnets_{j}")(x, None, causal, extent)
        if self.downsample == "conv":
            x = CausalConv3d(width, stride=(2, 2, 2), padding_mode=self.padding_mode, name="downsamplers_0")(
                x, causal, _counts(extent, x))
        elif self.downsample is not None:
            x = Downsampler3d(self.features, _STRIDES[self.downsample], self.padding_mode, name="downsamplers_0")(
                x, causal, extent)
        return x


class MidBlock(nn.Module):
    """diffusers `LTX2VideoMidBlock3d` (its own timestep embedder when conditioned)."""

    layers: int
    eps: float
    padding_mode: str
    conditioned: bool = False

    @nn.compact
    def __call__(self, x, temb, causal: bool, extent: Extent | None = None):
        width = x.shape[-1]
        t = TimestepEmbedder(width * 4, name="time_embedder")(temb.reshape(-1)) if self.conditioned else None
        for j in range(self.layers):
            x = ResnetBlock3d(width, self.eps, self.padding_mode, self.conditioned, name=f"resnets_{j}")(
                x, t, causal, extent)
        return x


class UpBlock(nn.Module):
    """diffusers `LTX2VideoUpBlock3d`: (conv_in resnet), upsampler, resnets at the output width.

    `in_features` is diffusers' bookkeeping `in_channels` (previous width / factor): it decides
    whether a `conv_in` exists and the timestep embedder's width; the upsampler reads the actual
    input (`features * factor` channels in every release).
    """

    in_features: int
    features: int
    layers: int
    upsample: str | None
    residual: bool
    factor: int
    eps: float
    padding_mode: str
    conditioned: bool = False

    @nn.compact
    def __call__(self, x, temb, causal: bool, extent: Extent | None = None):
        if self.in_features != self.features:
            if self.conditioned:
                raise ValueError("LTX-2 video VAE: an up block with a channel change under timestep "
                                 "conditioning (diffusers would feed it the raw timestep)")
            x = ResnetBlock3d(self.features, self.eps, self.padding_mode, name="conv_in")(x, None, causal, extent)
        t = TimestepEmbedder(self.in_features * 4, name="time_embedder")(temb.reshape(-1)) if self.conditioned else None
        if self.upsample is not None:
            x = Upsampler3d(_STRIDES[self.upsample], self.residual, self.factor, self.padding_mode,
                            name="upsamplers_0")(x, causal, extent)
        for j in range(self.layers):
            x = ResnetBlock3d(self.features, self.eps, self.padding_mode, self.conditioned, name=f"resnets_{j}")(
                x, t, causal, extent)
        return x


class Encoder(nn.Module):
    """diffusers `LTX2VideoEncoder3d`; returns the posterior's mean `[B, F', H', W', latent_channels]`."""

    cfg: VideoVAEConfig

    @nn.compact
    def __call__(self, x, causal: bool, extent: Extent | None = None):
        cfg = self.cfg
        mode, eps = cfg.encoder_spatial_padding_mode, cfg.resnet_norm_eps
        x = _patchify(x, cfg)
        x = CausalConv3d(cfg.latent_channels, padding_mode=mode, name="conv_in")(x, causal, _counts(extent, x))
        for i, out in enumerate(cfg.block_out_channels):
            kind = cfg.downsample_type[i] if cfg.spatio_temporal_scaling[i] else None
            x = DownBlock(out, cfg.layers_per_block[i], kind, eps, mode, name=f"down_blocks_{i}")(x, causal, extent)
        x = MidBlock(cfg.layers_per_block[-1], eps, mode, name="mid_block")(x, None, causal, extent)
        x = CausalConv3d(cfg.latent_channels + 1, padding_mode=mode, name="conv_out")(jax.nn.silu(rms_channels(x)),
                                                                                      causal, _counts(extent, x))
        return x[..., : cfg.latent_channels]  # the mean; the last channel is the shared log-variance


class Decoder(nn.Module):
    """diffusers `LTX2VideoDecoder3d`; returns pixels `[B, F, H, W, out_channels]`."""

    cfg: VideoVAEConfig

    @nn.compact
    def __call__(self, z, temb, causal: bool, extent: Extent | None = None):
        cfg = self.cfg
        mode, eps, cond = cfg.decoder_spatial_padding_mode, cfg.resnet_norm_eps, cfg.timestep_conditioning
        channels = tuple(reversed(cfg.decoder_block_out_channels))
        layers = tuple(reversed(cfg.decoder_layers_per_block))
        scaling = tuple(reversed(cfg.decoder_spatio_temporal_scaling))
        residual = tuple(reversed(cfg.upsample_residual))
        factors = tuple(reversed(cfg.upsample_factor))
        kinds = cfg.upsample_type  # diffusers reverses every per-block list but this one: it indexes it as given
        x = CausalConv3d(channels[0], padding_mode=mode, name="conv_in")(z, causal, _counts(extent, z))
        if cond:
            multiplier = logical_param(self, "timestep_scale_multiplier", (), (), nn.initializers.constant(1000.0))
            temb = temb.astype(jnp.float32) * multiplier.astype(jnp.float32)
        x = MidBlock(layers[0], eps, mode, cond, name="mid_block")(x, temb, causal, extent)
        width = channels[0]
        for i, out in enumerate(channels):
            block_in, width = width // factors[i], out // factors[i]
            x = UpBlock(block_in, width, layers[i + 1], kinds[i] if scaling[i] else None, residual[i], factors[i],
                        eps, mode, cond, name=f"up_blocks_{i}")(x, temb, causal, extent)
        x = rms_channels(x)
        if cond:
            width = x.shape[-1]
            t = TimestepEmbedder(width * 2, name="time_embedder")(temb.reshape(-1))
            table = logical_param(self, "scale_shift_table", (2, width), (None, "conv_in"))
            mod = t.reshape(t.shape[0], 2, -1) + table[None].astype(jnp.float32)
            x = x * (1 + mod[:, 1, None, None, None]) + mod[:, 0, None, None, None]
        out = cfg.out_channels * cfg.patch_size ** 2 * cfg.patch_size_t
        x = CausalConv3d(out, padding_mode=mode, name="conv_out")(jax.nn.silu(x), causal, _counts(extent, x))
        return _unpatchify(x, cfg)


def _patchify(x, cfg: VideoVAEConfig):
    """`[B, F, H, W, C]` -> `[B, F/pt, H/p, W/p, C*pt*p*p]`, channels (c, pt, pw, ph): diffusers' order."""
    b, f, h, w, c = x.shape
    p, pt = cfg.patch_size, cfg.patch_size_t
    x = x.reshape(b, f // pt, pt, h // p, p, w // p, p, c)  # [B, F', pt, H', ph, W', pw, C]
    return x.transpose(0, 1, 3, 5, 7, 2, 6, 4).reshape(b, f // pt, h // p, w // p, -1)


def _unpatchify(x, cfg: VideoVAEConfig):
    """Inverse of `_patchify`."""
    b, f, h, w, _ = x.shape
    p, pt = cfg.patch_size, cfg.patch_size_t
    x = x.reshape(b, f, h, w, -1, pt, p, p)  # [..., c, pt, pw, ph]
    return x.transpose(0, 1, 5, 2, 7, 3, 6, 4).reshape(b, f * pt, h * p, w * p, -1)


class VideoVAEModule(nn.Module):
    """The parameter tree: `encoder`, `decoder`, `latents_mean`, `latents_std`."""

    cfg: VideoVAEConfig

    def setup(self):
        c = self.cfg.latent_channels
        self.encoder = Encoder(self.cfg)
        self.decoder = Decoder(self.cfg)
        self.latents_mean = logical_param(self, "latents_mean", (c,), (None,), nn.initializers.zeros)
        self.latents_std = logical_param(self, "latents_std", (c,), (None,), nn.initializers.ones)

    def __call__(self, x, temb=None):  # init only: touches every parameter
        z = self.encoder(x, self.cfg.encoder_causal)
        return self.decoder(z, temb, self.cfg.decoder_causal), self.latents_mean, self.latents_std

    def encode(self, x, causal, extent=None):
        return self.encoder(x, causal, extent)

    def decode(self, z, temb, causal, extent=None):
        return self.decoder(z, temb, causal, extent)


class LTX2VideoVAE:
    """Encode / decode with diffusers' `[B, C, F, H, W]` layout.

    `encode(params, video)` returns the posterior mean (diffusers' `latent_dist.mode()`), not
    normalised; `decode(params, z, timestep)` takes denormalised latents (as `vae.decode`) and the
    decode timestep when the config is timestep-conditioned. `causal=None` is the config's setting
    (`causal or config` exactly as diffusers combines them).
    """

    def __init__(self, cfg: VideoVAEConfig, dtype: Any = jnp.float32):
        self.cfg, self.dtype = cfg, dtype
        self.module = VideoVAEModule(cfg)

    def init_params(self, rng: jax.Array) -> Params:
        cfg = self.cfg
        f = 1 + cfg.temporal_ratio
        x = jnp.zeros((1, f, cfg.spatial_ratio, cfg.spatial_ratio, cfg.in_channels), jnp.float32)
        return nn.unbox(self.module.init(rng, x, jnp.zeros((1,)))["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def encode(self, params: Params, video: jax.Array, causal: bool | None = None,
               tiling: TileSizes | None = None) -> jax.Array:
        """`[B, C, F, H, W]` (F = 1 + 8k, H and W multiples of 32) -> mean latents `[B, 128, F', H', W']`.

        `tiling`: overlapping tiles as diffusers after `enable_tiling()` (spatial) and with
        `use_framewise_decoding` (temporal): a host loop over one compiled tile; a host array back.
        """
        cfg = self.cfg
        _, _, f, h, w = video.shape
        if (f - 1) % cfg.temporal_ratio or h % cfg.spatial_ratio or w % cfg.spatial_ratio:
            raise ValueError(f"LTX-2 video VAE: encode takes 1 + {cfg.temporal_ratio}k frames of multiples of "
                             f"{cfg.spatial_ratio} pixels, got {video.shape[2:]}")
        causal = bool(causal) or cfg.encoder_causal
        x = jnp.moveaxis(video.astype(self.dtype), 1, -1)
        plan = None if tiling is None else TilePlan((f, h, w), tiling, cfg.spatial_ratio, cfg.temporal_ratio,
                                                    decode=False)
        if plan is not None and not plan.single:
            x = pad_to(x, plan.padded, (1, 2, 3))
            return np.moveaxis(plan.run(lambda t: _encode_tile(cfg, causal, plan.body, params, x, *_ints(t))), -1, 1)
        z = self.module.apply({"params": params}, x, causal, method=VideoVAEModule.encode)
        return jnp.moveaxis(z, -1, 1)

    def decode(self, params: Params, z: jax.Array, timestep: jax.Array | None = None,
               causal: bool | None = None, tiling: TileSizes | None = None) -> jax.Array:
        """`[B, 128, F', H', W']` -> video `[B, 3, 1 + 8 (F' - 1), 32 H', 32 W']` in about [-1, 1].

        `tiling`: decode in overlapping tiles as `encode` does (a host array back).
        """
        cfg = self.cfg
        if cfg.timestep_conditioning and timestep is None:
            raise ValueError("LTX-2 video VAE: this decoder is timestep-conditioned; pass the decode timestep")
        causal = bool(causal) or cfg.decoder_causal
        x = jnp.moveaxis(z.astype(self.dtype), 1, -1)
        t = None if timestep is None else jnp.broadcast_to(jnp.asarray(timestep, jnp.float32), (z.shape[0],))
        plan = None if tiling is None else TilePlan(tuple(z.shape[2:]), tiling, cfg.spatial_ratio, cfg.temporal_ratio)
        if plan is not None and not plan.single:
            x = pad_to(x, plan.padded, (1, 2, 3))
            return np.moveaxis(plan.run(lambda tile: _decode_tile(cfg, causal, plan.body, params, x, *_ints(tile), t)),
                               -1, 1)
        out = self.module.apply({"params": params}, x, t, causal, method=VideoVAEModule.decode)
        return jnp.moveaxis(out, -1, 1)


def _ints(tile) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(tile.start, np.int32), np.asarray(tile.counts, np.int32)


@partial(compile_step, donate=(), static=(0, 1, 2), options=xla_only_options)
def _encode_tile(cfg: VideoVAEConfig, causal: bool, body: tuple[int, int, int], params: Params, x,
                 start, counts) -> jax.Array:
    """One padded tile of channels-last pixels `x` at `start` (every tile: this one compiled unit)."""
    tile = window(x, start, body)
    return VideoVAEModule(cfg).apply({"params": params}, tile, causal, Extent(body, counts),
                                     method=VideoVAEModule.encode)


@partial(compile_step, donate=(), static=(0, 1, 2), options=xla_only_options)
def _decode_tile(cfg: VideoVAEConfig, causal: bool, body: tuple[int, int, int], params: Params, z,
                 start, counts, temb) -> jax.Array:
    """One padded tile of channels-last latents `z` at `start` -> its channels-last video."""
    tile = window(z, start, body)
    return VideoVAEModule(cfg).apply({"params": params}, tile, temb, causal, Extent(body, counts),
                                     method=VideoVAEModule.decode)


# ---------------------------------------------------------------------------------------------
# Memory

# XLA's buffer assignment for one compiled decode keeps this many fp32 maps of `[frames, H/p, W/p,
# decoder_block_out_channels[0]]` alive at its widest point (the last upsampler and the resnets after
# it): about 3.1 (CPU, tiles of 2-3 latent frames and 4-8 latents a side; the reflect padding copies);
# the encoder about 4.2 maps of its first level `[frames, H/p, W/p, latent_channels]`.
# tests/ltx2/test_vae.py checks the decode figure against `memory_analysis()`.
DECODE_LIVE_MAPS = 3.1
ENCODE_LIVE_MAPS = 4.2


def decode_peak_bytes(cfg: VideoVAEConfig, frames: int, height: int, width: int,
                      tiling: TileSizes | None = None) -> int:
    """The decode's device working set beyond its weights (`vae_tiling.decode_working_set`)."""
    return decode_working_set(frames, height, width, spatial_ratio=cfg.spatial_ratio, temporal_ratio=cfg.temporal_ratio,
                              patch=cfg.patch_size, channels=cfg.decoder_block_out_channels[0],
                              out_channels=cfg.out_channels, live_maps=DECODE_LIVE_MAPS, tiling=tiling)


def encode_peak_bytes(cfg: VideoVAEConfig, frames: int, height: int, width: int,
                      tiling: TileSizes | None = None) -> int:
    """The encode's device working set beyond its weights (`vae_tiling.encode_working_set`)."""
    return encode_working_set(frames, height, width, spatial_ratio=cfg.spatial_ratio, temporal_ratio=cfg.temporal_ratio,
                              patch=cfg.patch_size, channels=cfg.latent_channels, live_maps=ENCODE_LIVE_MAPS,
                              tiling=tiling)
