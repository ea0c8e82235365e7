"""Layers the video VAEs share, on channels-last video `[B, F, H, W, C]`: torch's `Conv3d` and the
causal 3D convolution built on it (one level down, as `conv`, the way diffusers nests it)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.layers import logical_param

# How `CausalConv3d` pads height and width: jnp.pad's mode per torch padding mode.
SPATIAL_PADDING = {"replicate": "edge", "zeros": "constant", "reflect": "reflect"}


class Conv3d(nn.Module):
    """torch `Conv3d` without padding (`VALID`): kernel `[k, k, k, I, O]` (the spec's conv op), bias `[O]`."""

    features: int
    kernel: int = 3
    stride: tuple[int, int, int] = (1, 1, 1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel
        axes = (None, None, None, "conv_in", "conv_out")
        w = logical_param(self, "kernel", (k, k, k, x.shape[-1], self.features), axes)
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), self.stride, "VALID",
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        return y + b.astype(x.dtype)


class CausalConv3d(nn.Module):
    """A `Conv3d` as `conv` after padding: frames by replication (the first frame k-1 times in front
    when `causal`, else (k-1)//2 first and last frames), height and width by k//2 each side in
    `spatial_padding` mode ("replicate": HunyuanVideo 1.0 and 1.5; "zeros": torch's own conv padding,
    LTX-Video; "reflect").

    Follows diffusers `HunyuanVideoCausalConv3d`, `HunyuanVideo15CausalConv3d`, `LTXVideoCausalConv3d`
    and `LTX2VideoCausalConv3d`.
    """

    features: int
    kernel: int = 3
    stride: tuple[int, int, int] = (1, 1, 1)
    causal: bool = True
    spatial_padding: str = "replicate"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.spatial_padding not in SPATIAL_PADDING:
            raise ValueError(f"CausalConv3d: spatial_padding must be one of {tuple(SPATIAL_PADDING)}, "
                             f"got {self.spatial_padding!r}")
        k = self.kernel
        if k > 1:
            before, after = (k - 1, 0) if self.causal else ((k - 1) // 2, (k - 1) // 2)
            x = jnp.pad(x, ((0, 0), (before, after), (0, 0), (0, 0), (0, 0)), mode="edge")
            s = k // 2
            x = jnp.pad(x, ((0, 0), (0, 0), (s, s), (s, s), (0, 0)), mode=SPATIAL_PADDING[self.spatial_padding])
        return Conv3d(self.features, k, self.stride, name="conv")(x)
