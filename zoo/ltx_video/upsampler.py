"""LTX-Video latent upsampler (follows diffusers `LTXLatentUpsamplerModel`, the official `LatentUpsampler`).

The 0.9.7 / 0.9.8 multi-scale pipeline generates at 2/3 size, upsamples the (un-normalised) latents
x2 in space with this network, and refines at full size. A conv + GroupNorm(32) + SiLU stem at
`mid_channels`, residual blocks, a conv to 4x (space), 2x (time) or 8x channels and a pixel shuffle,
more residual blocks, and a conv back to the latent channels. With `dims = 3` the stem, blocks and
head are 3D convolutions (zero padded in time too, unlike the VAE) and GroupNorm spans frames; the
spatial upsampling conv is 2D, per frame. Temporal upsampling drops the first output frame (2F − 1).

Activations run channels-last; `__call__` takes and returns diffusers' `[B, C, F, H, W]`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.layers import logical_param
from vidax.zoo.ltx_video.config import UpsamplerConfig

Params = dict[str, Any]
GROUPS = 32  # torch.nn.GroupNorm(32, C), eps 1e-5


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
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), (1,) * d, [(1, 1)] * d, dimension_numbers=spec)
        return y + b.astype(x.dtype)


class GroupNorm(nn.Module):
    """torch `GroupNorm(32, C)` over channels-last input: statistics per group over every other axis."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        scale = logical_param(self, "scale", (c,), ("norm",), nn.initializers.ones)
        bias = logical_param(self, "bias", (c,), ("norm",), nn.initializers.zeros)
        x32 = x.astype(jnp.float32)
        grouped = x32.reshape(x.shape[0], -1, GROUPS, c // GROUPS)
        mean = grouped.mean(axis=(1, 3), keepdims=True)
        var = jnp.square(grouped - mean).mean(axis=(1, 3), keepdims=True)
        y = ((grouped - mean) * jax.lax.rsqrt(var + 1e-5)).reshape(x.shape)
        return (y * scale + bias).astype(x.dtype)


class ResBlock(nn.Module):
    """diffusers `ResBlock`: conv, norm, SiLU, conv, norm, then SiLU of the sum with the input."""

    dims: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        h = nn.silu(GroupNorm(name="norm1")(Conv(c, self.dims, name="conv1")(x)))
        h = GroupNorm(name="norm2")(Conv(c, self.dims, name="conv2")(h))
        return nn.silu(h + x)


def pixel_shuffle(x: jax.Array, factors: tuple[int, ...]) -> jax.Array:
    """diffusers `PixelShuffleND`, channels-last: channels split (C, p1[, p2[, p3]]), each factor to its axis
    (the last `len(factors)` spatial axes before channels)."""
    n = len(factors)
    *lead, c = x.shape
    spatial = lead[-n:]
    x = x.reshape(*lead, c // math.prod(factors), *factors)
    batch = len(lead) - n
    # [..., S1, .., Sn, C, p1, .., pn] -> [..., S1, p1, .., Sn, pn, C]
    order = list(range(batch))
    for i in range(n):
        order += [batch + i, batch + n + 1 + i]
    order.append(batch + n)
    x = x.transpose(order)
    return x.reshape(*lead[:batch], *(s * f for s, f in zip(spatial, factors)), -1)


class LatentUpsampler(nn.Module):
    """The network; `__call__` on channels-last `[B, F, H, W, C]` latents."""

    cfg: UpsamplerConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.cfg
        b, f, h, w, _ = x.shape
        dims = cfg.dims
        if dims == 2:  # every frame on its own
            x = x.reshape(b * f, h, w, -1)
        x = nn.silu(GroupNorm(name="initial_norm")(Conv(cfg.mid_channels, dims, name="initial_conv")(x)))
        for i in range(cfg.num_blocks_per_stage):
            x = ResBlock(dims, name=f"res_blocks_{i}")(x)
        x = self._upsample(x, b, f)
        for i in range(cfg.num_blocks_per_stage):
            x = ResBlock(dims, name=f"post_upsample_res_blocks_{i}")(x)
        x = Conv(cfg.in_channels, dims, name="final_conv")(x)
        return x.reshape(b, -1, *x.shape[-3:]) if dims == 2 else x

    def _upsample(self, x: jax.Array, b: int, f: int) -> jax.Array:
        """`upsampler.0` conv and pixel shuffle; time-upsampled outputs drop their first frame."""
        cfg = self.cfg
        mid = cfg.mid_channels
        if cfg.temporal_upsample:  # a 3D conv, then the first output frame goes
            if cfg.spatial_upsample:
                x = pixel_shuffle(Conv(8 * mid, 3, name="upsampler_0")(x), (2, 2, 2))
            else:
                x = _time_shuffle(Conv(2 * mid, 3, name="upsampler_0")(x))
            return x[:, 1:]
        frames = x if cfg.dims == 2 else x.reshape(b * f, *x.shape[2:])  # the 2D conv runs per frame
        frames = pixel_shuffle(Conv(4 * mid, 2, name="upsampler_0")(frames), (2, 2))
        return frames if cfg.dims == 2 else frames.reshape(b, f, *frames.shape[1:])


def _time_shuffle(x: jax.Array) -> jax.Array:
    """PixelShuffleND(1): `[B, F, H, W, C·2]` -> `[B, 2F, H, W, C]`, channels split (C, 2)."""
    b, f, h, w, c2 = x.shape
    x = x.reshape(b, f, h, w, c2 // 2, 2)
    return x.transpose(0, 1, 5, 2, 3, 4).reshape(b, 2 * f, h, w, c2 // 2)


class LTXLatentUpsampler:
    """Upsample un-normalised latents `[B, C, F, H, W]` (x2 in space for the released 0.9.7 / 0.9.8 model).

    Args:
      cfg: `UpsamplerConfig.from_hf_config(config_json)` (or `from_official_config`).
      dtype: activation dtype (GroupNorm statistics in fp32).
    """

    def __init__(self, cfg: UpsamplerConfig, dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.module = LatentUpsampler(cfg)

    def __hash__(self):
        return hash((self.cfg, jnp.dtype(self.dtype).name))

    def __eq__(self, other):
        return isinstance(other, LTXLatentUpsampler) and (self.cfg, self.dtype) == (other.cfg, other.dtype)

    def init_params(self, rng: jax.Array) -> Params:
        x = jnp.zeros((1, 2, 1, 1, self.cfg.in_channels), jnp.float32)
        return nn.unbox(self.module.init(rng, x)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.dit import param_shapes

        return param_shapes(self.init_params)

    def __call__(self, params: Params, latents: jax.Array) -> jax.Array:
        if latents.ndim != 5 or latents.shape[1] != self.cfg.in_channels:
            raise ValueError(f"the latent upsampler takes [B, {self.cfg.in_channels}, F, H, W], got {tuple(latents.shape)}")
        return _upsample(self, params, latents)


@partial(jax.jit, static_argnums=0)
def _upsample(model: LTXLatentUpsampler, params: Params, latents: jax.Array) -> jax.Array:
    x = jnp.moveaxis(latents, 1, -1).astype(model.dtype)
    return jnp.moveaxis(model.module.apply({"params": params}, x), -1, 1).astype(jnp.float32)
