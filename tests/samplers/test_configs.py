"""Steppers built from diffusers scheduler configs reproduce those schedulers end to end."""

import jax
import numpy as np
import pytest
import torch
from diffusers import (
    CogVideoXDDIMScheduler,
    CogVideoXDPMScheduler,
    DDIMScheduler,
    DPMSolverMultistepScheduler,
    FlowMatchEulerDiscreteScheduler,
    LTXEulerAncestralRFScheduler,
    UniPCMultistepScheduler,
)
from diffusers.schedulers import scheduling_dpm_cogvideox, scheduling_ltx_euler_ancestral_rf

from vidax.zoo.samplers import SamplerConfigError, step_noise, stepper_from_config

from .reference import (
    NUM_STEPS,
    SHAPE,
    assert_grid_equal,
    assert_trajectories_close,
    diffusers_trajectory,
    fake_inputs,
    our_trajectory,
)
from .test_ddim import COGVIDEOX
from .test_flow_euler import LTX_CONFIG, LTX_SEQ_LEN

FLOW = dict(prediction_type="flow_prediction", use_flow_sigmas=True)
HUNYUAN_SIGMAS = np.linspace(1.0, 0.0, NUM_STEPS + 1)[:-1]

# name -> (scheduler, set_timesteps kwargs, stepper_from_config kwargs)
CASES = {
    "wan-unipc": (UniPCMultistepScheduler(**FLOW, flow_shift=3.0), {}, {}),
    "cosmos2.5-unipc-karras": (
        UniPCMultistepScheduler(**FLOW, use_karras_sigmas=True, sigma_min=0.01, sigma_max=200.0),
        {},
        {},
    ),
    "unipc-dynamic": (UniPCMultistepScheduler(**FLOW, use_dynamic_shifting=True), dict(mu=1.2), dict(mu=1.2)),
    "hunyuan-flow-euler": (
        FlowMatchEulerDiscreteScheduler(shift=7.0),
        dict(sigmas=HUNYUAN_SIGMAS),
        dict(sigmas=HUNYUAN_SIGMAS),
    ),
    "ltx-flow-euler-seq-len": (
        FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, **LTX_CONFIG),
        None,  # filled in by the test: mu from the same seq len through the pipeline's calculate_shift
        dict(seq_len=LTX_SEQ_LEN, sigmas=np.linspace(1.0, 1 / NUM_STEPS, NUM_STEPS)),
    ),
    "dpm-flow": (DPMSolverMultistepScheduler(**FLOW, flow_shift=3.0), {}, {}),
    "dpm-flow-mu": (DPMSolverMultistepScheduler(**FLOW, use_dynamic_shifting=True), dict(mu=1.1), dict(mu=1.1)),
    "cogvideox-2b-ddim": (CogVideoXDDIMScheduler(**COGVIDEOX, snr_shift_scale=3.0), {}, {}),
    "cogvideox-5b-ddim": (CogVideoXDDIMScheduler(**COGVIDEOX, snr_shift_scale=1.0), {}, {}),
    "ddim-v-zero-snr": (
        DDIMScheduler(
            prediction_type="v_prediction", rescale_betas_zero_snr=True, timestep_spacing="trailing", clip_sample=False
        ),
        {},
        {},
    ),
    "ddim-eps-no-alpha-one": (DDIMScheduler(clip_sample=False, set_alpha_to_one=False, steps_offset=1), {}, {}),
}


def _config(scheduler) -> dict:
    return {"_class_name": type(scheduler).__name__, **scheduler.config}


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_builds_the_reference_sampler(name):
    from diffusers.pipelines.ltx.pipeline_ltx import calculate_shift

    scheduler, set_kwargs, ours_kwargs = CASES[name]
    if set_kwargs is None:
        mu = calculate_shift(LTX_SEQ_LEN, 1024, 4096, 0.95, 2.05)
        set_kwargs = dict(sigmas=ours_kwargs["sigmas"], mu=mu)
    stepper = stepper_from_config(_config(scheduler), NUM_STEPS, **ours_kwargs)

    def reset():
        scheduler.set_timesteps(None if "sigmas" in set_kwargs else NUM_STEPS, **set_kwargs)
        return scheduler

    assert_grid_equal(stepper.timesteps, reset().timesteps, "timesteps")
    latents, eps = fake_inputs()
    assert_trajectories_close(our_trajectory(stepper, latents, eps), diffusers_trajectory(reset(), latents, eps))


def test_stochastic_configs_with_given_noise(monkeypatch):
    key = jax.random.key(11)
    noises = [np.asarray(step_noise(key, i, SHAPE)) for i in range(NUM_STEPS)]
    current = {}
    fake_randn = lambda shape, **_: torch.from_numpy(noises[current["i"]].copy())  # noqa: E731
    monkeypatch.setattr(scheduling_ltx_euler_ancestral_rf, "randn_tensor", fake_randn)
    monkeypatch.setattr(scheduling_dpm_cogvideox, "randn_tensor", fake_randn)
    latents, eps = fake_inputs()

    sigmas = np.append(np.linspace(1.0, 1 / NUM_STEPS, NUM_STEPS), 0.0).astype(np.float32)
    ltx = LTXEulerAncestralRFScheduler(eta=0.5)  # as in test_flow_euler: reuses its compiled step
    ltx.set_timesteps(sigmas=torch.from_numpy(sigmas))

    def ltx_step(i, t, model_output, x):
        current["i"] = i
        return ltx.step(model_output, t, x, return_dict=False)[0]

    ref = diffusers_trajectory(ltx, latents, eps, timesteps=ltx.timesteps[:-1], step=ltx_step)
    stepper = stepper_from_config(_config(ltx), NUM_STEPS, sigmas=sigmas)
    assert_trajectories_close(our_trajectory(stepper, latents, eps, key=key), ref)

    cog = CogVideoXDPMScheduler(**COGVIDEOX, snr_shift_scale=1.0)
    cog.set_timesteps(NUM_STEPS)
    old = {"x0": None}

    def cog_step(i, t, model_output, x):
        current["i"] = i
        back = cog.timesteps[i - 1] if i > 0 else None
        x, old["x0"] = cog.step(model_output, old["x0"], t, back, x, return_dict=False)
        return x

    ref = diffusers_trajectory(cog, latents, eps, step=cog_step)
    stepper = stepper_from_config(_config(cog), NUM_STEPS)
    assert_trajectories_close(our_trajectory(stepper, latents, eps, key=key), ref)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"_class_name": "EulerDiscreteScheduler"}, "not supported"),
        ({"_class_name": "UniPCMultistepScheduler", "prediction_type": "epsilon"}, "flow mode only"),
        ({"_class_name": "UniPCMultistepScheduler", **FLOW, "thresholding": True}, "thresholding"),
        ({"_class_name": "DDIMScheduler", "clip_sample": True}, "clip_sample"),
        ({"_class_name": "FlowMatchEulerDiscreteScheduler", "use_dynamic_shifting": True}, "seq_len"),
        ({"_class_name": "FlowMatchEulerDiscreteScheduler", "invert_sigmas": True}, "invert_sigmas"),
        ({"_class_name": "DPMSolverMultistepScheduler", **FLOW, "algorithm_type": "sde-dpmsolver++"}, "algorithm"),
        ({"_class_name": "DDIMScheduler", "clip_sample": False, "beta_schedule": "squaredcos_cap_v2"}, "beta_schedule"),
    ],
)
def test_unsupported_configs_are_refused_by_name(config, message):
    with pytest.raises(SamplerConfigError, match=message):
        stepper_from_config(config, NUM_STEPS)


def test_unipc_takes_a_pipelines_own_sigmas():
    """`set_timesteps(sigmas=...)` on a flow-mode UniPC (Cosmos3-Edge's native schedule): shifted as the
    default grid is, same timesteps and sigmas as diffusers."""
    config = {"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction", "use_flow_sigmas": True,
              "flow_shift": 3.0}
    base = np.linspace(0.98, 0.05, 6)
    reference = UniPCMultistepScheduler(**{k: v for k, v in config.items() if k != "_class_name"})
    reference.set_timesteps(sigmas=base.copy(), device="cpu")
    ours = stepper_from_config(config, 6, sigmas=base)
    np.testing.assert_allclose(ours.timesteps, reference.timesteps.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours.sigmas, reference.sigmas.numpy(), rtol=1e-6)
    assert not np.allclose(ours.sigmas[:-1], stepper_from_config(config, 6).sigmas[:-1])
