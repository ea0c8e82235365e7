"""Build a stepper from a diffusers `scheduler_config.json`, as the reference pipeline would use it.

One builder per scheduler class, looked up by `_class_name`. Options this package does not
implement are refused by name rather than ignored, so a checkpoint whose scheduler differs from
what we reproduce fails before sampling instead of producing a subtly different video.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from vidax.zoo.samplers.ddim import DDIM, CogVideoXDPM
from vidax.zoo.samplers.dpm import DPMSolverPP
from vidax.zoo.samplers.errors import SamplerConfigError
from vidax.zoo.samplers.flow_euler import FlowEuler, FlowEulerAncestral
from vidax.zoo.samplers.schedules import (
    Schedule,
    calculate_shift,
    ddim_timesteps,
    dpm_flow_schedule,
    flow_match_schedule,
    rescale_zero_terminal_snr,
    snr_shift,
    unipc_flow_schedule,
    unipc_karras_flow_schedule,
)
from vidax.zoo.samplers.unipc import UniPC

Config = Mapping[str, Any]

# Options whose non-default values we do not reproduce: key -> the only value accepted.
_UNSUPPORTED = {
    "invert_sigmas": False,
    "use_exponential_sigmas": False,
    "use_beta_sigmas": False,
    "use_lu_lambdas": False,
    "stochastic_sampling": False,
    "thresholding": False,
    "clip_sample": False,
    "solver_p": None,
    "predict_x0": True,
    "trained_betas": None,
    "variance_type": None,
}


def stepper_from_config(
    config: Config,
    num_steps: int,
    *,
    seq_len: int | None = None,
    mu: float | None = None,
    sigmas: np.ndarray | None = None,
):
    """The stepper a diffusers scheduler config describes, on a `num_steps` grid.

    Args:
        config: the scheduler config (a parsed `scheduler_config.json` or `scheduler.config`).
        num_steps: sampling steps.
        seq_len: latent token count; gives `mu` from the config's base/max shift and seq len
            for schedulers with `use_dynamic_shifting`.
        mu: the dynamic shift directly (overrides `seq_len`).
        sigmas: unshifted sigmas a pipeline passes to `set_timesteps(sigmas=...)` (flow match).
    """
    name = config.get("_class_name")
    if name not in _BUILDERS:
        raise SamplerConfigError(f"scheduler {name!r} is not supported (have: {', '.join(sorted(_BUILDERS))})")
    for key, accepted in _UNSUPPORTED.items():
        if config.get(key, accepted) not in (accepted, [], ()):
            raise SamplerConfigError(f"{name} option {key}={config[key]!r} is not supported")
    if mu is None and config.get("use_dynamic_shifting"):
        if seq_len is None:
            raise SamplerConfigError(f"{name} uses dynamic shifting: pass seq_len (latent tokens) or mu")
        mu = calculate_shift(
            seq_len,
            base_seq_len=config.get("base_image_seq_len", 256),
            max_seq_len=config.get("max_image_seq_len", 4096),
            base_shift=config.get("base_shift", 0.5),
            max_shift=config.get("max_shift", 1.15),
        )
    return _BUILDERS[name](config, num_steps, mu, sigmas)


def _flow_match(config: Config, num_steps: int, mu, sigmas) -> Schedule:
    if config.get("use_karras_sigmas"):
        raise SamplerConfigError("FlowMatchEulerDiscreteScheduler option use_karras_sigmas=True is not supported")
    return flow_match_schedule(
        num_steps,
        shift=config.get("shift", 1.0),
        mu=mu if config.get("use_dynamic_shifting") else None,
        shift_terminal=config.get("shift_terminal"),
        base_sigmas=sigmas,
        time_shift_type=config.get("time_shift_type", "exponential"),
        num_train_timesteps=config.get("num_train_timesteps", 1000),
    )


def _flow_euler(config: Config, num_steps: int, mu, sigmas) -> FlowEuler:
    return FlowEuler.from_schedule(_flow_match(config, num_steps, mu, sigmas))


def _ltx_ancestral(config: Config, num_steps: int, mu, sigmas) -> FlowEulerAncestral:
    if sigmas is None:  # diffusers then builds a default FlowMatchEuler grid
        schedule = flow_match_schedule(num_steps, num_train_timesteps=config.get("num_train_timesteps", 1000))
    else:  # used as given, terminal sigma included
        given = np.asarray(sigmas, np.float32)
        schedule = Schedule(timesteps=given[:-1] * np.float32(config.get("num_train_timesteps", 1000)), sigmas=given)
    return FlowEulerAncestral.from_schedule(schedule, eta=config.get("eta", 1.0), s_noise=config.get("s_noise", 1.0))


def _require_flow(config: Config) -> None:
    if config.get("prediction_type") != "flow_prediction" or not config.get("use_flow_sigmas"):
        raise SamplerConfigError(
            f"{config['_class_name']} is supported in flow mode only (prediction_type=flow_prediction, use_flow_sigmas)"
        )


def _unipc(config: Config, num_steps: int, mu, sigmas) -> UniPC:
    _require_flow(config)
    train = config.get("num_train_timesteps", 1000)
    final = config.get("final_sigmas_type", "zero")
    if config.get("use_karras_sigmas"):
        if config.get("sigma_min") is None or config.get("sigma_max") is None:
            raise SamplerConfigError("UniPC Karras flow sigmas need sigma_min and sigma_max in the config")
        schedule = unipc_karras_flow_schedule(
            num_steps, sigma_min=config["sigma_min"], sigma_max=config["sigma_max"], final_sigma=final,
            num_train_timesteps=train,
        )
    else:
        schedule = unipc_flow_schedule(
            num_steps, shift=config.get("flow_shift", 1.0), mu=mu if config.get("use_dynamic_shifting") else None,
            shift_terminal=config.get("shift_terminal"), final_sigma=final, num_train_timesteps=train,
            base_sigmas=sigmas,
        )
    return UniPC.from_schedule(
        schedule,
        order=config.get("solver_order", 2),
        solver_type=config.get("solver_type", "bh2"),
        lower_order_final=config.get("lower_order_final", True),
        disable_corrector=tuple(config.get("disable_corrector") or ()),
    )


def _dpm(config: Config, num_steps: int, mu, sigmas) -> DPMSolverPP:
    _require_flow(config)
    if config.get("algorithm_type", "dpmsolver++") != "dpmsolver++":
        raise SamplerConfigError(f"DPMSolverMultistepScheduler algorithm {config['algorithm_type']!r} is not supported")
    if config.get("use_karras_sigmas") or config.get("final_sigmas_type", "zero") != "zero":
        raise SamplerConfigError("DPMSolverMultistepScheduler flow mode is supported with plain sigmas ending at zero")
    shift = float(np.exp(mu)) if mu is not None else config.get("flow_shift", 1.0)  # set_timesteps(mu=...)
    schedule = dpm_flow_schedule(num_steps, shift=shift, num_train_timesteps=config.get("num_train_timesteps", 1000))
    return DPMSolverPP.from_schedule(
        schedule,
        order=config.get("solver_order", 2),
        solver_type=config.get("solver_type", "midpoint"),
        lower_order_final=config.get("lower_order_final", True),
        euler_at_final=config.get("euler_at_final", False),
    )


def _alphas_cumprod(config: Config, defaults: Mapping[str, Any]) -> np.ndarray:
    config = {**defaults, **config}
    train = config.get("num_train_timesteps", 1000)
    kind, start, end = config["beta_schedule"], config["beta_start"], config["beta_end"]
    if kind == "scaled_linear":
        betas = np.linspace(start**0.5, end**0.5, train, dtype=np.float64) ** 2
    elif kind == "linear":
        betas = np.linspace(start, end, train, dtype=np.float64)
    else:
        raise SamplerConfigError(f"beta_schedule {kind!r} is not supported (scaled_linear or linear)")
    alphas_cumprod = snr_shift(np.cumprod(1.0 - betas), config["snr_shift_scale"])
    return rescale_zero_terminal_snr(alphas_cumprod) if config.get("rescale_betas_zero_snr") else alphas_cumprod


def _ddpm(cls, **defaults):
    """Builder for a DDPM-family scheduler class whose constructor defaults are `defaults`."""

    def build(config: Config, num_steps: int, mu, sigmas):
        alphas_cumprod = _alphas_cumprod(config, defaults)
        train = config.get("num_train_timesteps", 1000)
        spacing = config.get("timestep_spacing", "leading")
        timesteps = ddim_timesteps(num_steps, spacing, num_train_timesteps=train, steps_offset=config.get("steps_offset", 0))
        final = 1.0 if config.get("set_alpha_to_one", True) else float(alphas_cumprod[0])
        prediction = config.get("prediction_type", "epsilon")
        return cls.create(
            alphas_cumprod, timesteps, prediction_type=prediction, final_alpha_cumprod=final, num_train_timesteps=train
        )

    return build


_BUILDERS: dict[str, Callable] = {
    "FlowMatchEulerDiscreteScheduler": _flow_euler,
    "LTXEulerAncestralRFScheduler": _ltx_ancestral,
    "UniPCMultistepScheduler": _unipc,
    "DPMSolverMultistepScheduler": _dpm,
    "DDIMScheduler": _ddpm(DDIM, beta_schedule="linear", beta_start=0.0001, beta_end=0.02, snr_shift_scale=1.0),
    **{
        name: _ddpm(cls, beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, snr_shift_scale=3.0)
        for name, cls in (("CogVideoXDDIMScheduler", DDIM), ("CogVideoXDPMScheduler", CogVideoXDPM))
    },
}
