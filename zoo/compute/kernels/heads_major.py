"""Self-attention whose q/k/v come out of their projections heads-major and padded: the TPU kernels' layout.

JAX's splash and flash kernels take `[B, H, S, D]` with S a multiple of their blocks. Fed `[B, S, H, D]`
q/k/v (`attention.attention`), each is padded and transposed into a second buffer, and the output
transposed back: at Wan2.1-14B 720p (75,600 tokens, CFG pair) every such copy is 1.45 GiB and XLA's
buffer report held q/k/v in both layouts at once. Here the hidden state is padded once (a few hundred
zero tokens), each projection is one einsum with its kernel viewed `[D, H, Dh]` that writes
`[B, H, S_pad, Dh]`, the q/k norms and RoPE run in that layout, and the output goes back through one einsum
with `to_out`'s kernel viewed `[H, Dh, D]`. The modules declare the same params as `Dense` / `RMSNorm`
(same names, shapes and logical axes), so a checkpoint loads into either form.

Used only where `attention.heads_major_choice` says a TPU kernel runs on one device: elsewhere (CPU, GPU,
under a mesh) the families keep their `[B, S, H, D]` programs, bit for bit.

`attention_rows`: whether the attention sub-block runs one CFG row at a time (`rows_one_at_a_time`), the
memory planner's rule (`planner.attention_by_rows`) against the device's memory.
"""

from __future__ import annotations

import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.compute.layers import logical_param


def pad_tokens(x: jax.Array, length: int, axis: int = 1) -> jax.Array:
    """`x` zero-padded along `axis` to `length`."""
    if x.shape[axis] == length:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad)


def _kernel(module: nn.Module, shape: tuple[int, int], axes, dtype) -> jax.Array:
    kernel = logical_param(module, "kernel", shape, axes)
    if module.has_variable("params", "kernel_scale"):  # 8-bit (--weights-dtype), as `Dense`
        kernel = kernel.astype(jnp.float32) * module.get_variable("params", "kernel_scale")
    return kernel.astype(dtype)


class HeadsDense(nn.Module):
    """`Dense(heads * head_dim)` whose product comes out heads-major: `[B, S, in] -> [B, H, S, Dh]`."""

    features: int
    heads: int
    axes: tuple = ("embed", "heads")
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = x.dtype
        kernel = _kernel(self, (x.shape[-1], self.features), self.axes, dtype)
        head_dim = self.features // self.heads
        y = jnp.einsum("bsi,ihd->bhsd", x, kernel.reshape(x.shape[-1], self.heads, head_dim))
        if self.use_bias:
            bias = logical_param(self, "bias", (self.features,), self.axes[-1:], nn.initializers.zeros)
            y = y + bias.astype(dtype).reshape(self.heads, 1, head_dim)
        return y


class HeadsOut(nn.Module):
    """`Dense(features)` over heads-major input: `[B, H, S, Dh] -> [B, S, features]` (kernel `[H * Dh, out]`)."""

    features: int
    axes: tuple = ("heads", "embed")
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        _, heads, _, head_dim = x.shape
        kernel = _kernel(self, (heads * head_dim, self.features), self.axes, x.dtype)
        y = jnp.einsum("bhsd,hdf->bsf", x, kernel.reshape(heads, head_dim, self.features))
        if self.use_bias:
            bias = logical_param(self, "bias", (self.features,), self.axes[-1:], nn.initializers.zeros)
            y = y + bias.astype(x.dtype)
        return y


class HeadsRMSNorm(nn.Module):
    """Wan's `rms_norm_across_heads` on heads-major `[B, H, S, Dh]` (scale `[H * Dh]`), in fp32, cast back."""

    eps: float = 1e-6
    axis_name: str | None = "norm"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        _, heads, _, head_dim = x.shape
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=(1, 3), keepdims=True) + self.eps)
        scale = logical_param(self, "scale", (heads * head_dim,), (self.axis_name,), nn.initializers.ones)
        return (y * scale.astype(jnp.float32).reshape(heads, 1, head_dim)).astype(x.dtype)


def swapped_lanes(x: jax.Array, halves: bool = False) -> jax.Array:
    """Each lane of `x`'s last axis replaced by its signed RoPE partner, in fp32: `(-x[1], x[0], -x[3], ...)` for
    interleaved pairs, `(-x[D/2:], x[:D/2])` for halves. One product with a signed permutation `[D, D]` at the
    highest precision: exact (each output is one input times +-1 summed with zeros), and on a TPU XLA fuses it,
    where lane rolls, pair reshapes and half concatenates left fp32 copies of q and k in HBM."""
    d = x.shape[-1]
    lanes = jnp.arange(d)
    if halves:
        partner, sign = jnp.where(lanes < d // 2, lanes + d // 2, lanes - d // 2), jnp.where(lanes < d // 2, -1.0, 1.0)
    else:
        partner, sign = jnp.where(lanes % 2 == 0, lanes + 1, lanes - 1), jnp.where(lanes % 2 == 0, -1.0, 1.0)
    matrix = (lanes[:, None] == partner[None, :]).astype(x.dtype) * sign.astype(x.dtype)[None, :]
    return jnp.einsum("...d,de->...e", x, matrix, preferred_element_type=jnp.float32,
                      precision=jax.lax.Precision.HIGHEST)


def rotate_interleaved(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """`zoo/parts/rope.rotate_interleaved` on heads-major `[B, H, S, D]` (tables `[S, D]`): each pair
    `(x[2i], x[2i+1])` rotated, in fp32, `x`'s dtype out. The partner lanes come from one product with a
    signed permutation `[D, D]` (even lanes take `-x[i+1]`, odd lanes `x[i-1]`): exact, since each output
    is one input times +-1 summed with zeros in fp32, so the values are the roll spelling's; XLA fuses it
    where the lane rolls left fp32 slices of q and k in HBM (the Wan 720p program planned 17.94 GiB with the
    rolls, 13.00 with this product)."""
    rotated = swapped_lanes(x)
    x32 = x.astype(jnp.float32)
    return (x32 * cos[None, None] + rotated * sin[None, None]).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# One CFG row at a time


ROWS_ENV = "VIDAX_ATTENTION_ROWS"  # "1": by rows wherever batch > 1; "auto": the planner's rule; unset/"0": never


def attention_rows(batch: int, tokens: int, width: int, dtype: Any) -> bool:
    """Whether a block's attention sub-block runs one row of the batch at a time. Off unless
    `VIDAX_ATTENTION_ROWS` asks: "1" wherever the batch has rows, "auto" on accelerators, one device (under a
    mesh the batch may be split over "data"), where the planner's rule says the whole batch's attention
    activations would crowd the device (`planner.attention_by_rows`). Measured with the heads-major
    projections (XLA's TPU compiler, v5e, `bench/accelerator/chip/memory_720p.py --aot v5e`), the Wan2.1-14B 720p
    2-block program held 13.38 GiB of temporaries by rows against 13.00 GiB whole: its peak is not the batch's
    attention once q/k/v have one layout, so the default stays whole and `predict` counts the whole batch."""
    import os

    from vidax.zoo.compute import planner
    from vidax.zoo.compute.runtime import active_mesh, platform

    forced = os.environ.get(ROWS_ENV, "").strip()
    if batch < 2 or forced not in ("1", "auto"):  # off unless asked: at Wan 720p it held more (13.38 GiB vs 13.00)
        return False
    if forced == "1":
        return True
    mesh = active_mesh()
    if platform() == "cpu" or (mesh is not None and mesh.size > 1):
        return False
    _, device_bytes = planner.device_memory_bytes()
    return planner.attention_by_rows(batch, tokens, width, jnp.dtype(dtype).itemsize, device_bytes)


def by_rows(module: nn.Module, call, rows: tuple):
    """`call(module, *row)` for each row of the arrays `rows` (their leading axis), one after another: `nn.scan`
    over the rows with the params broadcast (one set, read by every row). Each row reaches `call` as `x[None]`
    (a batch of one); its outputs (an array or a tuple) are stacked back."""
    def body(module, carry, row):
        out = call(module, *(r[None] for r in row))
        return carry, (tuple(o[0] for o in out) if isinstance(out, tuple) else out[0])

    scanned = nn.scan(body, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)
    _, out = scanned(module, None, tuple(rows))
    return out
