"""LTX-2's spatial latent upsampler (follows diffusers `LTX2LatentUpsamplerModel`, ltx_core's `LatentUpsampler`).

The two-stage pipeline generates at half size, upsamples the un-normalised video latents x2 in space with
this network and refines at full size. A conv + GroupNorm(32) + SiLU stem at `mid_channels`, residual blocks,
an upsampling head, more residual blocks, and a conv back to the latent channels. With `dims = 3` the stem,
blocks and final conv are 3D convolutions (zero padded in time, GroupNorm over frames too); the spatial head
is 2D, per frame. The head is one of:

- the rational resampler (`use_rational_resampler`, LTX-2's): a conv to num² x channels, a pixel shuffle by
  num, and an anti-aliased (binomial 5x5, depthwise) stride-den downsample: scale num / den (x2: 2 / 1, the
  blur is then skipped; x1.5: 3 / 2);
- a conv to 4x channels and a pixel shuffle (x2 in space), 2x (time: the first output frame dropped) or
  8x (both).

Activations run channels-last; `LTX2LatentUpsampler.__call__` takes and returns diffusers' `[B, C, F, H, W]`.
The module names follow diffusers' (`upsampler.conv` for the resampler, `upsampler.0` otherwise).
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.configs import pick_fields
from vidax.zoo.layers import logical_param

Params = dict[str, Any]
GROUPS = 32  # torch.nn.GroupNorm(32, C), eps 1e-5
RATIONAL_SCALES = {0.75: (3, 4), 1.5: (3, 2), 2.0: (2, 1), 4.0: (4, 1)}  # scale -> (up by num, down by den)
BLUR_TAPS = 5  # the binomial kernel's size (1, 4, 6, 4, 1)


class UpsamplerConfigError(ValueError):
    """A latent upsampler config this port does not run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpsamplerConfig:
    """diffusers `LTX2LatentUpsamplerModel`'s config (its defaults: LTX-2.0's x2 spatial upsampler)."""

    in_channels: int = 128
    mid_channels: int = 1024
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False
    rational_spatial_scale: float = 2.0
    use_rational_resampler: bool = True

    def __post_init__(self):
        if self.dims not in (2, 3):
            raise UpsamplerConfigError(f"LTX-2 latent upsampler: dims {self.dims} (only 2 or 3)")
        if not (self.spatial_upsample or self.temporal_upsample):
            raise UpsamplerConfigError("LTX-2 latent upsampler: neither spatial nor temporal upsampling")
        if self.dims == 2 and self.temporal_upsample:
            raise UpsamplerConfigError("LTX-2 latent upsampler: temporal upsampling needs dims 3")
        if self.mid_channels % GROUPS:
            raise UpsamplerConfigError(f"LTX-2 latent upsampler: mid_channels {self.mid_channels} is not a multiple "
                                       f"of its {GROUPS} GroupNorm groups")
        if self.rational and float(self.rational_spatial_scale) not in RATIONAL_SCALES:
            raise UpsamplerConfigError(f"LTX-2 latent upsampler: rational scale {self.rational_spatial_scale} (one of "
                                       f"{', '.join(map(str, RATIONAL_SCALES))})")

    @property
    def rational(self) -> bool:
        """The rational resampler head (spatial only, as diffusers builds it)."""
        return self.spatial_upsample and not self.temporal_upsample and self.use_rational_resampler

    @property
    def spatial_ratio(self) -> tuple[int, int]:
        """(num, den): the output is num / den times as high and wide as the input."""
        if not self.spatial_upsample:
            return (1, 1)
        return RATIONAL_SCALES[float(self.rational_spatial_scale)] if self.rational else (2, 1)

    def output_grid(self, frames: int, height: int, width: int) -> tuple[int, int, int]:
        """The latent (F, H, W) it makes of (frames, height, width)."""
        num, den = self.spatial_ratio
        return (2 * frames - 1 if self.temporal_upsample else frames, -(-height * num // den), -(-width * num // den))

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "UpsamplerConfig":
        """From a diffusers `latent_upsampler/config.json` dict."""
        return cls(**pick_fields(cls, hf))


class Conv(nn.Module):
    """torch `Conv2d` / `Conv3d` with kernel 3 and zero padding 1 (kernel `[*k, I, O]`), channels-last."""

    features: int
    dims: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = self.dims
        w = logical_param(self, "kernel", (3,) * d + (x.shape[-1], self.features), (None,) * d + ("conv_in", "conv_out"))
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        spec = ("NDHWC", "DHWIO", "NDHWC") if d == 3 else ("NHWC", "HWIO", "NHWC")
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), (1,) * d, [(1, 1)] * d, dimension_numbers=spec,
                                         precision=jax.lax.Precision.HIGHEST)
        return y + b.astype(x.dtype)


class GroupNorm(nn.Module):
    """torch `GroupNorm(32, C)` over channels-last input: statistics per group over every other axis."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        scale = logical_param(self, "scale", (c,), ("norm",), nn.initializers.ones)
        bias = logical_param(self, "bias", (c,), ("norm",), nn.initializers.zeros)
        grouped = x.astype(jnp.float32).reshape(x.shape[0], -1, GROUPS, c // GROUPS)
        mean = grouped.mean(axis=(1, 3), keepdims=True)
        var = jnp.square(grouped - mean).mean(axis=(1, 3), keepdims=True)
        y = ((grouped - mean) * jax.lax.rsqrt(var + 1e-5)).reshape(x.shape)
        return (y * scale + bias).astype(x.dtype)


class ResBlock(nn.Module):
    """conv, norm, SiLU, conv, norm, then SiLU of the sum with the input."""

    dims: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        h = nn.silu(GroupNorm(name="norm1")(Conv(c, self.dims, name="conv1")(x)))
        h = GroupNorm(name="norm2")(Conv(c, self.dims, name="conv2")(h))
        return nn.silu(h + x)


def pixel_shuffle(x: jax.Array, factors: tuple[int, ...]) -> jax.Array:
    """diffusers `PixelShuffleND`, channels-last: channels split (C, p1[, p2[, p3]]), each factor to its axis
    (the last `len(factors)` axes before channels)."""
    n = len(factors)
    *lead, c = x.shape
    batch = len(lead) - n
    x = x.reshape(*lead, c // math.prod(factors), *factors)
    order = list(range(batch))
    for i in range(n):  # [..., S1, .., Sn, C, p1, .., pn] -> [..., S1, p1, .., Sn, pn, C]
        order += [batch + i, batch + n + 1 + i]
    order.append(batch + n)
    return x.transpose(order).reshape(*lead[:batch], *(s * f for s, f in zip(lead[batch:], factors)), -1)


def blur_downsample(x: jax.Array, stride: int) -> jax.Array:
    """diffusers `BlurDownsample(dims=2)`: a depthwise 5x5 binomial blur (normalised outer product of
    1, 4, 6, 4, 1), zero padded by 2, at `stride`, on channels-last frames `[N, H, W, C]`."""
    if stride == 1:
        return x
    taps = np.array([math.comb(BLUR_TAPS - 1, k) for k in range(BLUR_TAPS)], np.float32)
    kernel = np.outer(taps, taps) / np.outer(taps, taps).sum()
    c = x.shape[-1]
    w = jnp.broadcast_to(jnp.asarray(kernel, x.dtype)[:, :, None, None], (BLUR_TAPS, BLUR_TAPS, 1, c))
    pad = BLUR_TAPS // 2
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2, feature_group_count=c,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=jax.lax.Precision.HIGHEST)


class RationalResampler(nn.Module):
    """diffusers `SpatialRationalResampler` on frames `[N, H, W, C]`: conv, shuffle by num, blur-down by den."""

    cfg: UpsamplerConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        num, den = self.cfg.spatial_ratio
        x = pixel_shuffle(Conv(num * num * x.shape[-1], 2, name="conv")(x), (num, num))
        return blur_downsample(x, den)


class LatentUpsampler(nn.Module):
    """The network; `__call__` on channels-last `[B, F, H, W, C]` latents."""

    cfg: UpsamplerConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.cfg
        b, f = x.shape[:2]
        dims = cfg.dims
        if dims == 2:  # every frame on its own
            x = x.reshape(b * f, *x.shape[2:])
        x = nn.silu(GroupNorm(name="initial_norm")(Conv(cfg.mid_channels, dims, name="initial_conv")(x)))
        for i in range(cfg.num_blocks_per_stage):
            x = ResBlock(dims, name=f"res_blocks_{i}")(x)
        x = self._upsample(x, b, f)
        for i in range(cfg.num_blocks_per_stage):
            x = ResBlock(dims, name=f"post_upsample_res_blocks_{i}")(x)
        x = Conv(cfg.in_channels, dims, name="final_conv")(x)
        return x.reshape(b, -1, *x.shape[-3:]) if dims == 2 else x

    def _upsample(self, x: jax.Array, b: int, f: int) -> jax.Array:
        cfg = self.cfg
        mid = cfg.mid_channels
        if cfg.temporal_upsample:  # a 3D conv, then the first output frame goes
            if cfg.spatial_upsample:
                x = pixel_shuffle(Conv(8 * mid, 3, name="upsampler_0")(x), (2, 2, 2))
            else:
                x = _time_shuffle(Conv(2 * mid, 3, name="upsampler_0")(x))
            return x[:, 1:]
        frames = x if cfg.dims == 2 else x.reshape(b * f, *x.shape[2:])  # the spatial head runs per frame
        if cfg.rational:
            frames = RationalResampler(cfg, name="upsampler")(frames)
        else:
            frames = pixel_shuffle(Conv(4 * mid, 2, name="upsampler_0")(frames), (2, 2))
        return frames if cfg.dims == 2 else frames.reshape(b, f, *frames.shape[1:])


def _time_shuffle(x: jax.Array) -> jax.Array:
    """PixelShuffleND(1): `[B, F, H, W, C·2]` -> `[B, 2F, H, W, C]`, channels split (C, 2)."""
    b, f, h, w, c2 = x.shape
    x = x.reshape(b, f, h, w, c2 // 2, 2)
    return x.transpose(0, 1, 5, 2, 3, 4).reshape(b, 2 * f, h, w, c2 // 2)


class LTX2LatentUpsampler:
    """Upsample un-normalised latents `[B, C, F, H, W]` (x2 in space for LTX-2's released model).

    Args:
      cfg: `UpsamplerConfig.from_hf_config(config_json)`.
      dtype: activation dtype (GroupNorm statistics in fp32).
    """

    def __init__(self, cfg: UpsamplerConfig, dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.module = LatentUpsampler(cfg)

    def __hash__(self):
        return hash((self.cfg, jnp.dtype(self.dtype).name))

    def __eq__(self, other):
        return isinstance(other, LTX2LatentUpsampler) and (self.cfg, self.dtype) == (other.cfg, other.dtype)

    def init_params(self, rng: jax.Array) -> Params:
        x = jnp.zeros((1, 2, 2, 2, self.cfg.in_channels), jnp.float32)
        return nn.unbox(self.module.init(rng, x)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.dit import param_shapes

        return param_shapes(self.init_params)

    def __call__(self, params: Params, latents: jax.Array) -> jax.Array:
        if latents.ndim != 5 or latents.shape[1] != self.cfg.in_channels:
            raise ValueError(f"the latent upsampler takes [B, {self.cfg.in_channels}, F, H, W], got {tuple(latents.shape)}")
        return _upsample(self, params, latents)


@partial(jax.jit, static_argnums=0)
def _upsample(model: LTX2LatentUpsampler, params: Params, latents: jax.Array) -> jax.Array:
    x = jnp.moveaxis(latents, 1, -1).astype(model.dtype)
    return jnp.moveaxis(model.module.apply({"params": params}, x), -1, 1).astype(jnp.float32)
