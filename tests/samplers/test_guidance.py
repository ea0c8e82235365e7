"""Guidance against the diffusers pipelines' formulas, and Wan2.2 A14B expert switching."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import UniPCMultistepScheduler
from diffusers.pipelines.ltx.pipeline_ltx import rescale_noise_cfg

from vidax.zoo.samplers import TwoExperts, cfg, expert_for_timestep, guide, guide_batched, rescale_guidance, unipc_flow_schedule


@pytest.fixture(scope="module")
def predictions():
    rng = np.random.default_rng(0)
    cond = rng.standard_normal((2, 4, 3, 8, 8)).astype(np.float32)
    uncond = (0.7 * cond + 0.5 * rng.standard_normal(cond.shape)).astype(np.float32)
    return cond, uncond


def test_cfg_is_the_pipelines_formula(predictions):
    cond, uncond = predictions
    ref = torch.from_numpy(uncond) + 5.0 * (torch.from_numpy(cond) - torch.from_numpy(uncond))
    np.testing.assert_allclose(cfg(jnp.asarray(cond), jnp.asarray(uncond), 5.0), ref.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cfg(jnp.asarray(cond), jnp.asarray(uncond), 1.0), cond, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("phi", [0.0, 0.7, 1.0])
def test_rescale_matches_diffusers_rescale_noise_cfg(predictions, phi):
    cond, uncond = predictions
    guided = np.array(cfg(jnp.asarray(cond), jnp.asarray(uncond), 6.0))  # writable, for torch
    ref = rescale_noise_cfg(torch.from_numpy(guided), torch.from_numpy(cond), guidance_rescale=phi).numpy()
    ours = rescale_guidance(jnp.asarray(guided), jnp.asarray(cond), phi)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(guide(jnp.asarray(cond), jnp.asarray(uncond), 6.0, rescale=phi), ref, rtol=1e-5, atol=1e-5)
    if phi > 0:  # rescale must do something on this input
        assert np.abs(ref - guided).max() > 1e-2


def test_batched_guidance_takes_cond_first_like_cfg_batch(predictions):
    cond, uncond = predictions
    batched = jnp.concatenate([jnp.asarray(cond), jnp.asarray(uncond)])
    np.testing.assert_allclose(guide_batched(batched, 4.0, rescale=0.7), guide(cond, uncond, 4.0, rescale=0.7), rtol=1e-6)


@pytest.mark.parametrize("boundary", [0.875, 0.9])
def test_wan22_expert_switch_on_the_shipped_grid(boundary):
    """The pipeline's rule `t >= boundary_ratio * num_train_timesteps`, on its own 50-step grid."""
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=12.0)
    scheduler.set_timesteps(50)
    experts = TwoExperts(boundary_ratio=boundary, guidance_scale=4.0, guidance_scale_2=3.0)
    ours = [experts.expert(float(t)) for t in unipc_flow_schedule(50, shift=12.0).timesteps]
    ref = [0 if t >= boundary * scheduler.config.num_train_timesteps else 1 for t in scheduler.timesteps]
    assert ours == ref
    assert 0 < sum(ours) < 50  # both experts run
    assert [experts.scale(float(t)) for t in scheduler.timesteps] == [4.0 if e == 0 else 3.0 for e in ref]


def test_expert_boundary_edges():
    assert expert_for_timestep(875.0, 0.875) == 0  # at the boundary the high-noise expert still runs
    assert expert_for_timestep(874.999, 0.875) == 1
    assert expert_for_timestep(10.0, None) == 0  # single-expert models
    assert TwoExperts(boundary_ratio=0.9, guidance_scale=5.0).scale(100.0) == 5.0
