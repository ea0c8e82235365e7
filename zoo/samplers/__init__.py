"""Samplers: pure schedule functions, jittable steppers, guidance, and the sampling loop.

    stepper = stepper_from_config(scheduler_config, num_steps=50, seq_len=tokens)  # as diffusers would
    stepper = UniPC.from_schedule(unipc_flow_schedule(50, shift=5.0))              # or explicitly

    def model_fn(latents, step_index, timestep):                                   # jit this one
        cond, uncond = cfg_split(model(cfg_batch(...)))
        return guide(cond, uncond, scale, rescale=0.0)

    latents = sample(model_fn, stepper, initial_noise(key, shape), key=key)

A stepper is a frozen dataclass and a pytree (schedule arrays as data, options as static
structure); `step(state, model_output, step_index)` takes the index as a traced int32, so one
compiled step serves the whole trajectory. `sample` stops with `NonFiniteLatentsError` on NaN/Inf.
"""

from vidax.zoo.samplers.base import initial_noise, step_noise
from vidax.zoo.samplers.configs import stepper_from_config
from vidax.zoo.samplers.ddim import DDIM, CogVideoXDPM
from vidax.zoo.samplers.dpm import DPMSolverPP
from vidax.zoo.samplers.errors import NonFiniteLatentsError, SamplerConfigError, SamplerError
from vidax.zoo.samplers.guidance import TwoExperts, cfg, expert_for_timestep, guide, guide_batched, rescale_guidance
from vidax.zoo.samplers.flow_euler import FlowEuler, FlowEulerAncestral
from vidax.zoo.samplers.loop import jitted_step, sample
from vidax.zoo.samplers.schedules import (
    Schedule,
    calculate_shift,
    cogvideox_alphas_cumprod,
    ddim_timesteps,
    dpm_flow_schedule,
    flow_match_schedule,
    karras_sigmas,
    linear_quadratic_sigmas,
    rescale_zero_terminal_snr,
    scaled_linear_betas,
    snr_shift,
    static_shift,
    stretch_to_terminal,
    time_shift,
    unipc_flow_schedule,
    unipc_karras_flow_schedule,
)
from vidax.zoo.samplers.unipc import UniPC

__all__ = [
    "CogVideoXDPM",
    "DDIM",
    "DPMSolverPP",
    "FlowEuler",
    "FlowEulerAncestral",
    "NonFiniteLatentsError",
    "SamplerConfigError",
    "SamplerError",
    "Schedule",
    "TwoExperts",
    "UniPC",
    "calculate_shift",
    "cfg",
    "cogvideox_alphas_cumprod",
    "ddim_timesteps",
    "dpm_flow_schedule",
    "expert_for_timestep",
    "flow_match_schedule",
    "guide",
    "guide_batched",
    "initial_noise",
    "jitted_step",
    "karras_sigmas",
    "linear_quadratic_sigmas",
    "rescale_guidance",
    "rescale_zero_terminal_snr",
    "sample",
    "scaled_linear_betas",
    "snr_shift",
    "static_shift",
    "step_noise",
    "stepper_from_config",
    "stretch_to_terminal",
    "time_shift",
    "unipc_flow_schedule",
    "unipc_karras_flow_schedule",
]
