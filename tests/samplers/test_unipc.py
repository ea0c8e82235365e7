"""UniPC in flow-prediction mode against diffusers: shipped configs and every solver option."""

import numpy as np
import pytest
from diffusers import UniPCMultistepScheduler

from vidax.zoo.samplers import NonFiniteLatentsError, SamplerConfigError, UniPC, unipc_flow_schedule, unipc_karras_flow_schedule

from .reference import NUM_STEPS, assert_grid_equal, assert_trajectories_close, diffusers_trajectory, fake_inputs, our_trajectory

FLOW = dict(prediction_type="flow_prediction", use_flow_sigmas=True)

# name -> (diffusers UniPCMultistepScheduler kwargs, our schedule builder)
SHIPPED = {
    "wan2.1-shift3": (dict(flow_shift=3.0), lambda n: unipc_flow_schedule(n, shift=3.0)),
    "wan2.1-720p-shift5": (dict(flow_shift=5.0), lambda n: unipc_flow_schedule(n, shift=5.0)),
    "wan2.2-shift5": (dict(flow_shift=5.0), lambda n: unipc_flow_schedule(n, shift=5.0)),
    "wan2.2-a14b-shift12": (dict(flow_shift=12.0), lambda n: unipc_flow_schedule(n, shift=12.0)),
    "cosmos3-shift10": (dict(flow_shift=10.0), lambda n: unipc_flow_schedule(n, shift=10.0)),
    # diffusers scripts/convert_cosmos_to_diffusers.py, save_pipeline_cosmos2_5_predict:
    "cosmos2.5-karras": (
        dict(use_karras_sigmas=True, sigma_min=0.01, sigma_max=200.0),
        lambda n: unipc_karras_flow_schedule(n, sigma_min=0.01, sigma_max=200.0),
    ),
}

# Solver options beyond the shipped ones: name -> (diffusers kwargs, our UniPC kwargs).
VARIANTS = {
    "order1": (dict(solver_order=1), dict(order=1)),
    "order3": (dict(solver_order=3), dict(order=3)),
    "order2-no-lower-final-sigma-min": (
        dict(lower_order_final=False, final_sigmas_type="sigma_min"),
        dict(lower_order_final=False),
    ),
    "order2-disable-corrector": (dict(disable_corrector=[0, 3, 5]), dict(disable_corrector=(0, 3, 5))),
    "bh1-order3-sigma-min": (
        dict(solver_type="bh1", solver_order=3, final_sigmas_type="sigma_min"),
        dict(solver_type="bh1", order=3),
    ),
    "bh1-order2-sigma-min-disable": (
        dict(solver_type="bh1", final_sigmas_type="sigma_min", disable_corrector=[1]),
        dict(solver_type="bh1", disable_corrector=(1,)),
    ),
}


def _diffusers(config: dict, num_steps: int = NUM_STEPS) -> UniPCMultistepScheduler:
    scheduler = UniPCMultistepScheduler(**FLOW, **config)
    scheduler.set_timesteps(num_steps)
    return scheduler


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_grid_and_trajectory(name):
    config, build = SHIPPED[name]
    schedule = build(NUM_STEPS)
    scheduler = _diffusers(config)
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")

    latents, eps = fake_inputs()
    ref = diffusers_trajectory(_diffusers(config), latents, eps)
    assert_trajectories_close(our_trajectory(UniPC.from_schedule(schedule), latents, eps), ref)


@pytest.mark.parametrize("num_steps", [30, 35, 40, 50])
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_grid_at_native_step_counts(name, num_steps):
    config, build = SHIPPED[name]
    schedule, scheduler = build(num_steps), _diffusers(config, num_steps)
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_solver_variants(name):
    config, ours = VARIANTS[name]
    config = dict(config, flow_shift=5.0)
    final = config.get("final_sigmas_type", "zero")
    schedule = unipc_flow_schedule(NUM_STEPS, shift=5.0, final_sigma=final)
    assert_grid_equal(schedule.sigmas, _diffusers(config).sigmas, "sigmas")
    latents, eps = fake_inputs(seed=1)
    ref = diffusers_trajectory(_diffusers(config), latents, eps)
    assert_trajectories_close(our_trajectory(UniPC.from_schedule(schedule, **ours), latents, eps), ref)


def test_corrector_off_differs_and_matches_solver_p_free_predictor():
    """Corrector off must change the result (else the corrector path is dead code)."""
    schedule = unipc_flow_schedule(NUM_STEPS, shift=5.0)
    latents, eps = fake_inputs()
    with_c = our_trajectory(UniPC.from_schedule(schedule), latents, eps)
    without = our_trajectory(UniPC.from_schedule(schedule, use_corrector=False), latents, eps)
    every_step_disabled = dict(disable_corrector=list(range(NUM_STEPS)), flow_shift=5.0)
    ref = diffusers_trajectory(_diffusers(every_step_disabled), latents, eps)
    assert_trajectories_close(without, ref)
    assert abs(with_c[-1] - without[-1]).max() > 1e-3


def test_nan_where_diffusers_nans_stops_naming_the_step():
    """Order 3 without lower-order final steps divides by h = 0 on the repeated last sigma."""
    config = dict(solver_order=3, lower_order_final=False, final_sigmas_type="sigma_min", flow_shift=5.0)
    latents, eps = fake_inputs(seed=1)
    ref = diffusers_trajectory(_diffusers(config), latents, eps)
    assert np.isfinite(ref[-2]).all() and not np.isfinite(ref[-1]).all()
    schedule = unipc_flow_schedule(NUM_STEPS, shift=5.0, final_sigma="sigma_min")
    stepper = UniPC.from_schedule(schedule, order=3, lower_order_final=False)
    with pytest.raises(NonFiniteLatentsError, match=f"step {NUM_STEPS}/{NUM_STEPS} .timestep 418"):
        our_trajectory(stepper, latents, eps)


def test_bad_configs_fail_clearly():
    schedule = unipc_flow_schedule(NUM_STEPS, shift=5.0)
    with pytest.raises(SamplerConfigError, match="order"):
        UniPC.from_schedule(schedule, order=4)
    with pytest.raises(SamplerConfigError, match="bh1"):
        UniPC.from_schedule(schedule, solver_type="bh1")
    with pytest.raises(SamplerConfigError, match="lower_order_final"):
        UniPC.from_schedule(schedule, order=3, lower_order_final=False)
    with pytest.raises(SamplerConfigError, match="solver_type"):
        UniPC.from_schedule(schedule, solver_type="bh3")


@pytest.mark.parametrize("terminal", [None, 0.1])
def test_dynamic_shift_grid(terminal):
    config = dict(use_dynamic_shifting=True, shift_terminal=terminal)
    scheduler = UniPCMultistepScheduler(**FLOW, **config)
    scheduler.set_timesteps(NUM_STEPS, mu=1.3)
    schedule = unipc_flow_schedule(NUM_STEPS, mu=1.3, shift_terminal=terminal)
    assert_grid_equal(schedule.timesteps, scheduler.timesteps, "timesteps")
    assert_grid_equal(schedule.sigmas, scheduler.sigmas, "sigmas")


def test_direct_construction_validates_and_keeps_static_fields_hashable():
    import jax

    schedule = unipc_flow_schedule(NUM_STEPS, shift=5.0)
    stepper = UniPC(sigmas=schedule.sigmas, timesteps=schedule.timesteps, disable_corrector=[1, 2])
    assert stepper.disable_corrector == (1, 2)
    hash(jax.tree.structure(stepper))  # jit keys its cache on this
    with pytest.raises(SamplerConfigError, match="order"):
        UniPC(sigmas=schedule.sigmas, timesteps=schedule.timesteps, order=0)
