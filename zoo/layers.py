"""Layers shared by every family: dense projections and norms that carry logical axis names.

Parameters are created in fp32 for `init` / `eval_shape` only; real weights arrive as a host tree
in the dtype the conversion spec chose. Each layer computes in `dtype` (default: the input's
dtype) and casts its weights to it, except the norms, which compute in fp32 as the references do.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Axes = tuple[str | None, ...]


def logical_param(module: nn.Module, name: str, shape: tuple[int, ...], axes: Axes, init=None):
    """Declare a parameter with logical axis names (used by the sharding rules tables)."""
    init = init or nn.initializers.normal(0.02)
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.float32)


class Dense(nn.Module):
    """`y = x @ kernel + bias`, kernel `[in, out]` (a torch Linear's weight transposed)."""

    features: int
    axes: Axes = ("embed", "mlp")
    use_bias: bool = True
    dtype: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.dtype or x.dtype
        kernel = logical_param(self, "kernel", (x.shape[-1], self.features), self.axes)
        y = jnp.dot(x.astype(dtype), kernel.astype(dtype))
        if self.use_bias:
            bias = logical_param(self, "bias", (self.features,), self.axes[-1:], nn.initializers.zeros)
            y = y + bias.astype(dtype)
        return y


class RMSNorm(nn.Module):
    """RMS norm over the last axis in fp32; `scale` optional (torch `elementwise_affine`)."""

    eps: float = 1e-6
    use_scale: bool = True
    axis_name: str | None = "norm"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = x.dtype
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        if self.use_scale:
            scale = logical_param(self, "scale", (x.shape[-1],), (self.axis_name,), nn.initializers.ones)
            y = y * scale.astype(jnp.float32)
        return y.astype(dtype)


class LayerNorm(nn.Module):
    """LayerNorm over the last axis in fp32; affine optional (torch `elementwise_affine`)."""

    eps: float = 1e-6
    use_scale: bool = True
    use_bias: bool = True
    axis_name: str | None = "norm"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = x.dtype
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        if self.use_scale:
            y = y * logical_param(self, "scale", (x.shape[-1],), (self.axis_name,), nn.initializers.ones)
        if self.use_bias:
            y = y + logical_param(self, "bias", (x.shape[-1],), (self.axis_name,), nn.initializers.zeros)
        return y.astype(dtype)


class PatchEmbed(nn.Module):
    """A Conv3d whose stride is its kernel (video patchify), written as patchify + one matmul.

    `[B, C, F, H, W]` → tokens `[B, S, features]` in (f, h, w) order; kernel `[pt, ph, pw, C, features]`
    (the torch Conv3d weight permuted by the spec's `conv` op).
    """

    features: int
    patch: tuple[int, int, int]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        pt, ph, pw = self.patch
        b, c, f, h, w = x.shape
        kernel = logical_param(self, "kernel", (pt, ph, pw, c, self.features), (None, None, None, "conv_in", "embed"))
        bias = logical_param(self, "bias", (self.features,), ("embed",), nn.initializers.zeros)
        x = x.reshape(b, c, f // pt, pt, h // ph, ph, w // pw, pw)
        x = x.transpose(0, 2, 4, 6, 3, 5, 7, 1).reshape(b, -1, pt * ph * pw * c)  # [B, S, pt*ph*pw*C]
        return jnp.dot(x, kernel.reshape(-1, self.features).astype(x.dtype)) + bias.astype(x.dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


def gelu_exact(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)
