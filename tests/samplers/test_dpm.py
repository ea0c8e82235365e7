"""DPM-Solver++ (2M) in flow-prediction mode against diffusers."""

import pytest
from diffusers import DPMSolverMultistepScheduler

from vidax.zoo.samplers import DPMSolverPP, SamplerConfigError, dpm_flow_schedule

from .reference import NUM_STEPS, assert_grid_equal, assert_trajectories_close, diffusers_trajectory, fake_inputs, our_trajectory

# name -> (diffusers kwargs, our DPMSolverPP kwargs)
CONFIGS = {
    "2m-midpoint": (dict(), dict()),
    "2m-heun": (dict(solver_type="heun"), dict(solver_type="heun")),
    "1s": (dict(solver_order=1), dict(order=1)),
    "2m-euler-at-final": (dict(euler_at_final=True), dict(euler_at_final=True)),
}


def _diffusers(config: dict, shift: float) -> DPMSolverMultistepScheduler:
    scheduler = DPMSolverMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=shift, **config
    )
    scheduler.set_timesteps(NUM_STEPS)
    return scheduler


@pytest.mark.parametrize("shift", [3.0, 5.0])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dpm_flow_grid_and_trajectory(name, shift):
    config, ours = CONFIGS[name]
    schedule = dpm_flow_schedule(NUM_STEPS, shift=shift)
    scheduler = _diffusers(config, shift)
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")
    latents, eps = fake_inputs()
    ref = diffusers_trajectory(_diffusers(config, shift), latents, eps)
    assert_trajectories_close(our_trajectory(DPMSolverPP.from_schedule(schedule, **ours), latents, eps), ref)


def test_bad_configs_fail_clearly():
    schedule = dpm_flow_schedule(NUM_STEPS, shift=3.0)
    with pytest.raises(SamplerConfigError, match="order"):
        DPMSolverPP.from_schedule(schedule, order=3)
    with pytest.raises(SamplerConfigError, match="solver_type"):
        DPMSolverPP.from_schedule(schedule, solver_type="logrho")
