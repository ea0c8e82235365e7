"""The pure pipeline pieces against the diffusers pipelines' own methods: packing, normalisation, posterior
samples, step grids (LTXPipeline's dynamic shift, LTXConditionPipeline's linear-quadratic timesteps and
denoise strength), first-frame I2V latents, LTXConditionPipeline's conditioning (frame 0, a keyframe image
and a video at later frames: extra tokens, mask, pixel coordinates), its per-token Euler step and
conditioning noise, and the multi-scale pass's AdaIN and tone mapping.

Random draws are replayed: a seeded torch generator drives the reference, and the same draws, made in the
reference's order from a fresh generator of the same seed, are passed to ours.
"""

from __future__ import annotations

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
from diffusers.pipelines.ltx.pipeline_ltx import LTXPipeline, calculate_shift
from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXConditionPipeline, linear_quadratic_schedule, retrieve_timesteps
from diffusers.pipelines.ltx.pipeline_ltx_image2video import LTXImageToVideoPipeline
from diffusers.pipelines.ltx.pipeline_ltx_latent_upsample import LTXLatentUpsamplePipeline

from vidax.zoo.ltx_video import latents as L
from vidax.zoo.ltx_video.config import SchedulerConfig

from .references.ltx_spec_fixtures import vae_reference

# diffusers' Lightricks/LTX-Video scheduler_config.json (0.9.0 / 0.9.1; ltx_video/utils/diffusers_config_mapping.py)
SCHEDULER_090 = {"_class_name": "FlowMatchEulerDiscreteScheduler", "base_image_seq_len": 1024, "base_shift": 0.95,
                 "invert_sigmas": False, "max_image_seq_len": 4096, "max_shift": 2.05, "num_train_timesteps": 1000,
                 "shift": 1.0, "shift_terminal": 0.1, "use_beta_sigmas": False, "use_dynamic_shifting": True,
                 "use_exponential_sigmas": False, "use_karras_sigmas": False}
STATIC = {**SCHEDULER_090, "use_dynamic_shifting": False, "shift_terminal": None}


def test_pack_unpack_match_reference():
    x = torch.randn(2, 6, 4, 6, 8)
    for p, pt in ((1, 1), (2, 2)):
        packed = LTXPipeline._pack_latents(x, p, pt)
        ours = L.pack(x.numpy(), p, pt)
        np.testing.assert_array_equal(ours, packed.numpy())
        np.testing.assert_array_equal(np.asarray(L.pack(jnp.asarray(x.numpy()), p, pt)), packed.numpy())
        back = LTXPipeline._unpack_latents(packed, 4 // pt, 6 // p, 8 // p, p, pt)
        np.testing.assert_array_equal(L.unpack(ours, 4 // pt, 6 // p, 8 // p, p, pt), back.numpy())
        np.testing.assert_array_equal(back.numpy(), x.numpy())


def test_normalize_and_posterior_match_reference():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 4, 3, 2, 2, generator=gen)
    mean, std = torch.randn(4, generator=gen), torch.rand(4, generator=gen) + 0.5
    for scaling in (1.0, 0.7):
        np.testing.assert_allclose(L.normalize(z.numpy(), mean.numpy(), std.numpy(), scaling),
                                   LTXPipeline._normalize_latents(z, mean, std, scaling).numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(L.denormalize(z.numpy(), mean.numpy(), std.numpy(), scaling),
                                   LTXPipeline._denormalize_latents(z, mean, std, scaling).numpy(), rtol=1e-6, atol=1e-6)
    moments = torch.randn(2, 8, 3, 2, 2, generator=gen) * 20  # log-variances beyond the clamp too
    expected = DiagonalGaussianDistribution(moments).sample(torch.Generator().manual_seed(5))
    noise = torch.randn(2, 4, 3, 2, 2, generator=torch.Generator().manual_seed(5))
    np.testing.assert_allclose(L.sample_posterior(moments.numpy(), noise.numpy()), expected.numpy(), rtol=1e-6, atol=1e-6)


# --- step grids ------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [SCHEDULER_090, STATIC, {**STATIC, "shift": 3.0, "shift_terminal": 0.1}],
                         ids=["dynamic", "static", "shifted"])
@pytest.mark.parametrize("steps, tokens", [(30, 2 * 22 * 38), (8, 16 * 22 * 38)])
def test_pipeline_schedule_matches_ltx_pipeline(config, steps, tokens):
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(config)
    mu = calculate_shift(tokens, scheduler.config.get("base_image_seq_len", 256), scheduler.config.get("max_image_seq_len", 4096),
                         scheduler.config.get("base_shift", 0.5), scheduler.config.get("max_shift", 1.15))
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    ours = L.pipeline_schedule(SchedulerConfig.from_hf_config(config), steps, tokens)
    np.testing.assert_allclose(ours.timesteps, scheduler.timesteps.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours.sigmas, scheduler.sigmas.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("config", [STATIC, {**STATIC, "shift_terminal": 0.1}], ids=["static", "terminal"])
@pytest.mark.parametrize("steps, timesteps, strength", [
    (30, None, 1.0), (10, None, 0.4), (None, [1000, 993, 987, 981, 975, 909, 725, 0.03], 1.0),
    (None, [1000, 909, 725, 421, 0], 0.999)], ids=["dev", "refine", "distilled", "distilled-refine"])
def test_condition_schedule_matches_condition_pipeline(config, steps, timesteps, strength):
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(config)
    given = timesteps if timesteps is not None else linear_quadratic_schedule(steps) * 1000
    ts, n = retrieve_timesteps(scheduler, None if timesteps is not None else steps, "cpu", given)
    sigmas = scheduler.sigmas
    if strength < 1:
        sigmas, ts, n = LTXConditionPipeline.get_timesteps(None, sigmas, ts, n, strength)
    ours = L.condition_schedule(SchedulerConfig.from_hf_config(config), steps, timesteps, strength)
    np.testing.assert_allclose(ours.timesteps, ts.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours.sigmas, sigmas.numpy(), rtol=1e-6, atol=1e-7)
    assert ours.num_steps == n


def test_condition_schedule_refuses_dynamic_shift():
    with pytest.raises(ValueError, match="use_dynamic_shifting"):
        L.condition_schedule(SchedulerConfig.from_hf_config(SCHEDULER_090), 30)
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(SCHEDULER_090)
    with pytest.raises(ValueError, match="mu"):  # the reference fails the same way
        retrieve_timesteps(scheduler, 30, "cpu", linear_quadratic_schedule(30) * 1000)


def test_official_schedule():
    """Official grids: given sigma lists as is; linear-quadratic like diffusers' copy; SD3 shift as diffusers'
    dynamic shift; skipped steps cut from both ends with the last step then going to 0."""
    static = SchedulerConfig(sampler="linear_quadratic", dynamic_shift=None, shift_terminal=None)
    distilled = [1.0, 0.9937, 0.9875, 0.9812, 0.975, 0.9094, 0.725]
    ours = L.official_schedule(static, 1000, timesteps=distilled)
    np.testing.assert_array_equal(ours.sigmas, np.array(distilled + [0.0], np.float32))
    np.testing.assert_allclose(ours.timesteps, np.array(distilled, np.float32) * 1000, rtol=1e-7)
    dev = L.official_schedule(static, 1000, num_steps=30)
    np.testing.assert_allclose(dev.sigmas[:-1], linear_quadratic_schedule(30).numpy(), rtol=1e-6)
    first, second = (L.official_schedule(static, 1000, num_steps=30, skip_final=3),
                     L.official_schedule(static, 1000, num_steps=30, skip_initial=17))
    np.testing.assert_array_equal(first.sigmas, np.append(dev.sigmas[:27], 0))
    np.testing.assert_array_equal(second.sigmas, dev.sigmas[17:])
    sd3 = SchedulerConfig(sampler="uniform")  # the 0.9.0 / 0.9.1 official scheduler: SD3 shift, terminal 0.1
    reference = FlowMatchEulerDiscreteScheduler.from_config(SCHEDULER_090)
    reference.set_timesteps(sigmas=np.linspace(1.0, 1 / 20, 20), mu=sd3.mu(4096))
    np.testing.assert_allclose(L.official_schedule(sd3, 4096, num_steps=20).sigmas, reference.sigmas.numpy(), rtol=1e-5)


# --- conditioning ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vae():
    return vae_reference("0.9.5")


def _fake_pipeline(cls, vae):
    return SimpleNamespace(vae=vae, vae_spatial_compression_ratio=32, vae_temporal_compression_ratio=8,
                           transformer_spatial_patch_size=1, transformer_temporal_patch_size=1,
                           _pack_latents=cls._pack_latents, _normalize_latents=cls._normalize_latents,
                           _prepare_video_ids=getattr(cls, "_prepare_video_ids", None),
                           _scale_video_ids=getattr(cls, "_scale_video_ids", None))


def _our_condition_latents(vae, media, gen):
    """Encode with the reference VAE, then our posterior draw and normalisation (the draw from `gen`)."""
    with torch.no_grad():
        moments = vae.encode(media).latent_dist.parameters.numpy()
    noise = torch.randn(moments.shape[0], moments.shape[1] // 2, *moments.shape[2:], generator=gen).numpy()
    return L.normalize(L.sample_posterior(moments, noise), vae.latents_mean.detach().numpy(), vae.latents_std.detach().numpy())


def test_image_to_video_latents_match_reference(vae):
    images = torch.rand(2, 3, 64, 96, generator=torch.Generator().manual_seed(3)) * 2 - 1
    with torch.no_grad():
        want, want_mask = LTXImageToVideoPipeline.prepare_latents(
            _fake_pipeline(LTXImageToVideoPipeline, vae), images, 2, 8, 64, 96, 17, torch.float32, "cpu",
            torch.Generator().manual_seed(11))
    gen = torch.Generator().manual_seed(11)  # reference order: each image's posterior draw, then the noise
    image_latents = np.concatenate([_our_condition_latents(vae, img[None, :, None], gen) for img in images])
    noise = torch.randn(2, 8, 3, 2, 3, generator=gen).numpy()
    tokens, mask = L.image_to_video_latents(image_latents, noise)
    np.testing.assert_allclose(tokens, want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mask, want_mask.numpy())
    t = np.asarray(L.image_to_video_timestep(jnp.array([500.0, 500.0]), mask))
    np.testing.assert_array_equal(t, (torch.tensor(500.0).expand(2).unsqueeze(-1) * (1 - want_mask)).numpy())


CASES = {
    "first_frame": [(0, 1.0, "image")],
    "keyframes": [(0, 1.0, "image"), (16, 0.8, "image")],
    "video_extension": [(0, 0.9, "video"), (24, 1.0, "clip")],  # the clip trimmed to fit, as the pipeline does
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_prepare_conditioned_matches_condition_pipeline(vae, case):
    gen = torch.Generator().manual_seed(4)
    media = {"image": torch.rand(2, 3, 1, 64, 96, generator=gen) * 2 - 1,
             "video": torch.rand(2, 3, 25, 64, 96, generator=gen) * 2 - 1}
    media["clip"] = media["video"][:, :, : L.trim_conditioning_frames(24, 25, 41)]
    items = CASES[case]
    pipe = _fake_pipeline(LTXConditionPipeline, vae)
    with torch.no_grad():
        want_tokens, want_mask, want_ids, want_extra = LTXConditionPipeline.prepare_latents(
            pipe, [media[k] for _, _, k in items], [s for _, s, _ in items], [f for f, _, _ in items], batch_size=2,
            num_channels_latents=8, height=64, width=96, num_frames=41, generator=torch.Generator().manual_seed(21),
            device="cpu", dtype=torch.float32)
    gen = torch.Generator().manual_seed(21)  # reference order: noise; per item its posterior draw, then its blend noise
    noise = torch.randn(2, 8, 6, 2, 3, generator=gen).numpy()
    conditions = []
    for frame, strength, kind in items:
        latents = _our_condition_latents(vae, media[kind], gen)
        blend = None
        if frame:
            blend = torch.randn(2, 8, min(latents.shape[2], 2), 2, 3, generator=gen).numpy()
        conditions.append(L.Condition(latents, frame, strength, blend))
    ours = L.prepare_conditioned(noise, conditions)
    assert ours.num_extra == want_extra
    np.testing.assert_allclose(ours.tokens, want_tokens.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours.mask, want_mask.numpy())
    np.testing.assert_array_equal(ours.pixel_ids, want_ids.numpy())


def test_condition_step_pieces_match_reference():
    """Per-token timesteps, the per-token Euler step with kept conditioning tokens, and the conditioning noise."""
    gen = torch.Generator().manual_seed(9)
    b, s = 2, 12
    mask = torch.zeros(b, s)
    mask[:, :4] = 1.0
    mask[:, 4:6] = 0.6
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(STATIC)
    retrieve_timesteps(scheduler, 8, "cpu", linear_quadratic_schedule(8) * 1000)
    tokens, init = torch.randn(b, s, 4, generator=gen), torch.randn(b, s, 4, generator=gen)
    for t in scheduler.timesteps[[0, 3, 6]]:
        timestep = torch.min(t.expand(b).unsqueeze(-1).float(), (1 - mask) * 1000.0)
        np.testing.assert_array_equal(np.asarray(L.condition_timestep(jnp.asarray(t.numpy()), jnp.asarray(mask.numpy()))),
                                      timestep.numpy())
        velocity = torch.randn(b, s, 4, generator=gen)
        stepped = scheduler.step(-velocity, t, tokens, per_token_timesteps=timestep, return_dict=False)[0]
        want = torch.where((t / 1000 - 1e-6 < (1.0 - mask)).unsqueeze(-1), stepped, tokens)
        ours = L.per_token_step(scheduler.sigmas.numpy(), t.numpy(), jnp.asarray(tokens.numpy()), jnp.asarray(velocity.numpy()),
                                jnp.asarray(timestep.numpy()), jnp.asarray(mask.numpy()))
        np.testing.assert_allclose(np.asarray(ours), want.numpy(), rtol=1e-6, atol=1e-6)
        noisy = LTXConditionPipeline.add_noise_to_image_conditioning_latents(
            t / 1000.0, init, tokens, 0.15, mask, torch.Generator().manual_seed(int(t)))
        noise = torch.randn(b, s, 4, generator=torch.Generator().manual_seed(int(t)))
        ours = L.add_conditioning_noise(t.numpy(), jnp.asarray(init.numpy()), jnp.asarray(tokens.numpy()), 0.15,
                                        jnp.asarray(mask.numpy()), jnp.asarray(noise.numpy()))
        np.testing.assert_allclose(np.asarray(ours), noisy.numpy(), rtol=1e-6, atol=1e-6)
        scheduler._step_index = None  # the reference counts steps; these calls jump around the grid


def test_trim_conditioning_frames_matches_reference():
    pipe = SimpleNamespace(vae_temporal_compression_ratio=8)
    for start, frames, target in ((0, 30, 121), (100, 40, 121), (24, 9, 41)):
        assert L.trim_conditioning_frames(start, frames, target) == LTXConditionPipeline.trim_conditioning_sequence(
            pipe, start, frames, target)


# --- multi-scale and guidance ----------------------------------------------------------------


def test_adain_and_tone_map_match_upsample_pipeline():
    gen = torch.Generator().manual_seed(2)
    x, ref = torch.randn(2, 4, 3, 4, 5, generator=gen) * 2, torch.randn(2, 4, 3, 2, 3, generator=gen) + 0.5
    for factor in (1.0, 0.4):
        want = LTXLatentUpsamplePipeline.adain_filter_latent(None, x, ref, factor)
        np.testing.assert_allclose(L.adain(x.numpy(), ref.numpy(), factor), want.numpy(), rtol=1e-5, atol=1e-5)
    want = LTXLatentUpsamplePipeline.tone_map_latents(None, x, 0.6)
    np.testing.assert_allclose(L.tone_map(x.numpy(), 0.6), want.numpy(), rtol=1e-6, atol=1e-6)


def test_cfg_star_projects_out_the_unconditional_direction():
    rng = np.random.default_rng(0)
    cond, uncond = jnp.asarray(rng.normal(size=(2, 6, 4))), jnp.asarray(rng.normal(size=(2, 6, 4)))
    scaled = np.asarray(L.cfg_star(cond, uncond))
    residual = (np.asarray(cond) - scaled).reshape(2, -1)
    np.testing.assert_allclose(np.sum(residual * np.asarray(uncond).reshape(2, -1), axis=1), 0, atol=1e-5)
    ratio = scaled / np.asarray(uncond)  # a per-sample multiple of the unconditional prediction
    np.testing.assert_allclose(ratio, np.broadcast_to(ratio[:, :1, :1], ratio.shape), rtol=1e-5)


def test_latent_grid():
    assert L.latent_grid(121, 704, 1216) == (16, 22, 38)
    with pytest.raises(ValueError, match="8k\\+1"):
        L.latent_grid(120, 704, 1216)


def test_official_checkpoints_before_0_9_5_place_frames_without_the_causal_fix():
    """The official `latent_to_pixel_coords(causal_fix=False)` (0.9.0 / 0.9.1 configs have no
    `causal_temporal_positioning`): latent frame f sits at pixel frame 8f (+ the condition's index)."""
    from vidax.zoo.ltx_video import rope

    ids = rope.latent_ids(3, 1, 2)
    np.testing.assert_array_equal(rope.scale_ids(ids, causal_fix=False)[0], [0, 0, 8, 8, 16, 16])
    np.testing.assert_array_equal(rope.scale_ids(ids, frame_index=5, causal_fix=False)[0], [5, 5, 13, 13, 21, 21])
    np.testing.assert_array_equal(rope.scale_ids(ids)[0], [0, 0, 1, 1, 9, 9])
