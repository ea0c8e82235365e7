"""The CogVideoX VAE (follows diffusers `AutoencoderKLCogVideoX`): causal 3D conv encoder and decoder.

Activations run channels-last (`[B, T, H, W, C]`); the public `CogVideoXVAE.encode_moments` /
`decode` take and return diffusers' `[B, C, T, H, W]`.

Time is causal and processed in frame batches exactly as the reference does, because the result
depends on them: GroupNorm statistics are taken per batch, and every causal convolution carries the
last two frames of its input from one batch to the next (diffusers' `conv_cache`, here a flax
"cache" collection passed into and out of each batch). The first batch pads time by repeating its
first frame instead. The decoder takes 2 latent frames per batch (the first batch takes 3 when the
count is odd: 13 latents -> 9 + 6 x 8 = 49 frames; an even count gives 4 frames per latent), the
encoder 8 frames (the first 9 when the count is 8k + 1). A batch is one compiled unit called from
a host loop; the first and the steady-state batch compile once each.

Tiling (`tiled=True`, diffusers' `enable_tiling()`): overlapping spatial tiles, each run through
the same frame batches, blended linearly over the overlap; the sizes come from the config's
sample size (tiles of half of it, overlap 1/6 of the height and 1/5 of the width).

Parameter paths mirror diffusers' module names (`decoder/up_blocks_0/resnets_1/norm1/conv_y/conv/kernel`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from vidax.translator import VidaxError
from vidax.zoo.cogvideox.config import CogVideoXVAEConfig
from vidax.zoo.compute.layers import logical_param
from vidax.zoo.compute.mesh import DATA, SEQUENCE, TENSOR
from vidax.zoo.compute.runtime import compile_step, xla_only_options
from vidax.zoo.compute.sharding import constrain
from vidax.zoo.parts.vae_tiling import blend as cross_fade
from vidax.zoo.parts.vae_layers import time_taps_conv  # the Wan VAE's valid-in-time, same-in-space 3D conv

Params = dict[str, Any]

# The VAE's own sharding rules: weights replicated, activations split along their width over every
# mesh axis (convolutions exchange halos; GroupNorm reduces across devices).
VAE_RULES = (
    ("batch", None),
    ("act_width", (DATA, TENSOR, SEQUENCE)),
    ("conv_in", None),
    ("conv_out", None),
    ("norm", None),
)
_ACTIVATION_AXES = ("batch", None, None, "act_width", None)  # [B, T, H, W, C]

DECODE_BATCH_FRAMES = 2  # diffusers `num_latent_frames_batch_size`
ENCODE_BATCH_FRAMES = 8  # diffusers `num_sample_frames_batch_size`


class CogVideoXVAEError(VidaxError, ValueError):
    """An input the CogVideoX VAE cannot process (size, frame count)."""


# ---------------------------------------------------------------------------------------------
# Layers


def _conv_params(module: nn.Module, shape: tuple[int, ...], features: int):
    spatial = (None,) * (len(shape) - 2)
    w = logical_param(module, "kernel", shape, (*spatial, "conv_in", "conv_out"))
    b = logical_param(module, "bias", (features,), ("conv_out",), nn.initializers.zeros)
    return w, b


class Conv3d(nn.Module):
    """torch `Conv3d`, valid in time, zero "same" padding in space (kernel `[kt, kh, kw, I, O]`)."""

    features: int
    kernel: int = 3

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel
        w, b = _conv_params(self, (k, k, k, x.shape[-1], self.features), self.features)
        return time_taps_conv(x, w.astype(x.dtype), 1) + b.astype(x.dtype)


class CausalConv3d(nn.Module):
    """diffusers `CogVideoXCausalConv3d`: time padded with the cached last `k - 1` input frames, or
    with copies of the first frame in the first batch; the cache is collection "cache", entry `past`."""

    features: int
    kernel: int = 3

    @nn.compact
    def __call__(self, x: jax.Array, first: bool) -> jax.Array:
        k = self.kernel
        if k > 1:
            past = self.variable("cache", "past", jnp.zeros, (x.shape[0], k - 1, *x.shape[2:]), x.dtype)
            pad = jnp.repeat(x[:, :1], k - 1, axis=1) if first else past.value
            x = jnp.concatenate([pad, x], axis=1)
            past.value = x[:, -(k - 1):]
        return Conv3d(self.features, k, name="conv")(x)


class Conv2d(nn.Module):
    """torch `Conv2d` on every frame (kernel `[kh, kw, I, O]`)."""

    features: int
    stride: int = 1
    padding: tuple[tuple[int, int], tuple[int, int]] = ((1, 1), (1, 1))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t = x.shape[:2]
        w, bias = _conv_params(self, (3, 3, x.shape[-1], self.features), self.features)
        y = jax.lax.conv_general_dilated(
            x.reshape(b * t, *x.shape[2:]), w.astype(x.dtype), (self.stride, self.stride), self.padding,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y.reshape(b, t, *y.shape[1:]) + bias.astype(x.dtype)


class GroupNorm(nn.Module):
    """torch `GroupNorm` over (channels of a group, T, H, W) of one frame batch, in fp32."""

    groups: int
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, h, w, c = x.shape
        scale = logical_param(self, "scale", (c,), ("norm",), nn.initializers.ones)
        bias = logical_param(self, "bias", (c,), ("norm",), nn.initializers.zeros)
        x32 = x.astype(jnp.float32).reshape(b, t, h, w, self.groups, c // self.groups)
        mean = x32.mean(axis=(1, 2, 3, 5), keepdims=True)
        var = jnp.square(x32 - mean).mean(axis=(1, 2, 3, 5), keepdims=True)
        y = ((x32 - mean) * jax.lax.rsqrt(var + self.eps)).reshape(b, t, h, w, c)
        return (y * scale + bias).astype(x.dtype)


def _nearest_index(in_size: int, out_size: int) -> np.ndarray:
    """torch `nearest` source index per output index (`F.interpolate(size=...)`)."""
    if out_size == in_size:
        return np.arange(out_size)
    scale = np.float32(in_size / out_size)
    return np.minimum(np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64), in_size - 1)


def nearest_resize(x: jax.Array, size: tuple[int, int, int]) -> jax.Array:
    """`F.interpolate(x, size=(t, h, w))` (nearest) on `[B, T, H, W, C]`."""
    for axis, out in zip((1, 2, 3), size):
        if x.shape[axis] != out:
            x = jnp.take(x, jnp.asarray(_nearest_index(x.shape[axis], out)), axis=axis)
    return x


class SpatialNorm3D(nn.Module):
    """diffusers `CogVideoXSpatialNorm3D`: GroupNorm of `f`, scaled and shifted by 1x1x1 convs of the
    latents `zq` resized (nearest) to `f`; an odd frame count > 1 resizes the first frame alone."""

    groups: int

    @nn.compact
    def __call__(self, f: jax.Array, zq: jax.Array, first: bool) -> jax.Array:
        t, h, w = f.shape[1:4]
        if t > 1 and t % 2 == 1:
            zq = jnp.concatenate([nearest_resize(zq[:, :1], (1, h, w)), nearest_resize(zq[:, 1:], (t - 1, h, w))], 1)
        else:
            zq = nearest_resize(zq, (t, h, w))
        c = f.shape[-1]
        conv_y = CausalConv3d(c, 1, name="conv_y")(zq, first)
        conv_b = CausalConv3d(c, 1, name="conv_b")(zq, first)
        return GroupNorm(self.groups, 1e-6, name="norm_layer")(f) * conv_y + conv_b


class ResnetBlock3D(nn.Module):
    """diffusers `CogVideoXResnetBlock3D` (no time embedding); spatial norms in the decoder."""

    features: int
    groups: int
    eps: float
    spatial_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, zq: jax.Array | None, first: bool) -> jax.Array:
        x = constrain(x, _ACTIVATION_AXES)

        def norm(name, h):
            if self.spatial_norm:
                return SpatialNorm3D(self.groups, name=name)(h, zq, first)
            return GroupNorm(self.groups, self.eps, name=name)(h)

        h = CausalConv3d(self.features, name="conv1")(nn.silu(norm("norm1", x)), first)
        h = CausalConv3d(self.features, name="conv2")(nn.silu(norm("norm2", h)), first)
        if x.shape[-1] != self.features:  # diffusers' CogVideoXSafeConv3d, kernel 1
            x = Conv3d(self.features, 1, name="conv_shortcut")(x)
        return h + x


def _pool_time(x: jax.Array) -> jax.Array:
    b, t, h, w, c = x.shape
    return x.reshape(b, t // 2, 2, h, w, c).mean(axis=2)


class Downsample3D(nn.Module):
    """diffusers `CogVideoXDownsample3D`: time averaged in pairs (an odd first frame kept), then a
    stride-2 3x3 conv after one zero row below and one zero column right."""

    features: int
    compress_time: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.compress_time:
            t = x.shape[1]
            if t % 2:
                x = jnp.concatenate([x[:, :1], _pool_time(x[:, 1:])], axis=1) if t > 1 else x
            else:
                x = _pool_time(x)
        return Conv2d(self.features, stride=2, padding=((0, 1), (0, 1)), name="conv")(x)


def _up2d(x: jax.Array) -> jax.Array:
    return jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)


class Upsample3D(nn.Module):
    """diffusers `CogVideoXUpsample3D`: nearest 2x in space (and time, except an odd first frame),
    then a 3x3 conv."""

    features: int
    compress_time: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        t = x.shape[1]
        if self.compress_time and t > 1 and t % 2:
            x = jnp.concatenate([_up2d(x[:, :1]), jnp.repeat(_up2d(x[:, 1:]), 2, axis=1)], axis=1)
        elif self.compress_time and t > 1:
            x = jnp.repeat(_up2d(x), 2, axis=1)
        else:
            x = _up2d(x)
        return Conv2d(self.features, name="conv")(x)


class DownBlock3D(nn.Module):
    """diffusers `CogVideoXDownBlock3D`: resnets, then (except in the last block) the downsampler."""

    features: int
    num_layers: int
    groups: int
    eps: float
    downsample: bool
    compress_time: bool

    @nn.compact
    def __call__(self, x: jax.Array, first: bool) -> jax.Array:
        for j in range(self.num_layers):
            x = ResnetBlock3D(self.features, self.groups, self.eps, name=f"resnets_{j}")(x, None, first)
        if self.downsample:
            x = Downsample3D(self.features, self.compress_time, name="downsamplers_0")(x)
        return x


class UpBlock3D(nn.Module):
    """diffusers `CogVideoXUpBlock3D` (and, without upsampler, `CogVideoXMidBlock3D`)."""

    features: int
    num_layers: int
    groups: int
    eps: float
    spatial_norm: bool
    upsample: bool = False
    compress_time: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, zq: jax.Array | None, first: bool) -> jax.Array:
        for j in range(self.num_layers):
            x = ResnetBlock3D(self.features, self.groups, self.eps, self.spatial_norm, name=f"resnets_{j}")(x, zq, first)
        if self.upsample:
            x = Upsample3D(self.features, self.compress_time, name="upsamplers_0")(x)
        return x


class Encoder(nn.Module):
    """diffusers `CogVideoXEncoder3D` on one frame batch."""

    cfg: CogVideoXVAEConfig

    @nn.compact
    def __call__(self, x: jax.Array, first: bool) -> jax.Array:
        cfg = self.cfg
        groups, eps = cfg.norm_num_groups, cfg.norm_eps
        x = CausalConv3d(cfg.block_out_channels[0], name="conv_in")(x, first)
        last = len(cfg.block_out_channels) - 1
        for i, features in enumerate(cfg.block_out_channels):
            block = DownBlock3D(features, cfg.layers_per_block, groups, eps, i != last, i < cfg.temporal_levels,
                                name=f"down_blocks_{i}")
            x = block(x, first)
        x = UpBlock3D(cfg.block_out_channels[-1], 2, groups, eps, False, name="mid_block")(x, None, first)
        x = nn.silu(GroupNorm(groups, 1e-6, name="norm_out")(x))
        return CausalConv3d(2 * cfg.latent_channels, name="conv_out")(x, first)


class Decoder(nn.Module):
    """diffusers `CogVideoXDecoder3D` on one batch of latent frames."""

    cfg: CogVideoXVAEConfig

    @nn.compact
    def __call__(self, z: jax.Array, first: bool) -> jax.Array:
        cfg = self.cfg
        groups, eps = cfg.norm_num_groups, cfg.norm_eps
        channels = cfg.block_out_channels[::-1]
        x = CausalConv3d(channels[0], name="conv_in")(z, first)
        x = UpBlock3D(channels[0], 2, groups, eps, True, name="mid_block")(x, z, first)
        last = len(channels) - 1
        for i, features in enumerate(channels):
            block = UpBlock3D(features, cfg.layers_per_block + 1, groups, eps, True, i != last, i < cfg.temporal_levels,
                              name=f"up_blocks_{i}")
            x = block(x, z, first)
        x = constrain(x, _ACTIVATION_AXES)
        x = nn.silu(SpatialNorm3D(groups, name="norm_out")(x, z, first))
        return CausalConv3d(cfg.out_channels, name="conv_out")(x, first)


class AutoencoderKLCogVideoX(nn.Module):
    """The parameter tree of diffusers `AutoencoderKLCogVideoX`; its methods run one frame batch."""

    cfg: CogVideoXVAEConfig

    def setup(self):
        self.encoder = Encoder(self.cfg)
        self.decoder = Decoder(self.cfg)

    def encode_batch(self, video: jax.Array, first: bool) -> jax.Array:
        """`[B, T, H, W, C]` frames in [-1, 1] -> moments `[B, T', H', W', 2z]` (mean first)."""
        return self.encoder(constrain(video, _ACTIVATION_AXES), first)

    def decode_batch(self, z: jax.Array, first: bool) -> jax.Array:
        """`[B, T', H', W', z]` -> frames `[B, T, H, W, C]` (not clamped, as the reference)."""
        return self.decoder(z, first)

    def __call__(self, video: jax.Array) -> jax.Array:  # for init only
        moments = self.encode_batch(video, True)
        return self.decode_batch(moments[..., : self.cfg.latent_channels], True)


# ---------------------------------------------------------------------------------------------
# Frame batches and tiles: host loops over compiled units


def _run(module: AutoencoderKLCogVideoX, method: str, params: Params, cache: Params | None, x: jax.Array,
         first: bool) -> tuple[jax.Array, Params]:
    variables = {"params": params} if cache is None else {"params": params, "cache": cache}
    out, state = module.apply(variables, x, first, method=method, mutable=["cache"])
    return out, state["cache"]


# the cache passed in is dead once the batch has run: donated, the new one reuses its buffers; no Pallas kernel in
# the VAE, so on a TPU libtpu's own scoped VMEM limit (`xla_only_options`: its convolutions compile faster)
_run_batch = compile_step(_run, donate=(3,), static=(0, 1, 5), options=xla_only_options)


def frame_batches(frames: int, size: int) -> list[tuple[int, int]]:
    """diffusers' `[start, end)` frame batches: the remainder `frames % size` joins the first."""
    extra = frames % size
    return [(size * i + (0 if i == 0 else extra), size * (i + 1) + extra) for i in range(max(frames // size, 1))]


@dataclasses.dataclass(frozen=True)
class Tiling:
    """diffusers' tiling sizes (`enable_tiling()` defaults from the config's sample size), in pixels."""

    sample_height: int
    sample_width: int
    overlap_height: float = 1 / 6
    overlap_width: float = 1 / 5

    @classmethod
    def default(cls, cfg: CogVideoXVAEConfig) -> "Tiling":
        return cls(cfg.sample_height // 2, cfg.sample_width // 2)


class CogVideoXVAE:
    """Encode and decode of the CogVideoX VAE in the reference's frame batches, optionally tiled.

    Args:
        cfg: `CogVideoXVAEConfig.from_hf_config(config_json)`.
    """

    def __init__(self, cfg: CogVideoXVAEConfig):
        self.cfg = cfg
        self.module = AutoencoderKLCogVideoX(cfg)

    # --- one tile ---------------------------------------------------------------------------

    def _batched(self, method: str, params: Params, x: jax.Array, size: int) -> jax.Array:
        """Channels-last `x` through `method`, frame batch after frame batch, caches carried."""
        cache, outs = None, []
        for index, (start, end) in enumerate(frame_batches(x.shape[1], size)):
            out, cache = _run_batch(self.module, method, params, cache, x[:, start:end], index == 0)
            outs.append(out)
        return jnp.concatenate(outs, axis=1)

    # --- tiles ------------------------------------------------------------------------------

    def _tiled(self, method: str, params: Params, x: jax.Array, size: int, tile: tuple[int, int],
               stride: tuple[int, int], blend: tuple[int, int], keep: tuple[int, int]) -> jax.Array:
        """diffusers' `tiled_encode` / `tiled_decode`: tiles at `stride`, each run alone, blended with
        the tile above and the one to the left over `blend` rows/columns, cropped to `keep`."""
        h, w = x.shape[2:4]
        rows = [[self._batched(method, params, x[:, :, i:i + tile[0], j:j + tile[1]], size)
                 for j in range(0, w, stride[1])] for i in range(0, h, stride[0])]
        out_rows = []
        for i, row in enumerate(rows):
            pieces = []
            for j in range(len(row)):
                # the reference blends in place: the tiles above and to the left are already blended
                if i > 0:
                    row[j] = cross_fade(rows[i - 1][j], row[j], blend[0], axis=2)
                if j > 0:
                    row[j] = cross_fade(row[j - 1], row[j], blend[1], axis=3)
                pieces.append(row[j][:, :, :keep[0], :keep[1]])
            out_rows.append(jnp.concatenate(pieces, axis=3))
        return jnp.concatenate(out_rows, axis=2)

    # --- public -----------------------------------------------------------------------------

    def encode_moments(self, params: Params, video: jax.Array, tiled: bool | Tiling = False) -> jax.Array:
        """Moments `[B, 2z, T', H', W']` (mean then log-variance, diffusers' `latent_dist.parameters`).

        Args:
            params: the VAE tree (`encoder/...`; the decoder's leaves may be absent).
            video: `[B, C, T, H, W]` in [-1, 1]; T = 1 or 8k + 1 (the reference's batches).
            tiled: diffusers' `enable_tiling()` (True: default tile sizes, or a `Tiling`).
        """
        cfg = self.cfg
        t, h, w = video.shape[2:]
        s = cfg.spatial_compression
        if h % s or w % s:
            raise CogVideoXVAEError(f"height and width must be multiples of {s}, got {h}x{w}")
        if t != 1 and (t - 1) % ENCODE_BATCH_FRAMES and t % ENCODE_BATCH_FRAMES:
            raise CogVideoXVAEError(f"the CogVideoX VAE encodes 1, 8k or 8k + 1 frames, got {t}")
        x = jnp.moveaxis(video, 1, -1)
        tiling = _tiling(cfg, tiled)
        if tiling is None or (w <= tiling.sample_width and h <= tiling.sample_height):
            out = self._batched("encode_batch", params, x, ENCODE_BATCH_FRAMES)
        else:
            tile = (tiling.sample_height, tiling.sample_width)
            latent_tile = (int(tile[0] / s), int(tile[1] / s))
            stride = (int(tile[0] * (1 - tiling.overlap_height)), int(tile[1] * (1 - tiling.overlap_width)))
            blend = (int(latent_tile[0] * tiling.overlap_height), int(latent_tile[1] * tiling.overlap_width))
            keep = (latent_tile[0] - blend[0], latent_tile[1] - blend[1])
            out = self._tiled("encode_batch", params, x, ENCODE_BATCH_FRAMES, tile, stride, blend, keep)
        return jnp.moveaxis(out, -1, 1)

    def decode(self, params: Params, latents: jax.Array, tiled: bool | Tiling = False) -> jax.Array:
        """Video `[B, C, T, H, W]` (about [-1, 1], unclamped) from VAE latents `[B, z, T', H', W']`.

        Args:
            params: the VAE tree (`decoder/...`).
            latents: the DiT's latents divided by `scaling_factor` (`latents.unscale`).
            tiled: diffusers' `enable_tiling()` (True: default tile sizes, or a `Tiling`).
        """
        cfg = self.cfg
        z = jnp.moveaxis(latents, 1, -1)
        h, w = z.shape[2:4]
        tiling = _tiling(cfg, tiled)
        s = cfg.spatial_compression
        if tiling is not None:
            latent_tile = (int(tiling.sample_height / s), int(tiling.sample_width / s))
        if tiling is None or (w <= latent_tile[1] and h <= latent_tile[0]):
            out = self._batched("decode_batch", params, z, DECODE_BATCH_FRAMES)
        else:
            sample_tile = (tiling.sample_height, tiling.sample_width)
            stride = (int(latent_tile[0] * (1 - tiling.overlap_height)), int(latent_tile[1] * (1 - tiling.overlap_width)))
            blend = (int(sample_tile[0] * tiling.overlap_height), int(sample_tile[1] * tiling.overlap_width))
            keep = (sample_tile[0] - blend[0], sample_tile[1] - blend[1])
            out = self._tiled("decode_batch", params, z, DECODE_BATCH_FRAMES, latent_tile, stride, blend, keep)
        return jnp.moveaxis(out, -1, 1)

    # --- shapes and specs -------------------------------------------------------------------

    def _example(self) -> jax.ShapeDtypeStruct:
        s = self.cfg.spatial_compression
        return jax.ShapeDtypeStruct((1, 1, s, s, self.cfg.in_channels), jnp.float32)

    def init_params(self, key: jax.Array) -> Params:
        """Random parameters of the full tree (for shapes and tests)."""
        x = jnp.zeros(self._example().shape, jnp.float32)
        return nn.unbox(self.module.init(key, x)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat `{"encoder/conv_in/conv/kernel": shape}` of the full tree: the translator's expected tree."""
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def logical_specs(self) -> Any:
        """Logical PartitionSpecs of the tree, for `vidax.zoo.compute.sharding.place` with `VAE_RULES`."""
        abstract = jax.eval_shape(lambda v: self.module.init(jax.random.key(0), v), self._example())
        return nn.get_partition_spec(abstract["params"])


def _tiling(cfg: CogVideoXVAEConfig, tiled: bool | Tiling) -> Tiling | None:
    if isinstance(tiled, Tiling):
        return tiled
    return Tiling.default(cfg) if tiled else None
