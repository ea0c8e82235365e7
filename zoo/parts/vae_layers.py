"""Layers the video VAEs share, on channels-last video `[B, F, H, W, C]`: torch's `Conv3d` and the
causal 3D convolution built on it (one level down, as `conv`, the way diffusers nests it), the
per-frame-taps 3D convolution, frame-causal attention, and VAEs run as stages (a host loop over
compiled units: one stage's temporaries are freed before the next allocates its own)."""

from __future__ import annotations

from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.compute.attention import attention
from vidax.zoo.compute.layers import logical_param
from vidax.zoo.compute.runtime import compile_step, xla_only_options

Params = dict[str, Any]
Stages = list[tuple[str | tuple[str, ...], nn.Module]]  # (params key or top-level keys, module), in order

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


def time_taps_conv(x: jax.Array, w: jax.Array, stride_t: int) -> jax.Array:
    """3D conv, valid in time and zero-padded "same" in space, as a sum over the time taps of 2D convs.

    Equal to one `conv_general_dilated` over `[B, T, H, W, C]`; XLA:CPU runs these per-frame 2D
    convolutions over twice as fast as its 3D convolution (bench/family/bench_wan_vae.py); the Wan and CogVideoX VAEs use it.
    """
    kt, kh, kw = w.shape[:3]
    b, t, h, wd, c = x.shape
    t_out = (t - kt) // stride_t + 1
    out = None
    for k in range(kt):
        frames = x[:, k : k + stride_t * (t_out - 1) + 1 : stride_t].reshape(b * t_out, h, wd, c)
        y = jax.lax.conv_general_dilated(
            frames, w[k], (1, 1), ((kh // 2, kh // 2), (kw // 2, kw // 2)), dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        out = y if out is None else out + y
    return out.reshape(b, t_out, h, wd, -1)


def frame_causal_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """One-head attention over `[B, F, H, W, C]` q/k/v in which each frame's tokens see their own and
    earlier frames' (diffusers `prepare_causal_attention_mask`), one query frame at a time."""
    b, f, h, w, c = q.shape
    k, v = k.reshape(b, f * h * w, 1, c), v.reshape(b, f * h * w, 1, c)
    keys_frame = jnp.arange(f * h * w) // (h * w)

    def one_frame(args):  # the frame-causal mask as a key mask
        q_frame, i = args
        return attention(q_frame, k, v, kv_mask=jnp.broadcast_to(keys_frame <= i, (b, f * h * w)))

    out = jax.lax.map(one_frame, (jnp.moveaxis(q.reshape(b, f, h * w, 1, c), 1, 0), jnp.arange(f)))  # [F, B, HW, 1, C]
    return jnp.moveaxis(out, 0, 1).reshape(b, f, h, w, c)


def _apply_stage(module: nn.Module, params: Params, x: jax.Array) -> jax.Array:
    return module.apply({"params": params}, x)


# a stage whose attention may be a Pallas kernel keeps the process's XLA options (the kernels' scoped VMEM); the
# others hold convolutions only and compile on a TPU with libtpu's own limit, where they compile faster
_run_stage = jax.jit(_apply_stage, static_argnums=0)
_run_kernel_free_stage = compile_step(_apply_stage, donate=(), static=(0,), options=xla_only_options)


def holds_attention(module: nn.Module) -> bool:
    """Whether a stage runs attention (a mid block's `attends()`; on a TPU the attention may be a Pallas kernel)."""
    attends = getattr(module, "attends", None)
    return bool(attends()) if callable(attends) else False


def stage_runner(module: nn.Module):
    """The compiled unit a stage runs as: `_run_stage` where it holds attention, else `_run_kernel_free_stage`."""
    return _run_stage if holds_attention(module) else _run_kernel_free_stage


def run_stages(stages, params: Params, x: jax.Array) -> jax.Array:
    """Host loop over the stages, each one compiled unit; a stage's input is dropped once used."""
    for key, module in stages:
        x = stage_runner(module)(module, _stage_params(params, key), x)
    return x


def _stage_params(params: Params, key: str | tuple[str, ...]) -> Params:
    return params[key] if isinstance(key, str) else {name: params[name] for name in key}


def init_stages(stages: Stages, rng: jax.Array, x: jax.Array) -> tuple[Params, jax.Array, jax.Array]:
    """Random params of the stages (a tuple key's modules at the top level), their output on `x`, and
    the rng left after one split per stage."""
    params: Params = {}
    for key, module in stages:
        rng, k = jax.random.split(rng)
        variables = nn.unbox(module.init(k, x)["params"])
        params.update({key: variables} if isinstance(key, str) else variables)
        x = module.apply({"params": variables}, x)
    return params, x, rng
