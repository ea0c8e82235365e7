"""LTX-2 guidance: which DiT passes a step needs and how their velocities combine (diffusers `LTX2Pipeline`).

Per modality (video, audio) and step, in x0 space (`x0 = x - sigma * v`, fp32):

    x0_g = x0_cond + (cfg - 1)(x0_cond - x0_uncond) + stg (x0_cond - x0_stg) + (modality - 1)(x0_cond - x0_iso)
    x0   = rescale * x0_g * std(x0_cond) / std(x0_g) + (1 - rescale) * x0_g     (when rescale > 0)
    v    = (x - x0) / sigma

with `std` torch's unbiased standard deviation over every axis but the batch. CFG runs when either
modality's scale is > 1, STG when either STG scale is > 0, modality isolation when either modality
scale is > 1; a pass that runs contributes to both modalities with their own scales. The audio
scales default to the video ones through Python's `or` (diffusers' `audio_x = audio_x or x`), so an
audio scale of 0 means "same as video".

Passes are rows of one DiT batch (`DiTInputs.stg_keep` / `cross_keep`): `PASSES` order is
cond, uncond, stg, isolated; the STG row perturbs `stg_blocks` (diffusers' STG pass uses the
conditional prompt; so does the isolated one).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

PASSES = ("cond", "uncond", "stg", "isolated")


@dataclasses.dataclass(frozen=True)
class GuidanceScales:
    """diffusers `LTX2Pipeline.__call__`'s guidance arguments (its defaults: the LTX-2.3 recommendation)."""

    guidance: float = 3.0
    stg_scale: float = 1.0
    modality_scale: float = 3.0
    guidance_rescale: float = 0.7
    audio_guidance: float | None = 7.0
    audio_stg_scale: float | None = 1.0
    audio_modality_scale: float | None = 3.0
    audio_guidance_rescale: float | None = 0.7
    stg_blocks: tuple[int, ...] = (28,)

    def resolved(self) -> "GuidanceScales":
        """The audio scales as diffusers resolves them (`audio or video`)."""
        return dataclasses.replace(
            self, audio_guidance=self.audio_guidance or self.guidance,
            audio_stg_scale=self.audio_stg_scale or self.stg_scale,
            audio_modality_scale=self.audio_modality_scale or self.modality_scale,
            audio_guidance_rescale=self.audio_guidance_rescale or self.guidance_rescale)

    @property
    def passes(self) -> tuple[str, ...]:
        """The DiT passes a step needs, in `PASSES` order."""
        s = self.resolved()
        need = {"cond": True, "uncond": s.guidance > 1.0 or s.audio_guidance > 1.0,
                "stg": s.stg_scale > 0.0 or s.audio_stg_scale > 0.0,
                "isolated": s.modality_scale > 1.0 or s.audio_modality_scale > 1.0}
        if need["stg"] and not self.stg_blocks:
            raise ValueError("STG is on (stg_scale or audio_stg_scale > 0) but no STG blocks are given")
        return tuple(name for name in PASSES if need[name])


def pass_controls(scales: GuidanceScales, num_layers: int) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """`(passes, stg_keep [P, num_layers], cross_keep [P])` for the rows of one guidance batch."""
    passes = scales.passes
    return (passes, *pass_rows(passes, scales.stg_blocks, num_layers))


def pass_rows(passes: tuple[str, ...], stg_blocks: tuple[int, ...], num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """`(stg_keep [P, num_layers], cross_keep [P])` of the guidance rows `passes` (`PASSES` names)."""
    stg_keep = np.ones((len(passes), num_layers), np.float32)
    cross_keep = np.ones((len(passes),), np.float32)
    for row, name in enumerate(passes):
        if name == "stg":
            bad = [b for b in stg_blocks if not 0 <= b < num_layers]
            if bad:
                raise ValueError(f"STG blocks {bad} are outside the DiT's {num_layers} blocks")
            stg_keep[row, list(stg_blocks)] = 0.0
        elif name == "isolated":
            cross_keep[row] = 0.0
    return stg_keep, cross_keep


def rescale(guided, cond, factor: float):
    """diffusers `rescale_noise_cfg` (unbiased std over all axes but the batch)."""
    axes = tuple(range(1, guided.ndim))
    std_cond = jnp.std(cond, axis=axes, keepdims=True, ddof=1)
    std_guided = jnp.std(guided, axis=axes, keepdims=True, ddof=1)
    return factor * (guided * (std_cond / std_guided)) + (1 - factor) * guided


def combine(x, sigma, velocities: dict, *, scale: float, stg_scale: float, modality_scale: float,
            rescale_factor: float, rescaled: bool | None = None):
    """One modality's guided velocity from its passes' velocities (`PASSES` names -> arrays like `x`).

    Args:
      x: the current latents (packed), `sigma` the step's sigma (scalar).
      velocities: the DiT outputs of the passes that ran.
      scale, stg_scale, modality_scale, rescale_factor: Python floats or traced scalars (data).
      rescaled: whether the rescale runs (static); None: `rescale_factor > 0` (a Python float then).
    """
    x = jnp.asarray(x, jnp.float32)
    x0 = {name: x - jnp.asarray(v, jnp.float32) * sigma for name, v in velocities.items()}
    cond = x0["cond"]
    guided = cond
    if "uncond" in x0:
        guided = guided + (scale - 1) * (cond - x0["uncond"])
    if "stg" in x0:
        guided = guided + stg_scale * (cond - x0["stg"])
    if "isolated" in x0:
        guided = guided + (modality_scale - 1) * (cond - x0["isolated"])
    if (rescale_factor > 0) if rescaled is None else rescaled:
        guided = rescale(guided, cond, rescale_factor)
    return (x - guided) / sigma


def guided_velocities(scales: GuidanceScales, video, audio, sigma, video_out: dict, audio_out: dict):
    """Both modalities' guided velocities (`*_out`: pass name -> that pass's DiT output)."""
    s = scales.resolved()
    v = combine(video, sigma, video_out, scale=s.guidance, stg_scale=s.stg_scale, modality_scale=s.modality_scale,
                rescale_factor=s.guidance_rescale)
    a = combine(audio, sigma, audio_out, scale=s.audio_guidance, stg_scale=s.audio_stg_scale,
                modality_scale=s.audio_modality_scale, rescale_factor=s.audio_guidance_rescale)
    return v, a


def schedule_inputs(scheduler_config: dict, num_steps: int, video_tokens: int, sigmas=None) -> dict:
    """What `LTX2Pipeline` hands its `FlowMatchEulerDiscreteScheduler.set_timesteps`: unshifted sigmas
    `linspace(1, 1 / steps, steps)` (or the caller's, e.g. the distilled list) and `mu` from the video
    token count with the pipeline's own fallbacks (1024 / 4096 tokens, shift 0.95 / 2.05) for what the
    config lacks. Pass both to `vidax.zoo.samplers.configs.stepper_from_config(config, steps, **...)`;
    the audio latents use the same grid (diffusers deep-copies the scheduler)."""
    from vidax.zoo.samplers.schedules import calculate_shift

    if sigmas is None:
        sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
    mu = calculate_shift(video_tokens, base_seq_len=scheduler_config.get("base_image_seq_len", 1024),
                         max_seq_len=scheduler_config.get("max_image_seq_len", 4096),
                         base_shift=scheduler_config.get("base_shift", 0.95),
                         max_shift=scheduler_config.get("max_shift", 2.05))
    return dict(sigmas=np.asarray(sigmas), mu=mu)
