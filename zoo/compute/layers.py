"""Layers shared by every family: dense projections and norms that carry logical axis names.

Parameters are created in fp32 for `init` / `eval_shape` only; real weights arrive as a host tree
in the dtype the conversion spec chose. Each layer computes in `dtype` (default: the input's
dtype) and casts its weights to it, except the norms, which compute in fp32 as the references do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.compute import cpu_tuning
from vidax.zoo.compute.products import CPU_ROW_BLOCK, in_row_blocks, product  # noqa: F401 (in_row_blocks: layers' API)
from vidax.zoo.compute.runtime import active_mesh, platform

Axes = tuple[str | None, ...]


def logical_param(module: nn.Module, name: str, shape: tuple[int, ...], axes: Axes, init=None):
    """Declare a parameter with logical axis names (used by the sharding rules tables)."""
    init = init or nn.initializers.normal(0.02)
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.float32)


class Dense(nn.Module):
    """`y = input_activation(x) @ kernel + bias`, kernel `[in, out]` (a torch Linear's weight transposed).

    `input_activation` is the previous layer's activation (an MLP's second projection): applied per row
    block with the product (`project`), the activated input is never held whole.
    """

    features: int
    axes: Axes = ("embed", "mlp")
    use_bias: bool = True
    dtype: Any = None
    input_activation: Callable[[jax.Array], jax.Array] | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.dtype or x.dtype
        kernel = logical_param(self, "kernel", (x.shape[-1], self.features), self.axes)
        if self.has_variable("params", "kernel_scale"):  # 8-bit (--weights-dtype): widened inside the product
            kernel = kernel.astype(jnp.float32) * self.get_variable("params", "kernel_scale")
        kernel = kernel.astype(dtype)
        bias = None
        if self.use_bias:
            bias = logical_param(self, "bias", (self.features,), self.axes[-1:], nn.initializers.zeros).astype(dtype)
        return project(x.astype(dtype), kernel, bias, input_activation=self.input_activation)


def project(x: jax.Array, kernel: jax.Array, bias: jax.Array | None = None, *,
            input_activation: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
    """`input_activation(x) @ kernel (+ bias)` over the last axis of `x`.

    On a CPU run that is not split over a mesh, a product of more than `CPU_ROW_BLOCK` rows may run as
    balanced row blocks one after another (3510 tokens: 5 x 702): each output row is the same sum in
    the same order either way, so the product is bit for bit the one call's, and which is faster
    depends on the CPU (5-16% faster in blocks on an AMD EPYC, 3-9% slower on an Intel Xeon with AMX:
    `python -m bench matmul`). `vidax.zoo.compute.cpu_tuning` measures it once per machine and dtype, or
    `VIDAX_CPU_ROW_BLOCK` says it. Accelerators, and sharded products (each device's share is already
    smaller), take the one call.

    A bf16 / fp16 product on CPU may be asked for an fp32 result, cast back after the bias
    (`cpu_fp32_result`): XLA's CPU runs the default form at fp32 speed, this one on its bf16 kernel.
    """
    activate = input_activation or (lambda v: v)
    rows = math.prod(x.shape[:-1])
    block = _cpu_row_block(rows, x.dtype)
    fp32_result = cpu_fp32_result(x.dtype)
    if not block:
        return product(activate(x), kernel, bias, fp32_result=fp32_result)
    return in_row_blocks(x, kernel, bias, block=block, activate=activate, fp32_result=fp32_result)


def cpu_fp32_result(dtype) -> bool:
    """Whether a product of `dtype` operands asks for an fp32 result: only bf16 / fp16 on a CPU run, where
    `cpu_tuning` measured it faster (or `VIDAX_CPU_FP32_RESULT` says so). Accelerators: never."""
    if platform() != "cpu" or jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        return False
    return cpu_tuning.fp32_result_faster(dtype)


def _cpu_row_block(rows: int, dtype) -> int:
    """Rows per block for a product of `rows` rows, 0 for one call. Only a CPU product too big for one
    block asks `cpu_tuning` (which may time both ways once per machine): small ones never do."""
    if platform() != "cpu" or _split_over_devices():
        return 0
    block = cpu_tuning.row_block_override()
    if block is None and rows > CPU_ROW_BLOCK:
        block = CPU_ROW_BLOCK if cpu_tuning.row_blocks_faster(dtype, CPU_ROW_BLOCK) else 0
    return block if block and rows > block else 0


def _split_over_devices() -> bool:
    mesh = active_mesh()
    return mesh is not None and mesh.size > 1


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
        c = x.shape[1]
        kernel = logical_param(self, "kernel", (*self.patch, c, self.features), (None, None, None, "conv_in", "embed"))
        bias = logical_param(self, "bias", (self.features,), ("embed",), nn.initializers.zeros)
        x = patchify(x, self.patch)  # [B, S, pt*ph*pw*C]
        return product(x, kernel.reshape(-1, self.features).astype(x.dtype), bias.astype(x.dtype),
                        fp32_result=cpu_fp32_result(x.dtype))


def patchify(video: jax.Array, patch: tuple[int, int, int], *, channels_first: bool = False) -> jax.Array:
    """Video `[B, C, F*pt, H*ph, W*pw]` -> tokens `[B, F*H*W, features]` in (f, h, w) order; `unpatchify`'s inverse.

    Each token's features are its patch laid out `(pt, ph, pw, C)`, or `(C, pt, ph, pw)` with
    `channels_first` (Cosmos-Predict2.5's `patch_embed`).
    """
    pt, ph, pw = patch
    b, c, f, h, w = video.shape
    x = video.reshape(b, c, f // pt, pt, h // ph, ph, w // pw, pw)
    x = x.transpose(0, 2, 4, 6, 1, 3, 5, 7) if channels_first else x.transpose(0, 2, 4, 6, 3, 5, 7, 1)
    return x.reshape(b, (f // pt) * (h // ph) * (w // pw), pt * ph * pw * c)


def gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


def gelu_exact(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


def split_heads(x: jax.Array, heads: int) -> jax.Array:
    return x.reshape(*x.shape[:-1], heads, -1)  # [B, S, H, Dh]


def modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """AdaLN modulation `x * (1 + scale) + shift` (shift and scale broadcast against x)."""
    return x * (1 + scale) + shift


def timestep_sinusoid(t: jax.Array, dim: int, *, flip_sin_to_cos: bool = True, downscale_freq_shift: float = 0.0,
                      scale: float = 1.0, max_period: float = 10000.0) -> jax.Array:
    """diffusers `get_timestep_embedding` (`Timesteps`) in fp32: `t [...] -> [..., dim]`.

    `flip_sin_to_cos=True, downscale_freq_shift=0` (Wan, HunyuanVideo, LTX) gives `[cos, sin]`.
    """
    half = dim // 2
    exponent = -math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / (half - downscale_freq_shift)
    args = scale * (t.astype(jnp.float32)[..., None] * jnp.exp(exponent))
    sin, cos = jnp.sin(args), jnp.cos(args)
    emb = jnp.concatenate([cos, sin] if flip_sin_to_cos else [sin, cos], axis=-1)
    if dim % 2:
        emb = jnp.pad(emb, [(0, 0)] * (emb.ndim - 1) + [(0, 1)])
    return emb


class Linear(nn.Module):
    """A `Dense` one level down (`ff.net.0.proj`): keeps diffusers' nesting in param paths."""

    features: int
    axes: Axes = ("embed", None)
    child: str = "proj"
    use_bias: bool = True
    dtype: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return Dense(self.features, axes=self.axes, use_bias=self.use_bias, dtype=self.dtype, name=self.child)(x)


class MLPEmbedder(nn.Module):
    """`linear_1 -> act -> linear_2` (diffusers `TimestepEmbedding`, `PixArtAlphaTextProjection`)."""

    features: int
    activation: Any = nn.silu
    dtype: Any = None
    out_features: int | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.activation(Dense(self.features, axes=(None, "embed"), dtype=self.dtype, name="linear_1")(x))
        out = self.out_features or self.features
        return Dense(out, axes=("embed", None), dtype=self.dtype, name="linear_2")(x)


class FeedForward(nn.Module):
    """diffusers `FeedForward`: `net.0.proj` (then its activation) and `net.2`; column then row parallel."""

    dim: int
    hidden: int
    activation: Any = gelu_tanh
    hidden_axis: str | None = "mlp"
    use_bias: bool = True

    def setup(self):
        self.net_0 = Linear(self.hidden, ("embed", self.hidden_axis), use_bias=self.use_bias)
        self.net_2 = Dense(self.dim, axes=(self.hidden_axis, "embed"), use_bias=self.use_bias,
                           input_activation=self.activation)

    def __call__(self, x: jax.Array, residual: jax.Array | None = None, gate: jax.Array | None = None) -> jax.Array:
        """The feed-forward of `x` `[B, S, D]`; with `residual`, `residual + out * gate` in the residual's dtype
        (`gate` `[B, 1 or S, D]`, None, or a function `gate(start, stop)` giving the rows of tokens `start:stop`,
        for a gate made per token only where it is used: Cosmos-Predict2.5's per-frame gate). Where the tokens
        run in chunks (`ffn_token_chunks`), each chunk's product is added into the residual's own rows in place, one chunk after another (`_added_in_chunks`), where the
        whole output, concatenated and then added, had held a second fp32 residual and the output itself (the
        Wan2.1-14B 480p 8-block forward on a v5e: 6.94 -> 5.47 GiB of XLA's temporaries)."""
        chunks = ffn_token_chunks(x.shape, self.hidden, x.dtype)
        if residual is None:
            if chunks == 1:
                return self.net_2(self.net_0(x))
            # [B, S, D] in token chunks one after the other: the hidden activation of one chunk is live at a
            # time (Wan2.1-14B at 720p: 4.2 GB for the whole sequence, the largest temporary of its block)
            size = -(-x.shape[1] // chunks)
            return jnp.concatenate([self.net_2(self.net_0(x[:, i:i + size])) for i in range(0, x.shape[1], size)],
                                   axis=1)
        if chunks == 1:
            return residual + _gated(self.net_2(self.net_0(x)), residual.dtype, _gate_rows(gate, 0, x.shape[1]))
        return _added_in_chunks(self, x, residual, gate, chunks)


def _gated(out: jax.Array, dtype: Any, gate: jax.Array | None) -> jax.Array:
    out = out.astype(dtype)
    return out if gate is None else out * gate


def _gate_rows(gate: Any, start: int, stop: int) -> jax.Array | None:
    """The gate of tokens `start:stop` (see `FeedForward.__call__`)."""
    if callable(gate):
        return gate(start, stop)
    if gate is None or gate.shape[1] == 1 or (start, stop) == (0, gate.shape[1]):
        return gate
    return gate[:, start:stop]


def _added_in_chunks(ffn: FeedForward, x: jax.Array, residual: jax.Array, gate: jax.Array | None, chunks: int):
    """`residual + ffn(x) * gate` one token chunk after another, each chunk's sum written over its rows of the
    residual (`dynamic_update_slice`: XLA's TPU buffer assignment gives the updated residual the residual's own
    buffer, and the chunks' hidden activations one buffer between them)."""
    tokens = x.shape[1]
    size = -(-tokens // chunks)
    for start in range(0, tokens, size):
        rows = slice(start, min(start + size, tokens))
        chunk_gate = _gate_rows(gate, rows.start, rows.stop)
        new = residual[:, rows] + _gated(ffn.net_2(ffn.net_0(x[:, rows])), residual.dtype, chunk_gate)
        residual = jax.lax.dynamic_update_slice_in_dim(residual, new, start, axis=1)
    return residual


FFN_CHUNK_BYTES = 1 << 30  # accelerators: the feed-forward's hidden activation in pieces of at most ~1 GiB


def ffn_token_chunks(shape: tuple[int, ...], hidden: int, dtype: Any) -> int:
    """How many token chunks a feed-forward over `[B, S, D]` runs in: 1 on a CPU, under a mesh (a chunk
    of a sequence-split axis would move data) or when its hidden activation is small."""
    mesh = active_mesh()
    if len(shape) != 3 or platform() == "cpu" or (mesh is not None and mesh.size > 1):
        return 1
    return ffn_chunk_count(shape[0], shape[1], hidden, jnp.dtype(dtype).itemsize)


def ffn_chunk_count(rows: int, tokens: int, hidden: int, itemsize: int) -> int:
    """Chunks of at most `FFN_CHUNK_BYTES` of hidden activation over `tokens`, never more than one token each:
    the rule the run applies (`ffn_token_chunks`) and the planner counts by (`planner.ffn_chunks`)."""
    hidden_bytes = rows * tokens * hidden * itemsize
    return max(1, min(tokens, -(-hidden_bytes // FFN_CHUNK_BYTES)))


def unpatchify(tokens: jax.Array, grid: tuple[int, int, int], patch: tuple[int, int, int], channels: int, *,
               channels_first: bool = False) -> jax.Array:
    """Tokens `[B, F*H*W, features]` in (f, h, w) order -> video `[B, C, F*pt, H*ph, W*pw]`.

    Each token's features are the patch laid out `(pt, ph, pw, C)` (diffusers Wan, LTX, Cosmos), or
    `(C, pt, ph, pw)` with `channels_first` (HunyuanVideo's `proj_out`).
    """
    (f, h, w), (pt, ph, pw) = grid, patch
    b = tokens.shape[0]
    if channels_first:
        x = tokens.reshape(b, f, h, w, channels, pt, ph, pw).transpose(0, 4, 1, 5, 2, 6, 3, 7)
    else:
        x = tokens.reshape(b, f, h, w, pt, ph, pw, channels).transpose(0, 7, 1, 4, 2, 5, 3, 6)
    return x.reshape(b, channels, f * pt, h * ph, w * pw)  # [B, C, F, pt, H, ph, W, pw] merged
