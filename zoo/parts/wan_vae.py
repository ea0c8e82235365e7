"""The Wan VAE: Wan2.1 and Wan2.2 (follow diffusers `AutoencoderKLWan`), shipped by Wan, Cosmos-Predict2.5
and Cosmos3: causal 3D conv encoder and decoder.

Activations run channels-last (`[B, F, H, W, C]`), the layout XLA's convolutions want; the public
`WanVAE.encode` / `WanVAE.decode` take and return diffusers' `[B, C, F, H, W]`.

Time is causal and processed in chunks as the reference does: the encoder sees the first frame,
then chunks of 4 frames; the decoder one latent frame at a time. Every causal convolution keeps the
frames it needs from the previous chunk in a flax "cache" collection, an explicit pytree passed into
and out of each chunk. A chunk is one compiled unit called from a host loop; the first chunk (which
bypasses the time resamplers) and the steady-state chunk compile once each.

Parameter paths mirror diffusers' module names (`encoder/down_blocks_0/conv1/kernel`,
`decoder/up_blocks_1/upsamplers_0/time_conv/kernel`, `quant_conv/kernel`); RMS-norm scales keep the
reference's bare parameter name `gamma`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from vidax.zoo.compute.attention import attention, local_attention
from vidax.zoo.parts.configs import pick_fields
from vidax.zoo.compute.layers import logical_param
from vidax.zoo.compute.mesh import DATA, SEQUENCE, TENSOR
from vidax.zoo.compute.runtime import active_mesh, compile_step, platform, xla_only_options
from vidax.zoo.compute.shape_memo import remembered
from vidax.zoo.compute.sharding import constrain
from vidax.zoo.parts.vae_layers import time_taps_conv
from vidax.translator import VidaxError

Params = dict[str, Any]

# The VAE's own sharding rules: weights replicated; activations split along their width over every
# mesh axis (convolutions exchange halos, the per-frame attention gathers). Width, because it is
# divisible by 8 at every decoder level for the native 480p / 720p / 704p sizes where height is not.
WAN_VAE_RULES = (
    ("batch", None),
    ("act_width", (DATA, TENSOR, SEQUENCE)),
    ("conv_in", None),
    ("conv_out", None),
    ("norm", None),
)
_ACTIVATION_AXES = ("batch", None, None, "act_width", None)  # [B, F, H, W, C]

ENCODE_CHUNK_FRAMES = 4  # after the first frame, the reference encodes 4 frames (1 latent) at a time


class WanVAEError(VidaxError, ValueError):
    """An input the Wan VAE cannot process (frame count, size)."""


# ---------------------------------------------------------------------------------------------
# Config


# Latent statistics of the released checkpoints (diffusers' defaults for Wan2.1; Wan2.2's from the
# official `wan/modules/vae2_2.py`), used when a config does not carry its own.
WAN21_LATENTS_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)
WAN21_LATENTS_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)
WAN22_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)
WAN22_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WanVAEConfig:
    """diffusers `AutoencoderKLWan` config (field names as in its config.json)."""

    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    attn_scales: tuple[float, ...] = ()
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = WAN21_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN21_LATENTS_STD
    is_residual: bool = False
    in_channels: int = 3
    out_channels: int = 3
    patch_size: int | None = None
    scale_factor_temporal: int = 4
    scale_factor_spatial: int = 8

    IGNORED: ClassVar[Mapping[str, str]] = {"dropout": "training only: residual-block dropout"}

    def __post_init__(self):
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise WanVAEError(f"latents_mean/std need {self.z_dim} values (z_dim), got "
                              f"{len(self.latents_mean)}/{len(self.latents_std)}")
        if len(self.temperal_downsample) != len(self.dim_mult) - 1:
            raise WanVAEError(f"temperal_downsample needs {len(self.dim_mult) - 1} entries, one per down level")

    @property
    def decoder_dim(self) -> int:
        return self.base_dim if self.decoder_base_dim is None else self.decoder_base_dim

    @property
    def patch(self) -> int:
        return self.patch_size or 1

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "WanVAEConfig":
        """From diffusers' `vae/config.json` (a dict); a key that is neither a field nor in `IGNORED` is refused."""
        kwargs = pick_fields(cls, hf)
        if kwargs.get("scale_factor_temporal") is None:
            kwargs.pop("scale_factor_temporal", None)
        if kwargs.get("scale_factor_spatial") is None:
            kwargs.pop("scale_factor_spatial", None)
        return cls(**kwargs)


# The official single-file checkpoints carry no config: these are the released models'
# (official `wan/modules/vae2_1.py` `_video_vae`, `vae2_2.py` `Wan2_2_VAE`).
WAN21_VAE = WanVAEConfig()
WAN22_VAE = WanVAEConfig(
    base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True, patch_size=2,
    in_channels=12, out_channels=12, scale_factor_spatial=16,
    latents_mean=WAN22_LATENTS_MEAN, latents_std=WAN22_LATENTS_STD,
)


def normalize_latents(config: WanVAEConfig, latents: jax.Array) -> jax.Array:
    """VAE latents `[B, z, F, H, W]` -> the DiT's latent space: `(z - mean) / std` per channel."""
    mean, std = _stats(config, latents.ndim)
    return ((latents - mean) / std).astype(latents.dtype)


def denormalize_latents(config: WanVAEConfig, latents: jax.Array) -> jax.Array:
    """The DiT's latents -> VAE latents, ready for `decode`: `z * std + mean` per channel."""
    mean, std = _stats(config, latents.ndim)
    return (latents * std + mean).astype(latents.dtype)


def _stats(config: WanVAEConfig, ndim: int) -> tuple[np.ndarray, np.ndarray]:
    shape = (1, config.z_dim) + (1,) * (ndim - 2)
    return (np.asarray(config.latents_mean, np.float32).reshape(shape),
            np.asarray(config.latents_std, np.float32).reshape(shape))


# ---------------------------------------------------------------------------------------------
# Layers


def _conv_kernel(module: nn.Module, shape: tuple[int, ...], features: int):
    spatial = (None,) * (len(shape) - 2)
    w = logical_param(module, "kernel", shape, (*spatial, "conv_in", "conv_out"))
    b = logical_param(module, "bias", (features,), ("conv_out",), nn.initializers.zeros)
    return w, b


class CausalConv3d(nn.Module):
    """diffusers `WanCausalConv3d`: zero padding in space, causal in time with the past from the cache.

    The cache (collection "cache", entry `past`) holds the last `kt - stride_t` frames of the input
    stream (zeros before the first frame). `mode` is for the time resamplers' first chunk, which the
    reference passes through unconvolved: "remember" only records the input's tail, "start" opens
    the stream with an all-zero past (the upsampler's time stream starts after the first frame).
    """

    features: int
    kernel: tuple[int, int, int] = (3, 3, 3)
    stride_t: int = 1

    @nn.compact
    def __call__(self, x: jax.Array, mode: str = "conv") -> jax.Array:
        if mode not in ("conv", "remember", "start"):
            raise ValueError(f"CausalConv3d mode must be conv, remember or start, got {mode!r}")
        kt, kh, kw = self.kernel
        past_frames = kt - self.stride_t
        if past_frames > 0:
            past = self.variable("cache", "past", jnp.zeros, (x.shape[0], past_frames, *x.shape[2:]), x.dtype)
            if mode == "start":
                return x
            stream = jnp.concatenate([past.value, x], axis=1)
            past.value = stream[:, -past_frames:]
            if mode == "remember":
                return x
            x = stream
        w, b = _conv_kernel(self, (kt, kh, kw, x.shape[-1], self.features), self.features)
        return time_taps_conv(x, w.astype(x.dtype), self.stride_t) + b.astype(x.dtype)


class Conv2d(nn.Module):
    """torch `Conv2d` applied to every frame (kernel `[kh, kw, I, O]`)."""

    features: int
    kernel: int = 3
    stride: int = 1
    padding: tuple[tuple[int, int], tuple[int, int]] = ((1, 1), (1, 1))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t = x.shape[:2]
        k = self.kernel
        w, bias = _conv_kernel(self, (k, k, x.shape[-1], self.features), self.features)
        y = jax.lax.conv_general_dilated(
            x.reshape(b * t, *x.shape[2:]), w.astype(x.dtype), (self.stride, self.stride), self.padding,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y.reshape(b, t, *y.shape[1:]) + bias.astype(x.dtype)


class RMSNorm(nn.Module):
    """diffusers `WanRMS_norm`: `x / max(||x||_C, 1e-12) * sqrt(C) * gamma` (F.normalize), in fp32."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        gamma = logical_param(self, "gamma", (c,), ("norm",), nn.initializers.ones)
        x32 = x.astype(jnp.float32)
        norm = jnp.sqrt(jnp.sum(jnp.square(x32), axis=-1, keepdims=True))
        return (x32 / jnp.maximum(norm, 1e-12) * (c**0.5) * gamma).astype(x.dtype)


class ResidualBlock(nn.Module):
    """diffusers `WanResidualBlock`: (norm, SiLU, causal conv) twice, plus a 1x1x1 shortcut conv."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        x = constrain(x, _ACTIVATION_AXES)
        shortcut = x
        if x.shape[-1] != self.features:
            shortcut = CausalConv3d(self.features, (1, 1, 1), name="conv_shortcut")(x)
        h = CausalConv3d(self.features, name="conv1")(nn.silu(RMSNorm(name="norm1")(x)))
        h = CausalConv3d(self.features, name="conv2")(nn.silu(RMSNorm(name="norm2")(h)))
        return h + shortcut


class AttentionBlock(nn.Module):
    """diffusers `WanAttentionBlock`: one-head self-attention within each frame."""

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        b, t, h, w, c = x.shape
        qkv = Conv2d(3 * c, kernel=1, padding=((0, 0), (0, 0)), name="to_qkv")(RMSNorm(name="norm")(x))
        q, k, v = jnp.split(qkv.reshape(b * t, h * w, 1, 3 * c), 3, axis=-1)  # [BT, HW, 1, C] each
        out = frame_attention(q, k, v).reshape(b, t, h, w, c)
        return x + Conv2d(c, kernel=1, padding=((0, 0), (0, 0)), name="proj")(out)


def frame_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """One-head attention over a frame's pixels `[BT, HW, 1, C]`.

    On one device: the shared entry point. Under a mesh the entry point's DiT plan (heads on
    "tensor", Ulysses on "sequence") cannot split one head, so the queries split over every device
    and each attends to the whole frame's keys and values with the entry point's local kernel.
    """
    mesh = active_mesh()
    if mesh is None or mesh.size == 1:
        # On a TPU the one head's scores fit (0.8 GB at 720p) and XLA's own products compile in seconds where a
        # Pallas kernel at this head width (384) took most of the 940 s XLA's v5e compiler spent on the decoder's
        # latent-resolution unit here
        return attention(q, k, v, implementation="plain" if platform() == "tpu" else None)
    s = q.shape[1]
    q = jnp.pad(q, ((0, 0), (0, -s % mesh.size), (0, 0), (0, 0)))
    split = PartitionSpec(None, tuple(mesh.axis_names))
    local = partial(local_attention, kv_mask=None, scale=q.shape[-1] ** -0.5, implementation=None)
    out = jax.shard_map(lambda q, k, v: local(q, k, v), in_specs=(split, PartitionSpec(), PartitionSpec()),
                        out_specs=split, check_vma=False)(q, k, v)
    return out[:, :s]


def upsample_nearest2x(x: jax.Array) -> jax.Array:
    """torch `nearest-exact` at scale 2 on H and W: every pixel repeated twice."""
    return jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)


class Resample(nn.Module):
    """diffusers `WanResample`: 2x spatial up/down sampling, with a causal time conv for the *3d modes.

    Upsampling doubles time by a conv to 2C channels interleaved into two frames; downsampling
    halves it by a stride-2 conv over the previous frame and the chunk. In the first chunk both
    pass the (single) frame through, as the reference does.
    """

    mode: str  # "upsample2d" | "upsample3d" | "downsample2d" | "downsample3d"
    features: int  # output channels of the spatial conv

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        x = constrain(x, _ACTIVATION_AXES)
        b, t, h, w, c = x.shape
        if self.mode == "upsample3d":
            time_conv = CausalConv3d(2 * c, (3, 1, 1), name="time_conv")
            if first:
                time_conv(x, mode="start")
            else:
                y = time_conv(x).reshape(b, t, h, w, 2, c)
                x = y.transpose(0, 1, 4, 2, 3, 5).reshape(b, 2 * t, h, w, c)  # frame 2i+s from channel block s
        if self.mode.startswith("upsample"):
            return Conv2d(self.features, name="resample_1")(upsample_nearest2x(x))
        # torch ZeroPad2d((0, 1, 0, 1)): one zero row below and one column right, then a stride-2 conv
        x = Conv2d(self.features, stride=2, padding=((0, 1), (0, 1)), name="resample_1")(x)
        if self.mode == "downsample3d":
            x = CausalConv3d(self.features, (3, 1, 1), stride_t=2, name="time_conv")(x, "remember" if first else "conv")
        return x


def avg_down(x: jax.Array, features: int, factor_t: int, factor_s: int) -> jax.Array:
    """diffusers `AvgDown3D`: space(-time) to channels, then the mean of each group of channels."""
    pad_t = (-x.shape[1]) % factor_t
    x = jnp.pad(x, ((0, 0), (pad_t, 0), (0, 0), (0, 0), (0, 0)))
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // factor_t, factor_t, h // factor_s, factor_s, w // factor_s, factor_s, c)
    x = x.transpose(0, 1, 3, 5, 7, 2, 4, 6)  # [B, T', H', W', C, ft, fs, fs]
    factor = factor_t * factor_s * factor_s
    x = x.reshape(b, t // factor_t, h // factor_s, w // factor_s, features, c * factor // features)
    return x.mean(-1)


def dup_up(x: jax.Array, features: int, factor_t: int, factor_s: int, first: bool) -> jax.Array:
    """diffusers `DupUp3D`: channels repeated, then unfolded into space(-time); the first chunk keeps its last frame."""
    b, t, h, w, c = x.shape
    factor = factor_t * factor_s * factor_s
    x = jnp.repeat(x, features * factor // c, axis=-1)
    x = x.reshape(b, t, h, w, features, factor_t, factor_s, factor_s)
    x = x.transpose(0, 1, 5, 2, 6, 3, 7, 4)  # [B, T, ft, H, fs, W, fs, C]
    x = x.reshape(b, t * factor_t, h * factor_s, w * factor_s, features)
    return x[:, factor_t - 1:] if first else x


class MidBlock(nn.Module):
    """diffusers `WanMidBlock`: resnet, attention, resnet."""

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        c = x.shape[-1]
        x = ResidualBlock(c, name="resnets_0")(x)
        x = AttentionBlock(name="attentions_0")(x)
        return ResidualBlock(c, name="resnets_1")(x)


class ResidualDownBlock(nn.Module):
    """diffusers `WanResidualDownBlock` (Wan2.2): resnets and downsampler plus an averaged shortcut."""

    features: int
    num_res_blocks: int
    temporal: bool
    down: bool

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        shortcut = avg_down(x, self.features, 2 if self.temporal else 1, 2 if self.down else 1)
        for j in range(self.num_res_blocks):
            x = ResidualBlock(self.features, name=f"resnets_{j}")(x)
        if self.down:
            mode = "downsample3d" if self.temporal else "downsample2d"
            x = Resample(mode, self.features, name="downsampler")(x, first)
        return x + shortcut


class UpBlock(nn.Module):
    """diffusers `WanUpBlock` (Wan2.1) and, with `residual`, `WanResidualUpBlock` (Wan2.2)."""

    features: int
    num_res_blocks: int
    upsample_mode: str | None
    residual: bool

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        x_in = x
        for j in range(self.num_res_blocks + 1):
            x = ResidualBlock(self.features, name=f"resnets_{j}")(x)
        if self.upsample_mode is None:
            return x
        if not self.residual:  # Wan2.1 halves the channels in the upsampler
            return Resample(self.upsample_mode, self.features // 2, name="upsamplers_0")(x, first)
        x = Resample(self.upsample_mode, self.features, name="upsampler")(x, first)
        factor_t = 2 if self.upsample_mode == "upsample3d" else 1
        return x + dup_up(x_in, self.features, factor_t, 2, first)


def encoder_blocks(cfg: WanVAEConfig) -> list[nn.Module]:
    """`encoder.down_blocks` in order (Wan2.1: a flat list of resnets, attentions and resamplers)."""
    dims = [cfg.base_dim * m for m in (1, *cfg.dim_mult)]
    last = len(cfg.dim_mult) - 1
    blocks: list[nn.Module] = []
    name = lambda: f"down_blocks_{len(blocks)}"  # noqa: E731
    scale = 1.0
    for i, out_dim in enumerate(dims[1:]):
        temporal = cfg.temperal_downsample[i] if i != last else False
        if cfg.is_residual:
            blocks.append(ResidualDownBlock(out_dim, cfg.num_res_blocks, temporal, i != last, name=name()))
            continue
        for _ in range(cfg.num_res_blocks):
            blocks.append(ResidualBlock(out_dim, name=name()))
            if scale in cfg.attn_scales:
                blocks.append(AttentionBlock(name=name()))
        if i != last:
            blocks.append(Resample("downsample3d" if temporal else "downsample2d", out_dim, name=name()))
            scale /= 2.0
    return blocks


def decoder_blocks(cfg: WanVAEConfig) -> list[nn.Module]:
    """`decoder.up_blocks` in order."""
    return [decoder_block(cfg, i) for i in range(len(cfg.dim_mult))]


def decoder_block(cfg: WanVAEConfig, i: int) -> nn.Module:
    """`decoder.up_blocks[i]`."""
    mult = cfg.dim_mult
    dims = [cfg.decoder_dim * m for m in (mult[-1], *mult[::-1])]
    mode = None
    if i != len(mult) - 1:
        mode = "upsample3d" if cfg.temperal_downsample[::-1][i] else "upsample2d"
    return UpBlock(dims[i + 1], cfg.num_res_blocks, mode, cfg.is_residual, name=f"up_blocks_{i}")


class Encoder(nn.Module):
    """diffusers `WanEncoder3d` on one chunk of (patchified) frames."""

    config: WanVAEConfig

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        cfg = self.config
        x = CausalConv3d(cfg.base_dim, name="conv_in")(x)
        for block in encoder_blocks(cfg):  # built here, so they are this module's children
            x = block(x, first)
        x = MidBlock(name="mid_block")(x)
        return CausalConv3d(2 * cfg.z_dim, name="conv_out")(nn.silu(RMSNorm(name="norm_out")(x)))


class Decoder(nn.Module):
    """diffusers `WanDecoder3d` on one chunk of latent frames."""

    config: WanVAEConfig

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        cfg = self.config
        x = CausalConv3d(cfg.decoder_dim * cfg.dim_mult[-1], name="conv_in")(x)
        x = MidBlock(name="mid_block")(x)
        for block in decoder_blocks(cfg):
            x = block(x, first)
        x = constrain(x, _ACTIVATION_AXES)
        return CausalConv3d(cfg.out_channels, name="conv_out")(nn.silu(RMSNorm(name="norm_out")(x)))


def patchify(x: jax.Array, p: int) -> jax.Array:
    """diffusers `patchify`, channels-last: `[B, F, H*p, W*p, C]` -> `[B, F, H, W, C*p*p]` (channel c*p*p + pw*p + ph)."""
    if p == 1:
        return x
    b, f, h, w, c = x.shape
    x = x.reshape(b, f, h // p, p, w // p, p, c).transpose(0, 1, 2, 4, 6, 5, 3)  # [B, F, H, W, C, pw, ph]
    return x.reshape(b, f, h // p, w // p, c * p * p)


def unpatchify(x: jax.Array, p: int) -> jax.Array:
    """Inverse of `patchify` (diffusers `unpatchify`)."""
    if p == 1:
        return x
    b, f, h, w, cpp = x.shape
    x = x.reshape(b, f, h, w, cpp // (p * p), p, p).transpose(0, 1, 2, 6, 3, 5, 4)  # [B, F, H, ph, W, pw, C]
    return x.reshape(b, f, h * p, w * p, cpp // (p * p))


class AutoencoderKLWan(nn.Module):
    """The parameter tree of diffusers `AutoencoderKLWan`; its methods run one chunk (channels-last)."""

    config: WanVAEConfig

    def setup(self):
        z = self.config.z_dim
        self.encoder = Encoder(self.config)
        self.decoder = Decoder(self.config)
        self.quant_conv = CausalConv3d(2 * z, (1, 1, 1))
        self.post_quant_conv = CausalConv3d(z, (1, 1, 1))

    def encode_chunk(self, video: jax.Array, first: bool) -> jax.Array:
        """`[B, F, H, W, C]` frames in [-1, 1] -> moments `[B, F', H', W', 2z]` (mean first)."""
        x = patchify(constrain(video, _ACTIVATION_AXES), self.config.patch)
        return self.quant_conv(self.encoder(x, first))

    def decode_chunk(self, z: jax.Array, first: bool) -> jax.Array:
        """`[B, F', H', W', z]` -> frames `[B, F, H, W, C]`, clamped to [-1, 1] like the reference."""
        x = self.decoder(self.post_quant_conv(z), first)
        return jnp.clip(unpatchify(x, self.config.patch), -1.0, 1.0)

    def __call__(self, video: jax.Array) -> jax.Array:  # steady-state paths, for init only
        moments = self.encode_chunk(video, False)
        return self.decode_chunk(moments[..., : self.config.z_dim], False)


# ---------------------------------------------------------------------------------------------
# Chunked encode / decode: host loops over two compiled units


def _chunk(module: AutoencoderKLWan, method: str, params: Params, cache: Params | None, x: jax.Array,
           first: bool) -> tuple[jax.Array, Params]:
    variables = {"params": params} if cache is None else {"params": params, "cache": cache}
    out, state = module.apply(variables, x, first, method=method, mutable=["cache"])
    return out, state["cache"]


# The cache passed in is dead once the chunk has run: donated, so the new one reuses its buffers
# (at 720p the decoder's cache is several GB).
_run_chunk = compile_step(_chunk, donate=(3,), static=(0, 1, 5), options=xla_only_options)


# --- the decoder in stages ---------------------------------------------------------------------------------
#
# A decoder chunk runs as a few compiled units, each a run of the tree's own submodules (the same parameter
# paths): the latent-resolution part in two (post_quant_conv, conv_in and the mid block's first resnet; its
# attention and second resnet), then one up block each, the last with the output head. Each unit keeps its own
# part of the causal cache. XLA's TPU compiler took about 100 s for one whole decoder chunk at 480p (the first
# video on a v5e: 206 s of its decode stage compiling two of them); a unit is a fraction of that, and the units of
# the two chunk kinds are independent programs.


class _MidBlockPart(nn.Module):
    """Half of `MidBlock` under its name and parameter paths: `resnets_0` (part 0), or `attentions_0` then
    `resnets_1` (part 1)."""

    part: int

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        c = x.shape[-1]
        if self.part == 0:
            return ResidualBlock(c, name="resnets_0")(x)
        x = AttentionBlock(name="attentions_0")(x)
        return ResidualBlock(c, name="resnets_1")(x)


class _DecoderIn(nn.Module):
    config: WanVAEConfig
    part: int

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        if self.part == 0:
            x = CausalConv3d(self.config.decoder_dim * self.config.dim_mult[-1], name="conv_in")(x)
        return _MidBlockPart(self.part, name="mid_block")(x)


class _DecodeIn(nn.Module):
    """Part 0: `post_quant_conv`, the decoder's `conv_in` and its mid block's first resnet (params
    `{post_quant_conv, decoder}`); part 1: the mid block's attention and second resnet. Whole, it was the decode's
    slowest unit to compile for a v5e; in two, every unit of the decode compiles in 12-30 s at 480x832 and 720x1280
    (XLA's v5e compiler without a chip, 2-core host, one compile each)."""

    config: WanVAEConfig
    part: int = 0

    @nn.compact
    def __call__(self, z: jax.Array, first: bool = False) -> jax.Array:
        if self.part == 0:
            z = CausalConv3d(self.config.z_dim, (1, 1, 1), name="post_quant_conv")(z)
        return _DecoderIn(self.config, self.part, name="decoder")(z, first)


class _DecoderUp(nn.Module):
    config: WanVAEConfig
    index: int

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        cfg = self.config
        x = decoder_block(cfg, self.index)(x, first)  # `decoder/up_blocks_i`, as in `Decoder`
        if self.index < len(cfg.dim_mult) - 1:
            return x
        x = constrain(x, _ACTIVATION_AXES)
        return CausalConv3d(cfg.out_channels, name="conv_out")(nn.silu(RMSNorm(name="norm_out")(x)))


class _DecodeUp(nn.Module):
    """The decoder's up block `index` (the last one with `norm_out` and `conv_out`, then the clamped frames)."""

    config: WanVAEConfig
    index: int

    @nn.compact
    def __call__(self, x: jax.Array, first: bool = False) -> jax.Array:
        x = _DecoderUp(self.config, self.index, name="decoder")(x, first)
        if self.index < len(self.config.dim_mult) - 1:
            return x
        return jnp.clip(unpatchify(x, self.config.patch), -1.0, 1.0)


def decode_stages(cfg: WanVAEConfig) -> tuple[nn.Module, ...]:
    """The decoder's compiled units, in order."""
    return (_DecodeIn(cfg, 0), _DecodeIn(cfg, 1), *(_DecodeUp(cfg, i) for i in range(len(cfg.dim_mult))))


def stage_params(stage: nn.Module, params: Params) -> Params:
    """The part of the whole VAE tree a decode unit reads (views: nothing is copied)."""
    if isinstance(stage, _DecodeIn):
        decoder, mid = params["decoder"], params["decoder"]["mid_block"]
        if stage.part == 1:
            return {"decoder": {"mid_block": {"attentions_0": mid["attentions_0"], "resnets_1": mid["resnets_1"]}}}
        return {"post_quant_conv": params["post_quant_conv"],
                "decoder": {"conv_in": decoder["conv_in"], "mid_block": {"resnets_0": mid["resnets_0"]}}}
    names = [f"up_blocks_{stage.index}"] + (["norm_out", "conv_out"] if stage.index == len(stage.config.dim_mult) - 1
                                            else [])
    return {"decoder": {name: params["decoder"][name] for name in names}}


def _stage(stage: nn.Module, first: bool, params: Params, cache: Params | None, x: jax.Array):
    variables = {"params": params} if cache is None else {"params": params, "cache": cache}
    out, state = stage.apply(variables, x, first, mutable=["cache"])
    return out, state["cache"]


# the cache passed in is dead: donated
_run_stage = compile_step(_stage, donate=(3,), static=(0, 1), options=xla_only_options)


class WanVAE:
    """Chunked encode and decode of the Wan2.1 / Wan2.2 VAE.

    Args:
        config: `WanVAEConfig.from_hf_config(config_json)`, or `WAN21_VAE` / `WAN22_VAE` for the
            official single-file checkpoints.
    """

    def __init__(self, config: WanVAEConfig):
        self.config = config
        self.module = AutoencoderKLWan(config)

    @property
    def video_channels(self) -> int:
        """Channels of the video before patchify (`in_channels` counts the patchified ones)."""
        return self.config.in_channels // self.config.patch**2

    def encode_moments(self, params: Params, video: jax.Array) -> jax.Array:
        """Moments `[B, 2z, F', H', W']` (mean then log-variance, diffusers' `latent_dist.parameters`).

        Args:
            params: the VAE tree (`encoder/...`, `quant_conv/...`, ...).
            video: `[B, C, F, H, W]` in [-1, 1], F = 1 + 4k, H and W multiples of the spatial factor.
        """
        cfg = self.config
        b, c, frames, h, w = video.shape
        if (frames - 1) % ENCODE_CHUNK_FRAMES:
            raise WanVAEError(f"the Wan VAE encodes 1 + 4k frames, got {frames}")
        if h % cfg.scale_factor_spatial or w % cfg.scale_factor_spatial:
            raise WanVAEError(f"height and width must be multiples of {cfg.scale_factor_spatial}, got {h}x{w}")
        x = jnp.moveaxis(video, 1, -1)
        out, cache = _run_chunk(self.module, "encode_chunk", params, None, x[:, :1], True)
        outs = [out]
        for start in range(1, frames, ENCODE_CHUNK_FRAMES):
            out, cache = _run_chunk(self.module, "encode_chunk", params, cache,
                                    x[:, start:start + ENCODE_CHUNK_FRAMES], False)
            outs.append(out)
        return jnp.moveaxis(jnp.concatenate(outs, axis=1), -1, 1)

    def encode(self, params: Params, video: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """Latents `[B, z, F', H', W']`: the posterior mean, or a sample when `key` is given.

        Args:
            params: the VAE tree.
            video: `[B, C, F, H, W]` in [-1, 1], F = 1 + 4k.
            key: PRNG key to sample `mean + std * noise` (diffusers `latent_dist.sample()`).
        """
        moments = self.encode_moments(params, video)
        mean, logvar = jnp.split(moments, 2, axis=1)
        if key is None:
            return mean
        std = jnp.exp(0.5 * jnp.clip(logvar, -30.0, 20.0))
        return mean + std * jax.random.normal(key, mean.shape, mean.dtype)

    def decode(self, params: Params, latents: jax.Array) -> jax.Array:
        """Video `[B, C, 1 + 4(F'-1), H, W]` in [-1, 1] from VAE latents `[B, z, F', H', W']`.

        Args:
            params: the VAE tree.
            latents: unnormalised latents (`denormalize_latents` of the DiT's output).
        """
        z = jnp.moveaxis(latents, 1, -1)
        stages = decode_stages(self.config)
        parts = [stage_params(stage, params) for stage in stages]
        caches: list[Params | None] = [None] * len(stages)
        outs = []
        for i in range(z.shape[1]):  # one latent frame a chunk; each chunk a host loop over the units
            x = z[:, i:i + 1]
            for u, stage in enumerate(stages):
                x, caches[u] = _run_stage(stage, i == 0, parts[u], caches[u], x)
            outs.append(x)
        return jnp.moveaxis(jnp.concatenate(outs, axis=1), -1, 1)

    def init_params(self, key: jax.Array, size: int | None = None) -> Params:
        """Random parameters of the full tree (shapes for the translator's expected tree)."""
        size = size or self.config.scale_factor_spatial
        x = jnp.zeros((1, ENCODE_CHUNK_FRAMES, size, size, self.video_channels), jnp.float32)
        return nn.unbox(jax.jit(self.module.init)(key, x)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat `{"encoder/conv_in/kernel": shape}` of the full tree."""
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def logical_specs(self) -> Any:
        """Logical PartitionSpecs of the tree, for `vidax.zoo.compute.sharding.place` with `WAN_VAE_RULES`."""
        size = self.config.scale_factor_spatial
        x = jax.ShapeDtypeStruct((1, ENCODE_CHUNK_FRAMES, size, size, self.video_channels), jnp.float32)
        abstract = jax.eval_shape(lambda v: self.module.init(jax.random.key(0), v), x)
        return nn.get_partition_spec(abstract["params"])


def planner_entries(cfg: WanVAEConfig, height: int, width: int, frames: int) -> dict:
    """The VAE's `planner.Job` fields: its fp32 weights and its decode peak, the steady-state decode unit
    (one latent frame into 4 video frames, after the first): the causal cache it reads and writes (exact, from
    its shapes), the frames it makes, and its working set, `DECODE_WORKING_MAPS` fp32 maps of the widest decoder
    stage (channels x pixels x frames at the last up block). The counts were read off XLA's compiled memory
    analysis of that unit (`vidax-gen --dry-run`, `tests/dryrun`): the former estimate (four full-resolution
    maps, no cache) was a third of it for the Wan2.1 VAE at 480p."""
    chunk_frames = cfg.scale_factor_temporal
    maps = DECODE_WORKING_MAPS + (DECODE_RESIDUAL_MAPS if cfg.is_residual else 0)
    widest = chunk_frames * (height // cfg.patch) * (width // cfg.patch) * cfg.decoder_dim * cfg.dim_mult[0] * 4
    per_frame = height * width * cfg.out_channels // cfg.patch**2 * 4
    video = max(frames, cfg.scale_factor_temporal) * per_frame  # every decoded frame, held until they are joined
    return dict(
        vae_params=sum(math.prod(shape) for shape in WanVAE(cfg).param_shapes().values()),
        vae_weight_bytes=4,
        vae_peak_activation_bytes=int(decode_cache_bytes(cfg, height, width) + video + maps * widest),
    )


# fp32 maps of the widest decoder stage live at the decode's peak unit, the last stage of a steady chunk (XLA's
# buffer assignment, CPU): 9.0 for the Wan2.1 VAE at 480p and 720p, 13.56 for the Wan2.2 VAE (cosmos3-nano and
# wan2.2-ti2v-5b at 704x1280), whose residual up blocks keep their shortcuts
DECODE_WORKING_MAPS = 9
DECODE_RESIDUAL_MAPS = 4.5


@functools.lru_cache(maxsize=64)
def decode_cache_bytes(cfg: WanVAEConfig, height: int, width: int) -> int:
    """Bytes of the decoder's causal cache at this size, from the shapes an abstract first chunk makes (kept on
    disk beside the compile cache: `compute.shape_memo`)."""
    return remembered("vae-decode-cache", (cfg, height, width), lambda: _traced_decode_cache_bytes(cfg, height, width))


def _traced_decode_cache_bytes(cfg: WanVAEConfig, height: int, width: int) -> int:
    vae = WanVAE(cfg)
    params = jax.eval_shape(lambda: vae.init_params(jax.random.key(0)))
    s = cfg.scale_factor_spatial
    chunk = jax.ShapeDtypeStruct((1, 1, height // s, width // s, cfg.z_dim), jnp.float32)
    _, cache = jax.eval_shape(lambda p, z: _chunk(vae.module, "decode_chunk", p, None, z, True), params, chunk)
    return int(sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(cache)))
