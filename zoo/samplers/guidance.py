"""Classifier-free guidance, guidance rescale, and two-expert (Wan2.2 A14B) switching.

Pure functions over model outputs; pipelines call them inside their jitted model function.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


def cfg(cond: jax.Array, uncond: jax.Array, scale: float | jax.Array) -> jax.Array:
    """`uncond + scale · (cond − uncond)` (scale 1 gives `cond` up to rounding)."""
    return uncond + scale * (cond - uncond)


def rescale_guidance(guided: jax.Array, cond: jax.Array, phi: float | jax.Array) -> jax.Array:
    """Mix `guided` with itself rescaled to `cond`'s per-sample std (Lin et al. 2023, §3.4).

    Same as diffusers `rescale_noise_cfg`: std over all but the batch axis, unbiased (ddof 1);
    `phi` 0 returns `guided`, LTX-2.5 uses 0.7.
    """
    axes = tuple(range(1, guided.ndim))
    std_cond = jnp.std(cond, axis=axes, keepdims=True, ddof=1)
    std_guided = jnp.std(guided, axis=axes, keepdims=True, ddof=1)
    return phi * (guided * (std_cond / std_guided)) + (1 - phi) * guided


def guide(cond: jax.Array, uncond: jax.Array, scale: float | jax.Array, *, rescale: float = 0.0) -> jax.Array:
    """Classifier-free guidance followed, when `rescale` > 0, by guidance rescale.

    Args:
        cond: prediction with the prompt.
        uncond: prediction with the negative / empty prompt.
        scale: guidance scale.
        rescale: guidance rescale φ in [0, 1].
    """
    guided = cfg(cond, uncond, scale)
    return rescale_guidance(guided, cond, rescale) if rescale > 0 else guided


def guide_batched(prediction: jax.Array, scale: float | jax.Array, *, rescale: float = 0.0) -> jax.Array:
    """`guide` on a model output whose batch stacks [cond; uncond], as `vidax.zoo.compute.sharding.cfg_batch` builds it."""
    cond, uncond = jnp.split(prediction, 2, axis=0)
    return guide(cond, uncond, scale, rescale=rescale)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TwoExperts:
    """Wan2.2 A14B: the high-noise expert (`transformer`) runs while t ≥ boundary × num_train_timesteps,
    the low-noise expert (`transformer_2`) after, each with its own guidance scale.

    Args:
        boundary_ratio: 0.875 for T2V, 0.9 for I2V.
        guidance_scale: guidance of the high-noise expert.
        guidance_scale_2: guidance of the low-noise expert (defaults to `guidance_scale`).
        num_train_timesteps: the scheduler's training grid size.
    """

    boundary_ratio: float
    guidance_scale: float
    guidance_scale_2: float | None = None
    num_train_timesteps: int = 1000

    @property
    def boundary_timestep(self) -> float:
        return self.boundary_ratio * self.num_train_timesteps

    def expert(self, timestep: float) -> int:
        """0 for the high-noise expert, 1 for the low-noise expert."""
        return expert_for_timestep(timestep, self.boundary_ratio, self.num_train_timesteps)

    def scale(self, timestep: float) -> float:
        if self.expert(timestep) == 0 or self.guidance_scale_2 is None:
            return self.guidance_scale
        return self.guidance_scale_2


def expert_for_timestep(timestep: float, boundary_ratio: float | None, num_train_timesteps: int = 1000) -> int:
    """Index of the expert that denoises at `timestep`: 0 (high noise) while t ≥ boundary × T, else 1."""
    if boundary_ratio is None:
        return 0
    return 0 if timestep >= boundary_ratio * num_train_timesteps else 1
