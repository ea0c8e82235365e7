"""HunyuanVideo-1.5 VAE (follows diffusers `AutoencoderKLHunyuanVideo15`): 32 latent channels, 16x, 4x.

Activations run channels-last (`[B, F, H, W, C]`), the layout XLA's convolutions want; the public
`encode` / `decode` take and return diffusers' `[B, C, F, H, W]`. Encoder and decoder are split
into stages (stem, each down/up block, mid block, head), each its own compiled unit run from a host
loop, so that one stage's temporaries are freed before the next stage allocates its own. Tiled
decode and encode cross-fade overlapping spatial tiles exactly as the reference does.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.parts.dit import param_shapes
from vidax.zoo.hunyuan_video15.config import VAEConfig
from vidax.zoo.compute.layers import logical_param
from vidax.zoo.parts.vae_layers import CausalConv3d, Conv3d, Stages, frame_causal_attention, init_stages, run_stages
from vidax.zoo.parts.vae_tiling import tiled

Params = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Layers


class ChannelRMSNorm(nn.Module):
    """diffusers `HunyuanVideo15RMS_norm`: `x / ||x||_C * sqrt(C) * gamma` (F.normalize, eps 1e-12)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        gamma = logical_param(self, "gamma", (x.shape[-1],), ("norm",), nn.initializers.ones)
        x32 = x.astype(jnp.float32)
        norm = jnp.sqrt(jnp.sum(jnp.square(x32), axis=-1, keepdims=True))
        y = (x32 / jnp.maximum(norm, 1e-12)).astype(x.dtype)
        return y * (x.shape[-1] ** 0.5) * gamma.astype(x.dtype)


class ResnetBlock(nn.Module):
    """diffusers `HunyuanVideo15ResnetBlock`."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = CausalConv3d(self.features, name="conv1")(nn.silu(ChannelRMSNorm(name="norm1")(x)))
        h = CausalConv3d(self.features, name="conv2")(nn.silu(ChannelRMSNorm(name="norm2")(h)))
        if x.shape[-1] != self.features:
            x = Conv3d(self.features, kernel=1, name="conv_shortcut")(x)
        return h + x


class AttnBlock(nn.Module):
    """diffusers `HunyuanVideo15AttnBlock`: one-head attention, each frame sees itself and earlier frames."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        normed = ChannelRMSNorm(name="norm")(x)
        q, k, v = (Conv3d(c, kernel=1, name=n)(normed) for n in ("to_q", "to_k", "to_v"))
        return x + Conv3d(c, kernel=1, name="proj_out")(frame_causal_attention(q, k, v))


def pixel_unshuffle(x: jax.Array, rt: int, rs: int = 2) -> jax.Array:
    """`[B, F*rt, H*rs, W*rs, C]` -> `[B, F, H, W, rt*rs*rs*C]` (diffusers `_dcae_downsample_rearrange`)."""
    b, f, h, w, c = x.shape
    x = x.reshape(b, f // rt, rt, h // rs, rs, w // rs, rs, c)
    return x.transpose(0, 1, 3, 5, 2, 4, 6, 7).reshape(b, f // rt, h // rs, w // rs, rt * rs * rs * c)


def pixel_shuffle(x: jax.Array, rt: int, rs: int = 2) -> jax.Array:
    """`[B, F, H, W, rt*rs*rs*C]` -> `[B, F*rt, H*rs, W*rs, C]` (diffusers `_dcae_upsample_rearrange`)."""
    b, f, h, w, packed = x.shape
    c = packed // (rt * rs * rs)
    x = x.reshape(b, f, h, w, rt, rs, rs, c)
    return x.transpose(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, f * rt, h * rs, w * rs, c)


def group_mean(x: jax.Array, groups: int) -> jax.Array:
    """Mean over runs of `groups` adjacent channels (torch `view(B, C // g, g, ...).mean(2)`)."""
    return x.reshape(*x.shape[:-1], x.shape[-1] // groups, groups).mean(-1)


class Downsample(nn.Module):
    """diffusers `HunyuanVideo15Downsample`: conv then space(-time)-to-channel, plus a pooled shortcut."""

    features: int
    temporal: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        factor = 8 if self.temporal else 4
        group = factor * x.shape[-1] // self.features
        h = CausalConv3d(self.features // factor, name="conv")(x)
        if not self.temporal:
            return pixel_unshuffle(h, 1) + group_mean(pixel_unshuffle(x, 1), group)
        # The first frame stands alone (causal): spatial only, its channels doubled / pooled half as much.
        h_first = pixel_unshuffle(h[:, :1], 1)
        h = jnp.concatenate([jnp.concatenate([h_first, h_first], -1), pixel_unshuffle(h[:, 1:], 2)], axis=1)
        x_first = group_mean(pixel_unshuffle(x[:, :1], 1), group // 2)
        x_next = group_mean(pixel_unshuffle(x[:, 1:], 2), group)
        return h + jnp.concatenate([x_first, x_next], axis=1)


class Upsample(nn.Module):
    """diffusers `HunyuanVideo15Upsample`: conv then channel-to-space(-time), plus a repeated shortcut."""

    features: int
    temporal: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        factor = 8 if self.temporal else 4
        repeats = factor * self.features // x.shape[-1]
        h = CausalConv3d(self.features * factor, name="conv")(x)
        if not self.temporal:
            return pixel_shuffle(h, 1) + pixel_shuffle(jnp.repeat(x, repeats, axis=-1), 1)
        h_first = pixel_shuffle(h[:, :1], 1)
        h_first = h_first[..., : h_first.shape[-1] // 2]
        h = jnp.concatenate([h_first, pixel_shuffle(h[:, 1:], 2)], axis=1)
        x_first = jnp.repeat(pixel_shuffle(x[:, :1], 1), repeats // 2, axis=-1)
        x_next = jnp.repeat(pixel_shuffle(x[:, 1:], 2), repeats, axis=-1)
        return h + jnp.concatenate([x_first, x_next], axis=1)


class Stage(nn.Module):
    """One down/up block: resnets then the optional resampler (diffusers `*Block3D`)."""

    features: int
    num_layers: int
    resample_features: int | None = None
    temporal: bool = False
    up: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(self.num_layers):
            x = ResnetBlock(self.features, name=f"resnets_{i}")(x)
        if self.resample_features is None:
            return x
        cls = Upsample if self.up else Downsample
        name = "upsamplers_0" if self.up else "downsamplers_0"
        return cls(self.resample_features, self.temporal, name=name)(x)


class MidBlock(nn.Module):
    """diffusers `HunyuanVideo15MidBlock`: resnet, attention, resnet."""

    def attends(self) -> bool:  # `vae_layers.holds_attention`
        return True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        x = ResnetBlock(c, name="resnets_0")(x)
        x = AttnBlock(name="attentions_0")(x)
        return ResnetBlock(c, name="resnets_1")(x)


class Stem(nn.Module):
    """`conv_in` (decoder: plus the latent repeated to its width)."""

    features: int
    repeat_input: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = CausalConv3d(self.features, name="conv_in")(x)
        return h + jnp.repeat(x, self.features // x.shape[-1], axis=-1) if self.repeat_input else h


class Out(nn.Module):
    """`norm_out`, SiLU, `conv_out` (encoder: plus the channel-pooled shortcut)."""

    features: int
    pooled_shortcut: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = CausalConv3d(self.features, name="conv_out")(nn.silu(ChannelRMSNorm(name="norm_out")(x)))
        return h + group_mean(x, x.shape[-1] // self.features) if self.pooled_shortcut else h


# ---------------------------------------------------------------------------------------------
# Stage plans, in execution order: (key, module). A str key names the module's own subtree
# (`down_blocks_0`); a tuple lists the top-level subtrees the module reads (`norm_out`, `conv_out`).



def encoder_stages(cfg: VAEConfig) -> Stages:
    chans = cfg.block_out_channels
    stages = [(("conv_in",), Stem(chans[0], repeat_input=False))]
    spatial_levels = int(math.log2(cfg.spatial_compression_ratio))
    first_temporal = int(math.log2(cfg.spatial_compression_ratio // cfg.temporal_compression_ratio))
    for i, ch in enumerate(chans):
        resample = None
        if i < spatial_levels:
            resample = chans[i + 1] if cfg.downsample_match_channel else ch
        stage = Stage(ch, cfg.layers_per_block, resample, temporal=i >= first_temporal)
        stages.append((f"down_blocks_{i}", stage))
    stages.append(("mid_block", MidBlock()))
    stages.append((("norm_out", "conv_out"), Out(2 * cfg.latent_channels, pooled_shortcut=True)))
    return stages


def decoder_stages(cfg: VAEConfig) -> Stages:
    chans = tuple(reversed(cfg.block_out_channels))
    stages = [(("conv_in",), Stem(chans[0], repeat_input=True)), ("mid_block", MidBlock())]
    spatial_levels = int(math.log2(cfg.spatial_compression_ratio))
    temporal_levels = int(math.log2(cfg.temporal_compression_ratio))
    for i, ch in enumerate(chans):
        resample = None
        if i < spatial_levels or i < temporal_levels:
            resample = chans[i + 1] if cfg.upsample_match_channel else ch
        stage = Stage(ch, cfg.layers_per_block + 1, resample, temporal=i < temporal_levels, up=True)
        stages.append((f"up_blocks_{i}", stage))
    stages.append((("norm_out", "conv_out"), Out(cfg.out_channels, pooled_shortcut=False)))
    return stages


# XLA's buffer assignment for the widest decoder stage (the last up block, at full resolution) keeps
# about 5.2 fp32 maps of [frames, tile, tile, block_out_channels[0]] alive (CPU memory_analysis at 9
# and 17 frames; tests/hunyuan_video15/test_vae.py checks the figure against it), 5.03 at 121 frames
# (480p's tile, `vidax-gen --dry-run`; tests/dryrun checks the whole decode figure).
DECODE_LIVE_MAPS = 5.1


def widest_stage_bytes(cfg: VAEConfig, frames: int, height: int, width: int) -> int:
    """The widest decoder stage's working set (fp32 maps, weights aside) on a `height` x `width` pixel output."""
    return int(DECODE_LIVE_MAPS * frames * height * width * cfg.block_out_channels[0] * 4)


def decode_peak_bytes(cfg: VAEConfig, frames: int, height: int, width: int, tiling: bool = True) -> int:
    """The working set of `decode` beyond its weights: the widest stage on one tile, plus the decoded
    tiles held until they are blended and the blended video (frames, height, width in pixels)."""
    tile = cfg.tile_sample_min_size if tiling else max(height, width)
    overlap = (1 - cfg.tile_overlap_factor) ** -2 if tiling else 1.0  # every tile's output, then the blend
    stitched = frames * height * width * cfg.out_channels * 4 * (1 + overlap)
    return widest_stage_bytes(cfg, frames, min(height, tile), min(width, tile)) + int(stitched)


# ---------------------------------------------------------------------------------------------
# Tiling with the reference's linear cross-fade


# ---------------------------------------------------------------------------------------------
# The model


class HunyuanVideo15VAE:
    """Encoder and decoder of `AutoencoderKLHunyuanVideo15`, stage by stage.

    Args:
        cfg: the VAE config (`VAEConfig.from_hf_config(config_json)`).
    """

    def __init__(self, cfg: VAEConfig):
        self.cfg = cfg
        self.encoder = encoder_stages(cfg)
        self.decoder = decoder_stages(cfg)

    def encode(self, params: Params, video: jax.Array, tiling: bool = False) -> jax.Array:
        """Moments `[B, 2*latent, F', H', W']` (mean first, as diffusers' `latent_dist.parameters`).

        Args:
            params: the VAE tree (`encoder/...`, `decoder/...`).
            video: `[B, 3, F, H, W]` in [-1, 1], F = 4k+1.
            tiling: overlapping spatial tiles as after diffusers' `enable_tiling()`.
        """
        cfg = self.cfg
        x = jnp.moveaxis(video, 1, -1)
        run = partial(run_stages, self.encoder, params["encoder"])
        big = max(x.shape[2], x.shape[3]) > cfg.tile_sample_min_size
        if tiling and big:
            tile, latent_tile = cfg.tile_sample_min_size, cfg.tile_latent_min_size
            stride = int(tile * (1 - cfg.tile_overlap_factor))
            blend = int(latent_tile * cfg.tile_overlap_factor)
            x = tiled(run, x, tile, stride, blend, latent_tile - blend)
        else:
            x = run(x)
        return jnp.moveaxis(x, -1, 1)

    def latent_mean(self, params: Params, video: jax.Array, tiling: bool = False) -> jax.Array:
        """The posterior mode (`latent_dist.mode()`), `[B, latent, F', H', W']`."""
        return self.encode(params, video, tiling)[:, : self.cfg.latent_channels]

    def decode(self, params: Params, latents: jax.Array, tiling: bool = True) -> jax.Array:
        """Video `[B, 3, 4(F'-1)+1, 16H', 16W']` from unscaled latents `[B, latent, F', H', W']`.

        Args:
            params: the VAE tree.
            latents: latents already divided by `scaling_factor`.
            tiling: overlapping spatial tiles with the reference's cross-fade (diffusers
                `enable_tiling()`, which its pipeline recommends for full resolution).
        """
        cfg = self.cfg
        z = jnp.moveaxis(latents, 1, -1)
        run = partial(run_stages, self.decoder, params["decoder"])
        latent_tile = cfg.tile_latent_min_size
        if tiling and max(z.shape[2], z.shape[3]) > latent_tile:
            tile = cfg.tile_sample_min_size
            stride = int(latent_tile * (1 - cfg.tile_overlap_factor))
            blend = int(tile * cfg.tile_overlap_factor)
            x = tiled(run, z, latent_tile, stride, blend, tile - blend)
        else:
            x = run(z)
        return jnp.moveaxis(x, -1, 1)

    def init_params(self, rng: jax.Array, frames: int = 5, size: int = 16) -> Params:
        """Random parameters of the full tree, for shapes (the translator's expected tree)."""
        cfg = self.cfg
        x = jnp.zeros((1, frames, size, size, cfg.in_channels), jnp.float32)
        params: Params = {}
        for part, stages in (("encoder", self.encoder), ("decoder", self.decoder)):
            params[part], x, rng = init_stages(stages, rng, x)
            x = x[..., : cfg.latent_channels]
        return params

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat `{"encoder/conv_in/conv/kernel": shape}` of the full tree."""
        return param_shapes(self.init_params)
