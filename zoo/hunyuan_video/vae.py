"""HunyuanVideo 1.0 VAE (follows diffusers `AutoencoderKLHunyuanVideo`): 16 latent channels, 8x spatial,
4x temporal, causal 3D convolutions with GroupNorm resnets and a frame-causal mid-block attention.

Activations run channels-last (`[B, F, H, W, C]`); the public `encode` / `decode` take and return
diffusers' `[B, C, F, H, W]`. Encoder and decoder are split into stages (stem, each down/up block, mid
block, head), each its own compiled unit run from a host loop (`hunyuan_video15.vae.run_stages`).

Tiling is the reference's: temporal tiles are always on (diffusers' `use_framewise_decoding` /
`use_framewise_encoding` default to True): latents longer than 4 frames decode in windows of 5 latent
frames every 3, each decoded alone (its causal padding starts afresh) and cross-faded over 4 frames;
spatial tiles (256 px every 192, 64 px cross-fade) are used with `tiling=True`, as after diffusers'
`enable_tiling()`. A different tiling gives a (slightly) different video: match the reference's.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.hunyuan_video.config import VAEConfig
from vidax.zoo.parts.dit import param_shapes
from vidax.zoo.parts.vae_tiling import blend, tiled
from vidax.zoo.compute.layers import Dense, logical_param
from vidax.zoo.parts.vae_layers import CausalConv3d, frame_causal_attention, init_stages, run_stages

Params = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Layers


class GroupNorm(nn.Module):
    """torch `GroupNorm(groups, C, eps, affine=True)` over channels-last `[B, ..., C]`, in fp32."""

    groups: int
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        scale = logical_param(self, "scale", (c,), ("norm",), nn.initializers.ones)
        bias = logical_param(self, "bias", (c,), ("norm",), nn.initializers.zeros)
        g = x.astype(jnp.float32).reshape(*x.shape[:-1], self.groups, c // self.groups)
        axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
        mean = g.mean(axes, keepdims=True)
        var = jnp.square(g - mean).mean(axes, keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
        return (y * scale + bias).astype(x.dtype)


class ResnetBlock(nn.Module):
    """diffusers `HunyuanVideoResnetBlockCausal3D`."""

    features: int
    groups: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = CausalConv3d(self.features, name="conv1")(nn.silu(GroupNorm(self.groups, name="norm1")(x)))
        h = CausalConv3d(self.features, name="conv2")(nn.silu(GroupNorm(self.groups, name="norm2")(h)))
        if x.shape[-1] != self.features:
            x = CausalConv3d(self.features, kernel=1, name="conv_shortcut")(x)
        return h + x


class MidAttention(nn.Module):
    """diffusers `Attention(heads=1, norm_num_groups, residual_connection)` in the mid block: each frame's
    tokens attend to their own and earlier frames (`prepare_causal_attention_mask`)."""

    groups: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        normed = GroupNorm(self.groups, name="group_norm")(x)
        q, k, v = (Dense(c, axes=(None, None), name=n)(normed) for n in ("to_q", "to_k", "to_v"))
        return x + Dense(c, axes=(None, None), name="to_out_0")(frame_causal_attention(q, k, v))


def upsample_nearest(x: jax.Array, temporal: bool) -> jax.Array:
    """diffusers `HunyuanVideoUpsampleCausal3D`'s interpolation: frame 0 doubled in space only, the rest
    in space (and time when `temporal`)."""
    up = lambda t, rt: jnp.repeat(jnp.repeat(jnp.repeat(t, rt, 1), 2, 2), 2, 3)  # noqa: E731
    first = up(x[:, :1], 1)
    if x.shape[1] == 1:
        return first
    return jnp.concatenate([first, up(x[:, 1:], 2 if temporal else 1)], axis=1)


class Resample(nn.Module):
    """`downsamplers.0` (a strided causal conv) or `upsamplers.0` (nearest upsampling, then a causal conv)."""

    features: int
    temporal: bool
    up: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.up:
            return CausalConv3d(self.features, name="conv")(upsample_nearest(x, self.temporal))
        return CausalConv3d(self.features, stride=(2 if self.temporal else 1, 2, 2), name="conv")(x)


class Stage(nn.Module):
    """One down/up block: resnets then the optional resampler (diffusers `HunyuanVideo{Down,Up}Block3D`)."""

    features: int
    num_layers: int
    groups: int
    resample: bool = False
    temporal: bool = False
    up: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(self.num_layers):
            x = ResnetBlock(self.features, self.groups, name=f"resnets_{i}")(x)
        if not self.resample:
            return x
        name = "upsamplers_0" if self.up else "downsamplers_0"
        return Resample(self.features, self.temporal, self.up, name=name)(x)


class MidBlock(nn.Module):
    """diffusers `HunyuanVideoMidBlock3D`: resnet, attention, resnet."""

    groups: int
    attention: bool = True

    def attends(self) -> bool:  # `vae_layers.holds_attention`
        return self.attention

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        x = ResnetBlock(c, self.groups, name="resnets_0")(x)
        if self.attention:
            x = MidAttention(self.groups, name="attentions_0")(x)
        return ResnetBlock(c, self.groups, name="resnets_1")(x)


class Stem(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return CausalConv3d(self.features, name="conv_in")(x)


class Out(nn.Module):
    """`conv_norm_out`, SiLU, `conv_out`."""

    features: int
    groups: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return CausalConv3d(self.features, name="conv_out")(nn.silu(GroupNorm(self.groups, name="conv_norm_out")(x)))


class PointConv(nn.Module):
    """`quant_conv` / `post_quant_conv`: a plain 1x1x1 Conv3d (its params are the module's own)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        w = logical_param(self, "kernel", (1, 1, 1, c, c), (None, None, None, "conv_in", "conv_out"))
        b = logical_param(self, "bias", (c,), ("conv_out",), nn.initializers.zeros)
        return jnp.dot(x, w[0, 0, 0].astype(x.dtype)) + b.astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# Stage plans, in execution order: (key, module). A str key names the module's own subtree
# (`down_blocks_0`); a tuple lists the top-level subtrees the module reads (`conv_norm_out`, `conv_out`).

Stages = list[tuple[str | tuple[str, ...], nn.Module]]


def _resample_plan(cfg: VAEConfig, i: int) -> tuple[bool, bool]:
    """(spatial, temporal) resampling after block i, as diffusers' encoder/decoder constructors decide."""
    levels = len(cfg.block_out_channels)
    spatial = i < int(math.log2(cfg.spatial_compression_ratio))
    temporal = i >= levels - 1 - int(math.log2(cfg.temporal_compression_ratio)) and i != levels - 1
    return spatial, temporal


def encoder_stages(cfg: VAEConfig) -> Stages:
    chans, groups = cfg.block_out_channels, cfg.norm_num_groups
    stages: Stages = [(("conv_in",), Stem(chans[0]))]
    for i, ch in enumerate(chans):
        spatial, temporal = _resample_plan(cfg, i)
        stages.append((f"down_blocks_{i}", Stage(ch, cfg.layers_per_block, groups, spatial or temporal, temporal)))
    stages.append(("mid_block", MidBlock(groups, cfg.mid_block_add_attention)))
    stages.append((("conv_norm_out", "conv_out"), Out(2 * cfg.latent_channels, groups)))
    return stages


def decoder_stages(cfg: VAEConfig) -> Stages:
    chans, groups = tuple(reversed(cfg.block_out_channels)), cfg.norm_num_groups
    stages: Stages = [(("conv_in",), Stem(chans[0])), ("mid_block", MidBlock(groups, cfg.mid_block_add_attention))]
    for i, ch in enumerate(chans):
        spatial, temporal = _resample_plan(cfg, i)
        stage = Stage(ch, cfg.layers_per_block + 1, groups, spatial or temporal, temporal, up=True)
        stages.append((f"up_blocks_{i}", stage))
    stages.append((("conv_norm_out", "conv_out"), Out(cfg.out_channels, groups)))
    return stages


@partial(jax.jit, static_argnums=0)
def _point(module: nn.Module, params: Params, x: jax.Array) -> jax.Array:
    return module.apply({"params": params}, x)


def _temporal_tiles(fn, x: jax.Array, tile: int, stride: int, blend_frames: int, keep: int, total: int) -> jax.Array:
    """diffusers `_temporal_tiled_{de,en}code`: windows of `tile + 1` input frames every `stride`, each run
    alone; every window after the first drops its first output frame; neighbours cross-fade over
    `blend_frames`; the first window keeps `keep + 1` frames, the others `keep`; `total` frames out."""
    outs = []
    for i in range(0, x.shape[1], stride):
        out = fn(x[:, i : i + tile + 1])
        outs.append(out if i == 0 else out[:, 1:])
    kept = []
    for i, out in enumerate(outs):
        if i > 0:
            out = outs[i] = blend(outs[i - 1], out, blend_frames, axis=1)  # in place, as the reference
        kept.append(out[:, : keep + (i == 0)])
    return jnp.concatenate(kept, axis=1)[:, :total]


# ---------------------------------------------------------------------------------------------
# The model


class HunyuanVideoVAE:
    """Encoder and decoder of `AutoencoderKLHunyuanVideo`, stage by stage, with the reference's tiling.

    Args:
        cfg: the VAE config (`VAEConfig.from_hf_config(config_json)`).
    """

    def __init__(self, cfg: VAEConfig):
        self.cfg = cfg
        self.encoder = encoder_stages(cfg)
        self.decoder = decoder_stages(cfg)
        self.point = PointConv()

    # --- encode ------------------------------------------------------------------------------

    def _encode_window(self, params: Params, x: jax.Array, tiling: bool) -> jax.Array:
        """diffusers `_encode` on at most `tile_sample_min_num_frames` frames (spatially tiled if asked)."""
        cfg = self.cfg

        def run(t):
            return _point(self.point, params["quant_conv"], run_stages(self.encoder, params["encoder"], t))

        h, w = x.shape[2], x.shape[3]
        if not (tiling and max(h, w) > cfg.tile_sample_min_size):
            return run(x)
        latent_tile, latent_stride = cfg.tile_latent_min_size, cfg.tile_latent_stride
        out = tiled(run, x, cfg.tile_sample_min_size, cfg.tile_sample_stride, latent_tile - latent_stride, latent_stride)
        return out[:, :, : h // cfg.spatial_compression_ratio, : w // cfg.spatial_compression_ratio]

    def encode(self, params: Params, video: jax.Array, tiling: bool = False) -> jax.Array:
        """Moments `[B, 2*latent, F', H', W']` (mean first, as diffusers' `latent_dist.parameters`).

        Args:
            params: the VAE tree (`encoder/...`, `quant_conv`, `decoder/...`, `post_quant_conv`).
            video: `[B, 3, F, H, W]` in [-1, 1], F = 4k+1 (an image is F = 1).
            tiling: overlapping spatial tiles as after diffusers' `enable_tiling()`.
        """
        cfg = self.cfg
        x = jnp.moveaxis(video, 1, -1)
        window = partial(self._encode_window, params, tiling=tiling)
        if x.shape[1] > cfg.tile_sample_min_num_frames:
            latent_tile, latent_stride = cfg.tile_latent_min_num_frames, cfg.tile_latent_stride_num_frames
            total = (x.shape[1] - 1) // cfg.temporal_compression_ratio + 1
            x = _temporal_tiles(window, x, cfg.tile_sample_min_num_frames, cfg.tile_sample_stride_num_frames,
                                latent_tile - latent_stride, latent_stride, total)
        else:
            x = window(x)
        return jnp.moveaxis(x, -1, 1)

    def latent_mode(self, params: Params, video: jax.Array, tiling: bool = False) -> jax.Array:
        """The posterior mode (`latent_dist.mode()`, the I2V pipeline's "argmax"), `[B, latent, F', H', W']`."""
        return self.encode(params, video, tiling)[:, : self.cfg.latent_channels]

    # --- decode ------------------------------------------------------------------------------

    def _decode_window(self, params: Params, z: jax.Array, tiling: bool) -> jax.Array:
        """diffusers `_decode` / `tiled_decode` on at most 5 latent frames."""
        cfg = self.cfg

        def run(t):
            return run_stages(self.decoder, params["decoder"], _point(self.point, params["post_quant_conv"], t))

        h, w = z.shape[2], z.shape[3]
        if not (tiling and max(h, w) > cfg.tile_latent_min_size):
            return run(z)
        blend_px = cfg.tile_sample_min_size - cfg.tile_sample_stride
        out = tiled(run, z, cfg.tile_latent_min_size, cfg.tile_latent_stride, blend_px, cfg.tile_sample_stride)
        return out[:, :, : h * cfg.spatial_compression_ratio, : w * cfg.spatial_compression_ratio]

    def decode(self, params: Params, latents: jax.Array, tiling: bool = False) -> jax.Array:
        """Video `[B, 3, 4(F'-1)+1, 8H', 8W']` from unscaled latents `[B, latent, F', H', W']`.

        Args:
            params: the VAE tree.
            latents: latents already divided by `scaling_factor`.
            tiling: overlapping spatial tiles with the reference's cross-fade (diffusers
                `enable_tiling()`, which its examples call for full resolution). Temporal windows are
                always used past 4 latent frames, as in the reference.
        """
        cfg = self.cfg
        z = jnp.moveaxis(latents, 1, -1)
        window = partial(self._decode_window, params, tiling=tiling)
        if z.shape[1] > cfg.tile_latent_min_num_frames:
            blend_frames = cfg.tile_sample_min_num_frames - cfg.tile_sample_stride_num_frames
            total = (z.shape[1] - 1) * cfg.temporal_compression_ratio + 1
            x = _temporal_tiles(window, z, cfg.tile_latent_min_num_frames, cfg.tile_latent_stride_num_frames,
                                blend_frames, cfg.tile_sample_stride_num_frames, total)
        else:
            x = window(z)
        return jnp.moveaxis(x, -1, 1)

    # --- shapes ------------------------------------------------------------------------------

    def init_params(self, rng: jax.Array, frames: int = 5, size: int = 16) -> Params:
        """Random parameters of the full tree, for shapes (the translator's expected tree)."""
        cfg = self.cfg
        params: Params = {}
        x = jnp.zeros((1, frames, size, size, cfg.in_channels), jnp.float32)
        for part, stages, point in (("encoder", self.encoder, "quant_conv"), ("decoder", self.decoder, None)):
            if point is None:
                rng, k = jax.random.split(rng)
                x = x[..., : cfg.latent_channels]
                params["post_quant_conv"] = nn.unbox(self.point.init(k, x)["params"])
            params[part], x, rng = init_stages(stages, rng, x)
            if point is not None:
                rng, k = jax.random.split(rng)
                params[point] = nn.unbox(self.point.init(k, x)["params"])
        return params

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat `{"encoder/conv_in/conv/kernel": shape}` of the full tree."""
        return param_shapes(self.init_params)
