"""The pure pieces of the CogVideoX pipelines (diffusers `CogVideoXPipeline` and
`CogVideoXImageToVideoPipeline`), for the family's generator to call.

- Latent layouts: vidax keeps latents `[B, C, F', H', W']` in every family; CogVideoX's pipelines
  keep `[B, F', C, H', W']`. `to_reference_layout` / `from_reference_layout` swap them.
- Frames (`frame_plan`): F' = (frames − 1) // 4 + 1 latent frames; 1.5 pads F' up to a multiple of
  `patch_size_t` (by adding 4 pixel frames per missing latent frame), denoises all of them, and drops
  the first `drop` latent frames before decoding (81 frames: 21 -> 22 latents, drop 1).
- I2V image latents (`image_latents`): the VAE posterior of the first frame *sampled* with the run's
  noise, scaled by `scaling_factor` (1.5, `invert_scale_latents`: times its reciprocal), followed by zero
  frames; with `patch_size_t`, `F' % patch_size_t` leading copies of the image latent (none once
  `frame_plan` has padded F'). Concatenated after the noisy latents on the channel axis.
- Decoding (`to_vae_latents`): the kept frames times 1 / `scaling_factor`.
- Guidance: plain CFG `uncond + s·(cond − uncond)` on the [uncond, cond] batch; with dynamic CFG
  (diffusers `use_dynamic_cfg`) the scale of each step is `dynamic_guidance(s, t, steps)`.
- ofs (1.5 I2V): the DiT's `ofs` input is the constant 2.0 (`OFS`), one value for the whole batch.
- Scheduler (`reference_scheduler_config`): the repos' `scheduler_config.json` with the scheduler
  class the reference inference script (THUDM/CogVideo inference/cli_demo.py) runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from vidax.zoo.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig

OFS = 2.0  # diffusers CogVideoXImageToVideoPipeline: `latents.new_full((1,), fill_value=2.0)`
SCHEDULERS = ("CogVideoXDDIMScheduler", "CogVideoXDPMScheduler")


def to_reference_layout(latents: jax.Array) -> jax.Array:
    """vidax `[B, C, F, H, W]` -> CogVideoX pipelines' `[B, F, C, H, W]`."""
    return jnp.swapaxes(latents, 1, 2)


def from_reference_layout(latents: jax.Array) -> jax.Array:
    """CogVideoX pipelines' `[B, F, C, H, W]` -> vidax `[B, C, F, H, W]`."""
    return jnp.swapaxes(latents, 1, 2)


@dataclasses.dataclass(frozen=True)
class FramePlan:
    """How many latent frames are denoised and how many are dropped before decoding.

    Attributes:
      frames: pixel frames asked for.
      latent_frames: F' of the denoised latents (1.5: padded to a multiple of `patch_size_t`).
      drop: leading latent frames dropped before decoding (diffusers `additional_frames`).
      padded_frames: the pixel frame count the pipeline continues with (`num_frames` after padding).
    """

    frames: int
    latent_frames: int
    drop: int
    padded_frames: int


def frame_plan(frames: int, vae: CogVideoXVAEConfig, dit: CogVideoXTransformerConfig) -> FramePlan:
    """diffusers' frame arithmetic in `CogVideoXPipeline.__call__` / `prepare_latents`."""
    ratio = vae.temporal_compression_ratio
    if frames < 1:
        raise ValueError(f"CogVideoX needs at least 1 frame, got {frames}")
    latent = (frames - 1) // ratio + 1
    pt = dit.patch_size_t
    drop = pt - latent % pt if pt and latent % pt else 0
    padded = frames + drop * ratio
    return FramePlan(frames, (padded - 1) // ratio + 1, drop, padded)


def latent_shape(batch: int, plan: FramePlan, height: int, width: int, vae: CogVideoXVAEConfig,
                 dit: CogVideoXTransformerConfig) -> tuple[int, int, int, int, int]:
    """vidax-layout shape `[B, C, F', H', W']` of the initial noise (`prepare_latents`; I2V: the
    noise's channels are half the DiT's input). 1.5 I2V adds `F' % patch_size_t` frames (none after
    `frame_plan`'s padding), as the I2V pipeline does."""
    s = vae.spatial_compression
    channels = dit.in_channels // 2 if is_image_to_video(dit) else dit.in_channels
    frames = plan.latent_frames
    if dit.patch_size_t is not None and is_image_to_video(dit):
        frames += frames % dit.patch_size_t
    return (batch, channels, frames, height // s, width // s)


def is_image_to_video(dit: CogVideoXTransformerConfig) -> bool:
    """I2V checkpoints take the noisy latents and the image latents concatenated on the channels."""
    return dit.in_channels == 2 * dit.out_channels


def sample_posterior(moments: jax.Array, noise: jax.Array) -> jax.Array:
    """diffusers `DiagonalGaussianDistribution.sample`: `mean + exp(logvar / 2) · noise`, logvar
    clamped to [-30, 20]. `moments` `[B, 2z, ...]` (mean first), `noise` `[B, z, ...]`."""
    mean, logvar = jnp.split(moments, 2, axis=1)
    std = jnp.exp(0.5 * jnp.clip(logvar, -30.0, 20.0))
    return mean + std * noise.astype(mean.dtype)


def image_latents(moments: jax.Array, noise: jax.Array, latent_frames: int, vae: CogVideoXVAEConfig,
                  dit: CogVideoXTransformerConfig) -> jax.Array:
    """The I2V conditioning latents `[B, z, F, H', W']` (diffusers I2V `prepare_latents`).

    Args:
      moments: the VAE posterior of the conditioning image, `[B, 2z, 1, H', W']` (`encode_moments`).
      noise: standard normal noise `[B, z, 1, H', W']` for the posterior sample (the run's seed).
      latent_frames: F' of the noisy latents before the I2V padding (`FramePlan.latent_frames`).
      vae, dit: the configs (`scaling_factor`, `invert_scale_latents`, `patch_size_t`).
    """
    z = sample_posterior(moments, noise)
    z = z * (1 / vae.scaling_factor) if vae.invert_scale_latents else z * vae.scaling_factor  # as the reference: × 1/s
    b, c, _, h, w = z.shape
    z = jnp.concatenate([z, jnp.zeros((b, c, latent_frames - 1, h, w), z.dtype)], axis=2)
    if dit.patch_size_t is not None:
        z = jnp.concatenate([z[:, :, : z.shape[2] % dit.patch_size_t], z], axis=2)
    return z


def to_vae_latents(latents: jax.Array, plan: FramePlan, vae: CogVideoXVAEConfig) -> jax.Array:
    """The DiT's final latents `[B, C, F', H', W']` -> the VAE decoder's input: the first
    `plan.drop` frames dropped (1.5), times 1 / `scaling_factor` (`decode_latents`).

    Multiplied by the reciprocal (rounded to fp32) as the reference writes it: a division differs in the last
    bit of about one value in ten, and a decoder can carry one ulp of its input into ~1e-5 of its output (the
    tiny CogVideoX 5B-I2V test's VAE). XLA's simplifier turns a division by a constant into this product
    anyway; written out, the order does not depend on it."""
    return latents[:, :, plan.drop:] * (1 / vae.scaling_factor)


def dynamic_guidance(scale: float, timestep: float, steps: int) -> float:
    """diffusers `use_dynamic_cfg`: `1 + scale · (1 − cos(π · ((steps − t) / steps) ** 5)) / 2`.

    `t` is the step's timestep (0..999), not its index, exactly as the reference computes it (so the
    base is far below −1 for most steps; the cosine keeps the scale within [1, 1 + scale]).
    """
    return 1 + scale * ((1 - math.cos(math.pi * ((steps - float(timestep)) / steps) ** 5.0)) / 2)


def guidance_scales(scale: float, timesteps, dynamic: bool) -> list[float]:
    """The guidance scale of every step (constant without dynamic CFG)."""
    steps = len(timesteps)
    return [dynamic_guidance(scale, t, steps) if dynamic else float(scale) for t in timesteps]


def reference_scheduler_config(shipped: Mapping[str, Any], scheduler: str | None = None) -> dict[str, Any]:
    """The scheduler config a run uses: the repo's `scheduler_config.json` with `_class_name` set to
    `scheduler` (the reference script swaps classes with `from_config(config, timestep_spacing="trailing")`,
    keeping every other entry), or as shipped when None."""
    config = dict(shipped)
    if scheduler is not None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"CogVideoX samplers are {', '.join(SCHEDULERS)}, got {scheduler!r}")
        config.update(_class_name=scheduler, timestep_spacing="trailing")
    if config.get("_class_name") not in SCHEDULERS:
        raise ValueError(f"a CogVideoX scheduler config names {', '.join(SCHEDULERS)}, got {config.get('_class_name')!r}")
    return config
