"""LTX-2's spatial latent upsampler (follows diffusers `LTX2LatentUpsamplerModel`, ltx_core's `LatentUpsampler`).

The two-stage pipeline generates at half size, upsamples the un-normalised video latents x2 in space with
this network and refines at full size. The network and its layers are the ones LTX-Video ships too
(`vidax.zoo.parts.latent_upsampler`); what is LTX-2's own is its config and its spatial head, one of:

- the rational resampler (`use_rational_resampler`, LTX-2's): a conv to num² x channels, a pixel shuffle by
  num, and an anti-aliased (binomial 5x5, depthwise) stride-den downsample: scale num / den (x2: 2 / 1, the
  blur is then skipped; x1.5: 3 / 2);
- the shared conv to 4x channels and pixel shuffle (x2 in space), 2x (time: the first output frame dropped)
  or 8x (both).

LTX-2's convolutions run at HIGHEST precision whatever the runtime's matmul precision. Activations run
channels-last; `LTX2LatentUpsampler.__call__` takes and returns diffusers' `[B, C, F, H, W]`. The module names
follow diffusers' (`upsampler.conv` for the resampler, `upsampler.0` otherwise).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.configs import pick_fields
from vidax.zoo.parts.latent_upsampler import GROUPS, Conv, LatentUpsampler, LatentUpsamplerModel, pixel_shuffle

RATIONAL_SCALES = {0.75: (3, 4), 1.5: (3, 2), 2.0: (2, 1), 4.0: (4, 1)}  # scale -> (up by num, down by den)
BLUR_TAPS = 5  # the binomial kernel's size (1, 4, 6, 4, 1)


class UpsamplerConfigError(ValueError):
    """A latent upsampler config this port does not run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpsamplerConfig:
    """diffusers `LTX2LatentUpsamplerModel`'s config (its defaults: LTX-2.0's x2 spatial upsampler)."""

    in_channels: int = 128
    mid_channels: int = 1024
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False
    rational_spatial_scale: float = 2.0
    use_rational_resampler: bool = True

    def __post_init__(self):
        if self.dims not in (2, 3):
            raise UpsamplerConfigError(f"LTX-2 latent upsampler: dims {self.dims} (only 2 or 3)")
        if not (self.spatial_upsample or self.temporal_upsample):
            raise UpsamplerConfigError("LTX-2 latent upsampler: neither spatial nor temporal upsampling")
        if self.dims == 2 and self.temporal_upsample:
            raise UpsamplerConfigError("LTX-2 latent upsampler: temporal upsampling needs dims 3")
        if self.mid_channels % GROUPS:
            raise UpsamplerConfigError(f"LTX-2 latent upsampler: mid_channels {self.mid_channels} is not a multiple "
                                       f"of its {GROUPS} GroupNorm groups")
        if self.rational and float(self.rational_spatial_scale) not in RATIONAL_SCALES:
            raise UpsamplerConfigError(f"LTX-2 latent upsampler: rational scale {self.rational_spatial_scale} (one of "
                                       f"{', '.join(map(str, RATIONAL_SCALES))})")

    @property
    def rational(self) -> bool:
        """The rational resampler head (spatial only, as diffusers builds it)."""
        return self.spatial_upsample and not self.temporal_upsample and self.use_rational_resampler

    @property
    def spatial_ratio(self) -> tuple[int, int]:
        """(num, den): the output is num / den times as high and wide as the input."""
        if not self.spatial_upsample:
            return (1, 1)
        return RATIONAL_SCALES[float(self.rational_spatial_scale)] if self.rational else (2, 1)

    def output_grid(self, frames: int, height: int, width: int) -> tuple[int, int, int]:
        """The latent (F, H, W) it makes of (frames, height, width)."""
        num, den = self.spatial_ratio
        return (2 * frames - 1 if self.temporal_upsample else frames, -(-height * num // den), -(-width * num // den))

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "UpsamplerConfig":
        """From a diffusers `latent_upsampler/config.json` dict."""
        return cls(**pick_fields(cls, hf))


def blur_downsample(x: jax.Array, stride: int) -> jax.Array:
    """diffusers `BlurDownsample(dims=2)`: a depthwise 5x5 binomial blur (normalised outer product of
    1, 4, 6, 4, 1), zero padded by 2, at `stride`, on channels-last frames `[N, H, W, C]`."""
    if stride == 1:
        return x
    taps = np.array([math.comb(BLUR_TAPS - 1, k) for k in range(BLUR_TAPS)], np.float32)
    kernel = np.outer(taps, taps) / np.outer(taps, taps).sum()
    c = x.shape[-1]
    w = jnp.broadcast_to(jnp.asarray(kernel, x.dtype)[:, :, None, None], (BLUR_TAPS, BLUR_TAPS, 1, c))
    pad = BLUR_TAPS // 2
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2, feature_group_count=c,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=jax.lax.Precision.HIGHEST)


class RationalResampler(nn.Module):
    """diffusers `SpatialRationalResampler` on frames `[N, H, W, C]`: conv, shuffle by num, blur-down by den."""

    cfg: UpsamplerConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        num, den = self.cfg.spatial_ratio
        x = pixel_shuffle(Conv(num * num * x.shape[-1], 2, jax.lax.Precision.HIGHEST, name="conv")(x), (num, num))
        return blur_downsample(x, den)


class RationalLatentUpsampler(LatentUpsampler):
    """The shared network, whose spatial head is the rational resampler where the config asks for it."""

    def spatial_head(self, frames: jax.Array) -> jax.Array:
        if self.cfg.rational:
            return RationalResampler(self.cfg, name="upsampler")(frames)
        return super().spatial_head(frames)


class LTX2LatentUpsampler(LatentUpsamplerModel):
    """Upsample un-normalised latents `[B, C, F, H, W]` (x2 in space for LTX-2's released model).

    Args:
      cfg: `UpsamplerConfig.from_hf_config(config_json)`.
      dtype: activation dtype (GroupNorm statistics in fp32).
    """

    NETWORK = RationalLatentUpsampler
    CONV_PRECISION = jax.lax.Precision.HIGHEST
