"""RAFT optical flow (Teed & Deng 2020), the large model VBench's dynamic degree runs (`raft-things.pth`).

Follows `vbench.third_party.RAFT.core` (the RAFT authors' code): a feature encoder (instance norm) over both
frames and a context encoder (batch norm, inference statistics) over the first, both ResNet-style at 1/8
size; the all-pairs correlation of the features (scaled by 1/sqrt(256)) average-pooled into 4 levels; then
`iters` refinements: each looks up a 9 x 9 window of every level around the current match (bilinear, zeros
outside: `grid_sample` with `align_corners=True`), encodes it with the flow, updates a separable ConvGRU and
adds the flow head's step. The last step's mask upsamples the flow 8x as a convex combination of 3 x 3
neighbours. Frames in [0, 255], `[B, H, W, 3]` with H and W multiples of 8 (VBench pads them first, as
`pad_to_8` does). Parameter paths mirror the torch module paths (`fnet/layer2_0/downsample_0/kernel`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

HIDDEN, CONTEXT, LEVELS, RADIUS = 128, 128, 4, 4
BN_EPS = IN_EPS = 1e-5


class Conv(nn.Module):
    """torch `nn.Conv2d` (with bias) on NHWC: kernel `[kh, kw, in, out]`, zero padding `pad` (h, w)."""

    features: int
    kernel: tuple[int, int]
    stride: int = 1
    pad: tuple[int, int] = (0, 0)

    @nn.compact
    def __call__(self, x):
        w = self.param("kernel", nn.initializers.lecun_normal(), (*self.kernel, x.shape[-1], self.features))
        y = jax.lax.conv_general_dilated(x, w, (self.stride, self.stride), [(p, p) for p in self.pad],
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"), precision="highest")
        return y + self.param("bias", nn.initializers.zeros, (self.features,))


def conv(features: int, size: int | tuple[int, int], stride: int = 1, name: str | None = None) -> Conv:
    """A conv with torch's "same" padding for odd sizes (`padding=k // 2`)."""
    kh, kw = (size, size) if isinstance(size, int) else size
    return Conv(features, (kh, kw), stride, (kh // 2, kw // 2), name=name)


def instance_norm(x):
    """torch `nn.InstanceNorm2d` (no affine, no running statistics): each image and channel over H, W."""
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + IN_EPS)


class BatchNorm(nn.Module):
    @nn.compact
    def __call__(self, x):
        shape = (x.shape[-1],)
        mean, var = self.param("mean", nn.initializers.zeros, shape), self.param("var", nn.initializers.ones, shape)
        scale, bias = self.param("scale", nn.initializers.ones, shape), self.param("bias", nn.initializers.zeros, shape)
        return (x - mean) * jax.lax.rsqrt(var + BN_EPS) * scale + bias


def _norm(kind: str, name: str):
    return BatchNorm(name=name) if kind == "batch" else instance_norm


class ResidualBlock(nn.Module):
    """Follows RAFT `ResidualBlock` (two 3x3 convs, a strided 1x1 shortcut when downsampling)."""

    planes: int
    norm: str
    stride: int = 1

    @nn.compact
    def __call__(self, x):
        y = jax.nn.relu(_norm(self.norm, "norm1")(conv(self.planes, 3, self.stride, name="conv1")(x)))
        y = jax.nn.relu(_norm(self.norm, "norm2")(conv(self.planes, 3, name="conv2")(y)))
        if self.stride != 1:  # torch's downsample.1 is norm3 itself (one module, two names in the state dict)
            x = _norm(self.norm, "norm3")(Conv(self.planes, (1, 1), self.stride, name="downsample_0")(x))
        return jax.nn.relu(x + y)


class BasicEncoder(nn.Module):
    """Follows RAFT `BasicEncoder`: 7x7/2 conv, three stages (64, 96/2, 128/2) of two residual blocks, 1x1 out."""

    features: int
    norm: str

    @nn.compact
    def __call__(self, x):
        x = jax.nn.relu(_norm(self.norm, "norm1")(conv(64, 7, 2, name="conv1")(x)))
        for stage, (planes, stride) in enumerate(((64, 1), (96, 2), (128, 2)), start=1):
            x = ResidualBlock(planes, self.norm, stride, name=f"layer{stage}_0")(x)
            x = ResidualBlock(planes, self.norm, 1, name=f"layer{stage}_1")(x)
        return Conv(self.features, (1, 1), name="conv2")(x)


def correlation_pyramid(f1, f2) -> list[jax.Array]:
    """RAFT `CorrBlock`: all-pairs dot products / sqrt(C), `[B, H1*W1, H2, W2]`, then 2x2 average pools."""
    b, h, w, c = f1.shape
    corr = jnp.einsum("bqc,bkc->bqk", f1.reshape(b, h * w, c), f2.reshape(b, h * w, c), precision="highest")
    level = corr.reshape(b, h * w, h, w) / jnp.sqrt(jnp.float32(c))
    pyramid = [level]
    for _ in range(LEVELS - 1):
        n, q, hh, ww = level.shape
        level = level[:, :, :hh // 2 * 2, :ww // 2 * 2].reshape(n, q, hh // 2, 2, ww // 2, 2).mean(axis=(3, 5))
        pyramid.append(level)
    return pyramid


def _bilinear(maps, x, y):
    """`maps [B, Q, H, W]` sampled at pixel coordinates `x, y [B, Q, P]`, zeros outside (grid_sample, aligned corners)."""
    b, q, h, w = maps.shape
    flat = maps.reshape(b, q, h * w)
    x0, y0 = jnp.floor(x), jnp.floor(y)
    out = 0.0
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xi, yi = x0 + dx, y0 + dy
        weight = (1 - jnp.abs(x - xi)) * (1 - jnp.abs(y - yi))
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        index = (jnp.clip(yi, 0, h - 1) * w + jnp.clip(xi, 0, w - 1)).astype(jnp.int32)
        out = out + jnp.where(inside, jnp.take_along_axis(flat, index, axis=2), 0.0) * weight
    return out


def lookup(pyramid: list[jax.Array], coords) -> jax.Array:
    """RAFT `CorrBlock.__call__`: each level's 9 x 9 window around `coords [B, H, W, 2]` (x, y) / 2^level,
    `[B, H, W, LEVELS * 81]`; within a level the x offset is the major index (the reference's meshgrid order)."""
    b, h, w, _ = coords.shape
    offsets = jnp.linspace(-RADIUS, RADIUS, 2 * RADIUS + 1)
    ox, oy = jnp.meshgrid(offsets, offsets, indexing="ij")  # [9, 9]: x offset by row, y offset by column
    out = []
    for level, maps in enumerate(pyramid):
        centre = coords.reshape(b, h * w, 1, 2) / 2**level
        x = centre[..., 0] + ox.reshape(1, 1, -1)
        y = centre[..., 1] + oy.reshape(1, 1, -1)
        out.append(_bilinear(maps, x, y).reshape(b, h, w, -1))
    return jnp.concatenate(out, axis=-1)


class MotionEncoder(nn.Module):
    """Follows RAFT `BasicMotionEncoder`."""

    @nn.compact
    def __call__(self, flow, corr):
        cor = jax.nn.relu(conv(192, 3, name="convc2")(jax.nn.relu(conv(256, 1, name="convc1")(corr))))
        flo = jax.nn.relu(conv(64, 3, name="convf2")(jax.nn.relu(conv(128, 7, name="convf1")(flow))))
        out = jax.nn.relu(conv(128 - 2, 3, name="conv")(jnp.concatenate([cor, flo], axis=-1)))
        return jnp.concatenate([out, flow], axis=-1)


class SepConvGRU(nn.Module):
    """Follows RAFT `SepConvGRU`: a 1x5 GRU step, then a 5x1 one."""

    @nn.compact
    def __call__(self, h, x):
        for axis, size in (("1", (1, 5)), ("2", (5, 1))):
            hx = jnp.concatenate([h, x], axis=-1)
            z = jax.nn.sigmoid(conv(HIDDEN, size, name=f"convz{axis}")(hx))
            r = jax.nn.sigmoid(conv(HIDDEN, size, name=f"convr{axis}")(hx))
            q = jnp.tanh(conv(HIDDEN, size, name=f"convq{axis}")(jnp.concatenate([r * h, x], axis=-1)))
            h = (1 - z) * h + z * q
        return h


class FlowHead(nn.Module):
    """Follows RAFT `FlowHead`."""

    @nn.compact
    def __call__(self, x):
        return conv(2, 3, name="conv2")(jax.nn.relu(conv(256, 3, name="conv1")(x)))


class UpdateBlock(nn.Module):
    """One refinement, RAFT `BasicUpdateBlock` at the current match (scanned `iters` times, weights shared):
    `((net, coords1, mask), inp, pyramid, coords0) -> ((net, coords1 + delta, 0.25 * mask logits), None)`."""

    @nn.compact
    def __call__(self, carry, inp, pyramid, coords0):
        net, coords1, _mask = carry
        motion = MotionEncoder(name="encoder")(coords1 - coords0, lookup(pyramid, coords1))
        net = SepConvGRU(name="gru")(net, jnp.concatenate([inp, motion], axis=-1))
        delta = FlowHead(name="flow_head")(net)
        mask = 0.25 * Conv(64 * 9, (1, 1), name="mask_2")(jax.nn.relu(conv(256, 3, name="mask_0")(net)))
        return (net, coords1 + delta, mask), None


def upsample_flow(flow, mask):
    """RAFT `upsample_flow`: `[B, h, w, 2]` -> `[B, 8h, 8w, 2]`, each fine pixel a softmax-weighted mix of the
    coarse 3 x 3 neighbourhood (zero-padded) of 8 x flow; mask `[B, h, w, 576]` ordered (neighbour, row, col)."""
    b, h, w, _ = flow.shape
    weights = jax.nn.softmax(mask.reshape(b, h, w, 9, 8, 8), axis=3)
    padded = jnp.pad(8 * flow, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = jnp.stack([padded[:, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=3)  # [B, h, w, 9, 2]
    up = jnp.einsum("bhwnyx,bhwnc->bhywxc", weights, patches, precision="highest")
    return up.reshape(b, 8 * h, 8 * w, 2)


class RAFT(nn.Module):
    """`__call__(image1, image2 [B, H, W, 3] in [0, 255], iters)` -> the upsampled flow `[B, H, W, 2]` (x, y) of
    the last refinement (RAFT's `test_mode` second output)."""

    iters: int = 20

    @nn.compact
    def __call__(self, image1, image2):
        b, h, w, _ = image1.shape
        image1, image2 = 2 * (image1 / 255.0) - 1.0, 2 * (image2 / 255.0) - 1.0
        features = BasicEncoder(256, "instance", name="fnet")(jnp.concatenate([image1, image2]))
        pyramid = correlation_pyramid(features[:b], features[b:])
        context = BasicEncoder(HIDDEN + CONTEXT, "batch", name="cnet")(image1)
        net, inp = jnp.tanh(context[..., :HIDDEN]), jax.nn.relu(context[..., HIDDEN:])
        ys, xs = jnp.meshgrid(jnp.arange(h // 8, dtype=jnp.float32), jnp.arange(w // 8, dtype=jnp.float32), indexing="ij")
        coords0 = jnp.broadcast_to(jnp.stack([xs, ys], axis=-1), (b, h // 8, w // 8, 2))
        refine = nn.scan(UpdateBlock, variable_broadcast="params", split_rngs={"params": False}, length=self.iters,
                         in_axes=(nn.broadcast, nn.broadcast, nn.broadcast))
        carry = (net, coords0, jnp.zeros((b, h // 8, w // 8, 64 * 9), net.dtype))
        (net, coords1, mask), _ = refine(name="update_block")(carry, inp, pyramid, coords0)
        return upsample_flow(coords1 - coords0, mask)
