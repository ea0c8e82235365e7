"""Flow-match Euler and LTX's ancestral Euler against diffusers, for every shipped configuration."""

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, LTXEulerAncestralRFScheduler
from diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video import retrieve_timesteps
from diffusers.pipelines.ltx.pipeline_ltx import calculate_shift as diffusers_calculate_shift
from diffusers.pipelines.ltx.pipeline_ltx_condition import linear_quadratic_schedule
from diffusers.schedulers import scheduling_ltx_euler_ancestral_rf

from vidax.zoo.samplers import (
    FlowEuler,
    FlowEulerAncestral,
    calculate_shift,
    flow_match_schedule,
    linear_quadratic_sigmas,
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

# LTX-Video / LTX-2 scheduler config (dynamic shift between 0.95 and 2.05, terminal 0.1).
LTX_CONFIG = dict(
    base_image_seq_len=1024, max_image_seq_len=4096, base_shift=0.95, max_shift=2.05, shift_terminal=0.1
)
LTX_SEQ_LEN = 3 * 22 * 38  # latent frames × height × width of a 704×1216 (and 17-frame) video
BASE_SIGMAS = {
    # what the pipelines pass to set_timesteps(sigmas=...)
    "ltx": np.linspace(1.0, 1 / NUM_STEPS, NUM_STEPS),
    "hunyuan": np.linspace(1.0, 0.0, NUM_STEPS + 1)[:-1],
}


def _ltx_mu() -> float:
    c = LTX_CONFIG
    return diffusers_calculate_shift(
        LTX_SEQ_LEN, c["base_image_seq_len"], c["max_image_seq_len"], c["base_shift"], c["max_shift"]
    )


def _our_ltx_mu() -> float:
    c = LTX_CONFIG
    return calculate_shift(
        LTX_SEQ_LEN,
        base_seq_len=c["base_image_seq_len"],
        max_seq_len=c["max_image_seq_len"],
        base_shift=c["base_shift"],
        max_shift=c["max_shift"],
    )


# name -> (diffusers scheduler kwargs, set_timesteps kwargs, our flow_match_schedule kwargs)
CONFIGS = {
    "ltx-dynamic": (
        dict(use_dynamic_shifting=True, **LTX_CONFIG),
        dict(sigmas=BASE_SIGMAS["ltx"], mu=_ltx_mu()),
        dict(base_sigmas=BASE_SIGMAS["ltx"], mu=_our_ltx_mu(), shift_terminal=0.1),
    ),
    "ltx-static": (
        dict(shift=1.0, shift_terminal=0.1),
        dict(sigmas=BASE_SIGMAS["ltx"]),
        dict(base_sigmas=BASE_SIGMAS["ltx"], shift_terminal=0.1),
    ),
    "ltx-static-default-grid": (dict(shift=1.0, shift_terminal=0.1), dict(), dict(shift_terminal=0.1)),
    "ltx-linear-quadratic": (
        dict(use_dynamic_shifting=True, **LTX_CONFIG),
        dict(sigmas=linear_quadratic_schedule(NUM_STEPS).numpy(), mu=_ltx_mu()),
        dict(base_sigmas=linear_quadratic_sigmas(NUM_STEPS), mu=_our_ltx_mu(), shift_terminal=0.1),
    ),
    **{
        f"hunyuan-shift{s}": (
            dict(shift=float(s)),
            dict(sigmas=BASE_SIGMAS["hunyuan"]),
            dict(shift=float(s), base_sigmas=BASE_SIGMAS["hunyuan"]),
        )
        for s in (5, 7, 9)
    },
    "static-shift3-default-grid": (dict(shift=3.0), dict(), dict(shift=3.0)),
    "linear-time-shift": (
        dict(use_dynamic_shifting=True, time_shift_type="linear"),
        dict(sigmas=BASE_SIGMAS["ltx"], mu=1.7),
        dict(base_sigmas=BASE_SIGMAS["ltx"], mu=1.7, time_shift_type="linear"),
    ),
}


def _diffusers_flow(name):
    config, set_kwargs, _ = CONFIGS[name]
    scheduler = FlowMatchEulerDiscreteScheduler(**config)
    retrieve_timesteps(scheduler, NUM_STEPS if not set_kwargs else None, "cpu", **set_kwargs)
    return scheduler


def test_calculate_shift_matches_pipelines():
    assert _our_ltx_mu() == pytest.approx(_ltx_mu(), rel=1e-12)
    assert calculate_shift(4096) == pytest.approx(diffusers_calculate_shift(4096), rel=1e-12)


def test_linear_quadratic_matches_ltx_condition_pipeline():
    for n in (1, 2, 7, 8, 30):
        np.testing.assert_allclose(linear_quadratic_sigmas(n), linear_quadratic_schedule(n).numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_flow_match_grid_and_trajectory(name):
    scheduler = _diffusers_flow(name)
    schedule = flow_match_schedule(NUM_STEPS, **CONFIGS[name][2])
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")

    latents, eps = fake_inputs()
    ref = diffusers_trajectory(_diffusers_flow(name), latents, eps)
    assert_trajectories_close(our_trajectory(FlowEuler.from_schedule(schedule), latents, eps), ref)


@pytest.mark.parametrize("num_steps", [30, 50])
@pytest.mark.parametrize("shift", [5.0, 7.0, 9.0])
def test_hunyuan_grid_at_native_step_counts(shift, num_steps):
    scheduler = FlowMatchEulerDiscreteScheduler(shift=shift)
    base = np.linspace(1.0, 0.0, num_steps + 1)[:-1]
    scheduler.set_timesteps(sigmas=base)
    schedule = flow_match_schedule(num_steps, shift=shift, base_sigmas=base)
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")


def test_ancestral_default_grid_is_flow_match():
    scheduler = LTXEulerAncestralRFScheduler()
    scheduler.set_timesteps(NUM_STEPS)
    schedule = flow_match_schedule(NUM_STEPS)
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0])
def test_ltx_ancestral_with_given_noise(eta, monkeypatch):
    import jax

    schedule = flow_match_schedule(NUM_STEPS, **CONFIGS["ltx-dynamic"][2])
    key = jax.random.key(7)
    # diffusers draws its noise with randn_tensor; hand it ours, step by step.
    noises = [np.asarray(step_noise(key, i, SHAPE)) for i in range(NUM_STEPS)]
    current = {}
    monkeypatch.setattr(
        scheduling_ltx_euler_ancestral_rf, "randn_tensor", lambda shape, **_: torch.from_numpy(noises[current["i"]].copy())
    )

    def step(i, t, model_output, x):
        current["i"] = i
        return scheduler.step(model_output, t, x, return_dict=False)[0]

    scheduler = LTXEulerAncestralRFScheduler(eta=eta)
    scheduler.set_timesteps(sigmas=torch.from_numpy(schedule.sigmas))
    assert_grid_equal(schedule.timesteps, scheduler.timesteps[:-1], "timesteps")
    latents, eps = fake_inputs()
    ref = diffusers_trajectory(scheduler, latents, eps, timesteps=scheduler.timesteps[:-1], step=step)
    ours = our_trajectory(FlowEulerAncestral.from_schedule(schedule, eta=eta), latents, eps, key=key)
    assert_trajectories_close(ours, ref)
    if eta > 0:  # the noise must matter, or the test above proves nothing about it
        plain = our_trajectory(FlowEulerAncestral.from_schedule(schedule, eta=0.0), latents, eps)
        assert np.linalg.norm(plain[3] - ours[3]) > 1e-3
