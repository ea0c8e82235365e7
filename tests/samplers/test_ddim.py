"""DDIM and CogVideoX's DDIM / DPM (v-prediction, zero terminal SNR) against diffusers."""

import jax
import numpy as np
import pytest
import torch
from diffusers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler, DDIMScheduler
from diffusers.schedulers import scheduling_dpm_cogvideox

from vidax.zoo.samplers import (
    DDIM,
    CogVideoXDPM,
    SamplerConfigError,
    cogvideox_alphas_cumprod,
    ddim_timesteps,
    rescale_zero_terminal_snr,
    scaled_linear_betas,
    step_noise,
)

from .reference import (
    NUM_STEPS,
    SHAPE,
    assert_grid_equal,
    assert_trajectories_close,
    diffusers_trajectory,
    fake_inputs,
    our_trajectory,
)

# The shipped CogVideoX scheduler config (diffusers' convert_cogvideox_to_diffusers.py);
# snr_shift_scale is 3.0 for CogVideoX-2b and 1.0 for the 5B models.
COGVIDEOX = dict(
    beta_end=0.012,
    beta_schedule="scaled_linear",
    beta_start=0.00085,
    clip_sample=False,
    num_train_timesteps=1000,
    prediction_type="v_prediction",
    rescale_betas_zero_snr=True,
    set_alpha_to_one=True,
    timestep_spacing="trailing",
)
SNR_SHIFT = {"2b": 3.0, "5b": 1.0}


def _cog(cls, model: str, num_steps: int = NUM_STEPS, **overrides):
    scheduler = cls(**dict(COGVIDEOX, snr_shift_scale=SNR_SHIFT[model], **overrides))
    scheduler.set_timesteps(num_steps)
    return scheduler


def _ours(model: str, num_steps: int = NUM_STEPS, spacing: str = "trailing"):
    return cogvideox_alphas_cumprod(snr_shift_scale=SNR_SHIFT[model]), ddim_timesteps(num_steps, spacing)


@pytest.mark.parametrize("model", sorted(SNR_SHIFT))
@pytest.mark.parametrize("spacing", ["trailing", "leading", "linspace"])
@pytest.mark.parametrize("num_steps", [NUM_STEPS, 7, 50])
def test_cogvideox_grid(model, spacing, num_steps):
    scheduler = _cog(CogVideoXDDIMScheduler, model, num_steps, timestep_spacing=spacing)
    alphas_cumprod, timesteps = _ours(model, num_steps, spacing)
    assert_grid_equal(timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(alphas_cumprod, scheduler.alphas_cumprod, "alphas_cumprod")


@pytest.mark.parametrize("model", sorted(SNR_SHIFT))
@pytest.mark.parametrize("num_steps", [NUM_STEPS, 7])
def test_cogvideox_ddim_trajectory(model, num_steps):
    latents, eps = fake_inputs(num_steps)
    ref = diffusers_trajectory(_cog(CogVideoXDDIMScheduler, model, num_steps), latents, eps)
    stepper = DDIM.create(*_ours(model, num_steps))
    assert_trajectories_close(our_trajectory(stepper, latents, eps), ref)


@pytest.mark.parametrize("model", sorted(SNR_SHIFT))
def test_cogvideox_dpm_trajectory_with_given_noise(model, monkeypatch):
    key = jax.random.key(3)
    noises = [np.asarray(step_noise(key, i, SHAPE)) for i in range(NUM_STEPS)]
    current = {}
    # diffusers draws noise with randn_tensor (twice on second-order steps, the first discarded).
    monkeypatch.setattr(
        scheduling_dpm_cogvideox, "randn_tensor", lambda shape, **_: torch.from_numpy(noises[current["i"]].copy())
    )
    scheduler = _cog(CogVideoXDPMScheduler, model)
    timesteps = scheduler.timesteps
    old_x0 = {"value": None}

    def step(i, t, model_output, x):  # the CogVideoX pipeline's call
        current["i"] = i
        back = timesteps[i - 1] if i > 0 else None
        x, old_x0["value"] = scheduler.step(model_output, old_x0["value"], t, back, x, return_dict=False)
        return x

    latents, eps = fake_inputs()
    ref = diffusers_trajectory(scheduler, latents, eps, step=step)
    ours = our_trajectory(CogVideoXDPM.create(*_ours(model)), latents, eps, key=key)
    assert_trajectories_close(ours, ref)


def test_plain_ddim_v_prediction_zero_snr():
    """diffusers' generic DDIMScheduler (rescale through betas, float32 tables) with eta 0."""
    config = dict(
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type="v_prediction",
        rescale_betas_zero_snr=True,
        timestep_spacing="trailing",
        clip_sample=False,
    )
    scheduler = DDIMScheduler(**config)
    scheduler.set_timesteps(NUM_STEPS)
    alphas_cumprod = rescale_zero_terminal_snr(np.cumprod(1 - scaled_linear_betas()))
    timesteps = ddim_timesteps(NUM_STEPS, "trailing")
    assert_grid_equal(timesteps, scheduler.timesteps, "timesteps")
    # diffusers keeps this table in float32 (and round-trips it through betas): 1e-6 absolute.
    np.testing.assert_allclose(alphas_cumprod, scheduler.alphas_cumprod.numpy(), rtol=0, atol=1e-6)
    latents, eps = fake_inputs()
    ref = diffusers_trajectory(scheduler, latents, eps)
    assert_trajectories_close(our_trajectory(DDIM.create(alphas_cumprod, timesteps), latents, eps), ref)


def test_epsilon_prediction_ddim():
    config = dict(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, clip_sample=False)
    scheduler = DDIMScheduler(**config, timestep_spacing="leading", steps_offset=1)
    scheduler.set_timesteps(NUM_STEPS)
    timesteps = ddim_timesteps(NUM_STEPS, "leading", steps_offset=1)
    assert_grid_equal(timesteps, scheduler.timesteps, "timesteps")
    latents, eps = fake_inputs()
    ref = diffusers_trajectory(scheduler, latents, eps)
    alphas_cumprod = np.cumprod(1 - scaled_linear_betas())
    stepper = DDIM.create(alphas_cumprod, timesteps, prediction_type="epsilon", final_alpha_cumprod=1.0)
    assert_trajectories_close(our_trajectory(stepper, latents, eps), ref)


def test_bad_configs_fail_clearly():
    alphas_cumprod, timesteps = _ours("2b")
    with pytest.raises(SamplerConfigError, match="prediction_type"):
        DDIM.create(alphas_cumprod, timesteps, prediction_type="sample")
    with pytest.raises(SamplerConfigError, match="spacing"):
        ddim_timesteps(8, "uniform")
    with pytest.raises(SamplerConfigError, match="key"):
        CogVideoXDPM.create(alphas_cumprod, timesteps).init(np.zeros(SHAPE, np.float32))
