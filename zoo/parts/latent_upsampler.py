"""The latent upsampler network LTX-Video (0.9.7 / 0.9.8) and LTX-2 ship, and its layers.

Both follow the official `LatentUpsampler` (diffusers `LTXLatentUpsamplerModel` / `LTX2LatentUpsamplerModel`): a
conv + GroupNorm(32) + SiLU stem at `mid_channels`, residual blocks, an upsampling head, more residual blocks, and
a conv back to the latent channels. With `dims = 3` the stem, blocks and final conv are 3D convolutions (zero padded
in time too, unlike the VAEs) and GroupNorm spans frames; the spatial head is 2D, per frame. The head here is a conv
to 4x (space), 2x (time) or 8x (both) channels and a pixel shuffle; temporal upsampling drops the first output frame
(2F − 1). A family whose release has another spatial head (LTX-2's rational resampler) subclasses `LatentUpsampler`
and overrides `spatial_head`.

Activations run channels-last; `LatentUpsamplerModel.__call__` takes and returns diffusers' `[B, C, F, H, W]`.
The module names follow diffusers' (`upsampler.0` is `upsampler_0`), so the families' specs stay short.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.compute.layers import logical_param

Params = dict[str, Any]
GROUPS = 32  # torch.nn.GroupNorm(32, C), eps 1e-5


class Conv(nn.Module):
    """torch `Conv2d` / `Conv3d` with kernel 3 and zero padding 1 (kernel `[*k, I, O]`), channels-last.

    `precision`: None runs at the runtime's matmul precision; a port may pin one (LTX-2's pins HIGHEST)."""

    features: int
    dims: int
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = self.dims
        w = logical_param(self, "kernel", (3,) * d + (x.shape[-1], self.features), (None,) * d + ("conv_in", "conv_out"))
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        spec = ("NDHWC", "DHWIO", "NDHWC") if d == 3 else ("NHWC", "HWIO", "NHWC")
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), (1,) * d, [(1, 1)] * d, dimension_numbers=spec,
                                         precision=self.precision)
        return y + b.astype(x.dtype)


class GroupNorm(nn.Module):
    """torch `GroupNorm(32, C)` over channels-last input: statistics per group over every other axis, in fp32."""

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
    """diffusers `ResBlock`: conv, norm, SiLU, conv, norm, then SiLU of the sum with the input."""

    dims: int
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        h = nn.silu(GroupNorm(name="norm1")(Conv(c, self.dims, self.precision, name="conv1")(x)))
        h = GroupNorm(name="norm2")(Conv(c, self.dims, self.precision, name="conv2")(h))
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


def time_shuffle(x: jax.Array) -> jax.Array:
    """PixelShuffleND(1): `[B, F, H, W, C·2]` -> `[B, 2F, H, W, C]`, channels split (C, 2)."""
    b, f, h, w, c2 = x.shape
    x = x.reshape(b, f, h, w, c2 // 2, 2)
    return x.transpose(0, 1, 5, 2, 3, 4).reshape(b, 2 * f, h, w, c2 // 2)


class LatentUpsampler(nn.Module):
    """The network; `__call__` on channels-last `[B, F, H, W, C]` latents.

    `cfg`: a family's upsampler config (in_channels, mid_channels, num_blocks_per_stage, dims, spatial_upsample,
    temporal_upsample). `precision`: the convolutions' (see `Conv`)."""

    cfg: Any
    precision: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.cfg
        b, f = x.shape[:2]
        dims = cfg.dims
        if dims == 2:  # every frame on its own
            x = x.reshape(b * f, *x.shape[2:])
        x = nn.silu(GroupNorm(name="initial_norm")(Conv(cfg.mid_channels, dims, self.precision, name="initial_conv")(x)))
        for i in range(cfg.num_blocks_per_stage):
            x = ResBlock(dims, self.precision, name=f"res_blocks_{i}")(x)
        x = self._upsample(x, b, f)
        for i in range(cfg.num_blocks_per_stage):
            x = ResBlock(dims, self.precision, name=f"post_upsample_res_blocks_{i}")(x)
        x = Conv(cfg.in_channels, dims, self.precision, name="final_conv")(x)
        return x.reshape(b, -1, *x.shape[-3:]) if dims == 2 else x

    def _upsample(self, x: jax.Array, b: int, f: int) -> jax.Array:
        """The head; time-upsampled outputs drop their first frame, the spatial head runs per frame."""
        cfg = self.cfg
        mid = cfg.mid_channels
        if cfg.temporal_upsample:  # a 3D conv, then the first output frame goes
            if cfg.spatial_upsample:
                x = pixel_shuffle(Conv(8 * mid, 3, self.precision, name="upsampler_0")(x), (2, 2, 2))
            else:
                x = time_shuffle(Conv(2 * mid, 3, self.precision, name="upsampler_0")(x))
            return x[:, 1:]
        frames = x if cfg.dims == 2 else x.reshape(b * f, *x.shape[2:])
        frames = self.spatial_head(frames)
        return frames if cfg.dims == 2 else frames.reshape(b, f, *frames.shape[1:])

    def spatial_head(self, frames: jax.Array) -> jax.Array:
        """x2 in space on frames `[N, H, W, C]`: `upsampler.0` conv to 4x channels and a pixel shuffle."""
        return pixel_shuffle(Conv(4 * self.cfg.mid_channels, 2, self.precision, name="upsampler_0")(frames), (2, 2))


class LatentUpsamplerModel:
    """Upsample un-normalised latents `[B, C, F, H, W]` with a family's network (`NETWORK`, run at
    `CONV_PRECISION`); a family subclasses it to name both.

    Args:
      cfg: the family's `UpsamplerConfig`.
      dtype: activation dtype (GroupNorm statistics in fp32).
    """

    NETWORK: ClassVar[type[LatentUpsampler]] = LatentUpsampler
    CONV_PRECISION: ClassVar[Any] = None

    def __init__(self, cfg: Any, dtype: Any = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.module = self.NETWORK(cfg, self.CONV_PRECISION)

    def __hash__(self):
        return hash((type(self), self.cfg, jnp.dtype(self.dtype).name))

    def __eq__(self, other):
        return type(other) is type(self) and (self.cfg, self.dtype) == (other.cfg, other.dtype)

    def init_params(self, rng: jax.Array) -> Params:
        x = jnp.zeros((1, 2, 2, 2, self.cfg.in_channels), jnp.float32)
        return nn.unbox(self.module.init(rng, x)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def __call__(self, params: Params, latents: jax.Array) -> jax.Array:
        if latents.ndim != 5 or latents.shape[1] != self.cfg.in_channels:
            raise ValueError(f"the latent upsampler takes [B, {self.cfg.in_channels}, F, H, W], got {tuple(latents.shape)}")
        return _upsample(self, params, latents)


@partial(jax.jit, static_argnums=0)
def _upsample(model: LatentUpsamplerModel, params: Params, latents: jax.Array) -> jax.Array:
    x = jnp.moveaxis(latents, 1, -1).astype(model.dtype)
    return jnp.moveaxis(model.module.apply({"params": params}, x), -1, 1).astype(jnp.float32)
