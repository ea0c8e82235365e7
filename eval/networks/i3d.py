"""Inception-v1 I3D (Carreira & Zisserman 2017) with Kinetics-400 logits: the network FVD reads.

Follows cd-fvd's `InceptionI3d` (piergiaj's PyTorch port, the TATS weights `i3d_pretrained_400.pt`):
every `Unit3D` pads its input as TensorFlow's "SAME" does for that input size (front gets the smaller
half), then convolves without a bias, batch-normalises (inference statistics, eps 1e-5) and applies ReLU;
max pools pad with zeros the same way. The head averages a 2x7x7 window (so 224x224 frames and at least 9
of them), applies the 1x1x1 logits convolution with its bias and averages over time: `[B, 400]`.
Parameter paths mirror the torch module paths (`Mixed_4b/b1b/conv3d/kernel`, `.../bn/mean`). Layout
channels-last: `[B, T, H, W, C]`.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

BN_EPS = 1e-5
# (name, output channels of b0, b1a, b1b, b2a, b2b, b3b), in order, with the max pools between them
INCEPTION = (
    ("Mixed_3b", (64, 96, 128, 16, 32, 32)),
    ("Mixed_3c", (128, 128, 192, 32, 96, 64)),
    ("MaxPool3d_4a_3x3", ((3, 3, 3), (2, 2, 2))),
    ("Mixed_4b", (192, 96, 208, 16, 48, 64)),
    ("Mixed_4c", (160, 112, 224, 24, 64, 64)),
    ("Mixed_4d", (128, 128, 256, 24, 64, 64)),
    ("Mixed_4e", (112, 144, 288, 32, 64, 64)),
    ("Mixed_4f", (256, 160, 320, 32, 128, 128)),
    ("MaxPool3d_5a_2x2", ((2, 2, 2), (2, 2, 2))),
    ("Mixed_5b", (256, 160, 320, 32, 128, 128)),
    ("Mixed_5c", (384, 192, 384, 48, 128, 128)),
)
NUM_CLASSES = 400


def same_padding(x: jax.Array, kernel: Sequence[int], stride: Sequence[int]) -> jax.Array:
    """Zero-pad T, H, W of `[B, T, H, W, C]` as the reference's `compute_pad` does for these sizes."""
    pads = [(0, 0)]
    for size, k, s in zip(x.shape[1:4], kernel, stride):
        total = max(k - s, 0) if size % s == 0 else max(k - size % s, 0)
        pads.append((total // 2, total - total // 2))
    return jnp.pad(x, pads + [(0, 0)])


def max_pool(x: jax.Array, kernel: Sequence[int], stride: Sequence[int]) -> jax.Array:
    """The reference's `MaxPool3dSamePadding`: zero padding, then a max over each window."""
    x = same_padding(x, kernel, stride)
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, *kernel, 1), (1, *stride, 1), "VALID")


class Unit3D(nn.Module):
    """Follows cd-fvd `Unit3D`: same padding, Conv3d, BatchNorm3d (inference), ReLU (or the bare biased logits conv)."""

    features: int
    kernel: Sequence[int] = (1, 1, 1)
    stride: Sequence[int] = (1, 1, 1)
    head: bool = False  # the logits unit: a bias, no norm, no activation

    @nn.compact
    def __call__(self, x):
        x = same_padding(x, self.kernel, self.stride)
        conv = _Conv3d(self.features, tuple(self.kernel), tuple(self.stride), self.head, name="conv3d")
        x = conv(x)
        if self.head:
            return x
        return jax.nn.relu(_BatchNorm(self.features, name="bn")(x))


class _Conv3d(nn.Module):
    features: int
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    use_bias: bool

    @nn.compact
    def __call__(self, x):
        w = self.param("kernel", nn.initializers.lecun_normal(), (*self.kernel, x.shape[-1], self.features))
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), self.stride, "VALID",
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC"), precision="highest")
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (self.features,)).astype(y.dtype)
        return y


class _BatchNorm(nn.Module):
    """BatchNorm3d at inference: (x - running mean) / sqrt(running var + eps) * weight + bias."""

    features: int

    @nn.compact
    def __call__(self, x):
        shape = (self.features,)
        mean = self.param("mean", nn.initializers.zeros, shape)
        var = self.param("var", nn.initializers.ones, shape)
        scale = self.param("scale", nn.initializers.ones, shape)
        bias = self.param("bias", nn.initializers.zeros, shape)
        return (x - mean) * jax.lax.rsqrt(var + BN_EPS) * scale + bias


class InceptionModule(nn.Module):
    """Follows cd-fvd `InceptionModule`: four branches concatenated on channels."""

    channels: Sequence[int]

    @nn.compact
    def __call__(self, x):
        c = self.channels
        b0 = Unit3D(c[0], name="b0")(x)
        b1 = Unit3D(c[2], (3, 3, 3), name="b1b")(Unit3D(c[1], name="b1a")(x))
        b2 = Unit3D(c[4], (3, 3, 3), name="b2b")(Unit3D(c[3], name="b2a")(x))
        b3 = Unit3D(c[5], name="b3b")(max_pool(x, (3, 3, 3), (1, 1, 1)))
        return jnp.concatenate([b0, b1, b2, b3], axis=-1)


class InceptionI3d(nn.Module):
    """`__call__(videos [B, T, 224, 224, 3] in [-1, 1])` -> Kinetics-400 logits `[B, 400]` (`head=False`:
    Mixed_5c's output `[B, T', 7, 7, 1024]`)."""

    num_classes: int = NUM_CLASSES

    @nn.compact
    def __call__(self, x, head: bool = True):
        x = max_pool(Unit3D(64, (7, 7, 7), (2, 2, 2), name="Conv3d_1a_7x7")(x), (1, 3, 3), (1, 2, 2))
        x = Unit3D(192, (3, 3, 3), name="Conv3d_2c_3x3")(Unit3D(64, name="Conv3d_2b_1x1")(x))
        x = max_pool(x, (1, 3, 3), (1, 2, 2))
        for name, spec in INCEPTION:
            x = InceptionModule(spec, name=name)(x) if name.startswith("Mixed") else max_pool(x, *spec)
        if not head:
            return x
        if x.shape[2:4] != (7, 7) or x.shape[1] < 2:
            raise ValueError(f"I3D: 224x224 frames and at least 9 of them are needed (the head's features are {x.shape[1:4]})")
        x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 7, 7, 1), (1, 1, 1, 1, 1), "VALID") / (2 * 7 * 7)
        return Unit3D(self.num_classes, head=True, name="logits")(x)[:, :, 0, 0, :].mean(axis=1)  # [B, T', 1, 1, K] -> [B, K]
