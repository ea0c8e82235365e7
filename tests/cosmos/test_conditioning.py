"""Cosmos-Predict2.5's pipeline pieces against `Cosmos2_5_PredictBasePipeline` itself.

`prepare_latents` (Wan2.1 VAE encode of the conditioning video through `vidax.zoo.parts.wan_vae`, latent
normalisation, condition masks) for text-, image- and video-to-world; and a whole denoising loop
(output_type="latent", guidance 7, per-frame sigmas, ground-truth velocity on conditioning frames)
composed of our pieces, our DiT and the shared UniPC stepper built from the shipped scheduler
config, against the pipeline run on the same tiny perturbed models and initial noise.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
from diffusers.pipelines.cosmos import pipeline_cosmos2_5_predict as reference_module
from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import (
    Cosmos2_5_PredictBasePipeline,
)
from PIL import Image
from vidax.translator import convert, load_spec
from vidax.zoo.cosmos import CosmosTransformer, CosmosTransformerConfig
from vidax.zoo.bases import cosmos_base
from vidax.zoo.cosmos import conditioning as cond
from vidax.zoo.samplers import stepper_from_config
from vidax.zoo.parts.wan_vae import WanVAE, WanVAEConfig

from tests.oracle import perturb, save_diffusers, to_np, unflatten

from .cosmos_spec_fixtures import dit_reference
from .helpers import install_torchvision_standin, randn

TINY_VAE = dict(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, temperal_downsample=[False, True, True])
# the scheduler diffusers' convert_cosmos_to_diffusers.py ships with Predict2.5
SCHEDULER = dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction", sigma_max=200.0,
                 sigma_min=0.01)
FRAMES, HEIGHT, WIDTH = 9, 32, 32  # 3 latent frames of 4 x 4
ATOL = 2e-5


class NoSafetyChecker:
    """The pipeline refuses `safety_checker=None`; vidax has no guardrail (README)."""

    def to(self, *args, **kwargs):
        return self


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    install_torchvision_standin()
    reference_module.torchvision = types.SimpleNamespace(transforms=types.SimpleNamespace(
        functional=types.SimpleNamespace(to_tensor=lambda img: torch.from_numpy(
            np.asarray(img, np.float32) / 255.0).permute(2, 0, 1))))
    root = tmp_path_factory.mktemp("cosmos_pipe")
    torch.manual_seed(0)
    vae = perturb(AutoencoderKLWan(**TINY_VAE), seed=1)
    vae.save_pretrained(root / "vae")
    dit = dit_reference(seed=2, in_channels=17, out_channels=16, extra_pos_embed_type=None)
    save_diffusers(dit, root / "transformer")
    pipe = Cosmos2_5_PredictBasePipeline(text_encoder=None, tokenizer=None, transformer=dit, vae=vae,
                                         scheduler=UniPCMultistepScheduler(**SCHEDULER), safety_checker=NoSafetyChecker())
    our_vae = WanVAE(WanVAEConfig.from_hf_config(dict(vae.config)))
    vae_params = unflatten(convert(load_spec("wan/vae"), root, our_vae.param_shapes(), dtype="float32"))
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(dit.config)))
    params = unflatten(convert(load_spec("cosmos/transformer"), root, model.param_shapes(), dtype="float32"))
    return pipe, our_vae, vae_params, model, params


def _image():
    pixels = (np.random.default_rng(3).random((HEIGHT, WIDTH, 3)) * 255).astype(np.uint8)
    return Image.fromarray(pixels), pixels.astype(np.float32).transpose(2, 0, 1) / 127.5 - 1


def _video():
    return np.random.default_rng(4).uniform(-1, 1, (3, 7, HEIGHT, WIDTH)).astype(np.float32)


def _our_condition(setup, mode: str, num_latent: int = 2):
    """`(cond_latents, indicator, mask)` from our pieces for text-, image- or video-to-world."""
    _, vae, vae_params, _, _ = setup
    shape = cond.latent_shape(1, FRAMES, HEIGHT, WIDTH)
    if mode == "t2v":
        indicator, mask = cond.condition_mask(shape, 0)
        return np.zeros(shape, np.float32), indicator, mask
    if mode == "i2v":
        video, frames_in = cond.image_conditioning_video(_image()[1], FRAMES), 1
    else:
        video, frames_in = cond.video_conditioning_video(_video(), FRAMES, num_latent)
    cfg = vae.config
    latents = cosmos_base.normalize(vae.encode(vae_params, jnp.asarray(video)), cfg.latents_mean, cfg.latents_std)
    indicator, mask = cond.condition_mask(shape, cond.conditional_latent_frames(frames_in))
    return np.asarray(latents), indicator, mask


@pytest.mark.parametrize("mode,num_latent", [("t2v", 0), ("i2v", 1), ("v2v", 2), ("v2v", 1)],
                         ids=["t2v", "i2v", "v2v_2", "v2v_1"])
def test_prepare_latents(setup, mode, num_latent):
    pipe = setup[0]
    video = None
    frames_in = 0
    if mode == "i2v":
        video, frames_in = torch.from_numpy(cond.image_conditioning_video(_image()[1], FRAMES)), 1
    elif mode == "v2v":
        clip = torch.from_numpy(_video())[None]
        keep = 4 * (num_latent - 1) + 1  # the pipeline's __call__: last frames, padded with the last one
        clip = clip[:, :, -keep:]
        video = torch.cat([clip, clip[:, :, -1:].repeat(1, 1, FRAMES - keep, 1, 1)], dim=2)
        frames_in = keep
        ours_video, ours_in = cond.video_conditioning_video(_video(), FRAMES, num_latent)
        np.testing.assert_array_equal(ours_video, video.numpy())
        assert ours_in == keep
    noise = randn(*cond.latent_shape(1, FRAMES, HEIGHT, WIDTH), seed=5)
    with torch.no_grad():
        _, ref_cond, ref_mask, ref_indicator = Cosmos2_5_PredictBasePipeline.prepare_latents(
            pipe, video, 1, 16, HEIGHT, WIDTH, frames_in, FRAMES, True, torch.float32, "cpu", None, noise)
    cond_latents, indicator, mask = _our_condition(setup, mode, num_latent)
    np.testing.assert_array_equal(indicator, ref_indicator.numpy())
    np.testing.assert_array_equal(mask, ref_mask.numpy())
    np.testing.assert_allclose(cond_latents, ref_cond.numpy(), atol=1e-5, rtol=1e-5)


def test_latent_denormalisation_before_decode(setup):
    pipe = setup[0]
    z = randn(1, 16, 2, 2, 2, seed=6)
    expected = z / pipe.latents_std + pipe.latents_mean  # the pipeline's decode path (latents_std = 1 / std)
    ours = cosmos_base.denormalize(jnp.asarray(z.numpy()), pipe.vae.config.latents_mean, pipe.vae.config.latents_std)
    np.testing.assert_allclose(np.asarray(ours), expected.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["t2v", "i2v"])
def test_denoising_loop_matches_the_pipeline(setup, mode):
    pipe, _, _, model, params = setup
    steps, guidance = 3, 7.0
    noise = randn(*cond.latent_shape(1, FRAMES, HEIGHT, WIDTH), seed=7)
    text, negative = randn(1, 5, 24, seed=8), randn(1, 5, 24, seed=9)
    image = _image()[0] if mode == "i2v" else None
    with torch.no_grad():
        expected = pipe(image=image, prompt_embeds=text, negative_prompt_embeds=negative, height=HEIGHT, width=WIDTH,
                        num_frames=FRAMES, num_inference_steps=steps, guidance_scale=guidance, latents=noise.clone(),
                        output_type="latent", return_dict=False)[0]

    cond_latents, indicator, mask = _our_condition(setup, mode)
    stepper = stepper_from_config({**pipe.scheduler.config, "_class_name": "UniPCMultistepScheduler"}, steps)
    np.testing.assert_allclose(np.asarray(stepper.sigmas), pipe.scheduler.sigmas.numpy(), rtol=1e-6)
    dit = jax.jit(model.__call__)
    x0 = jnp.asarray(noise.numpy())
    embeds = [jnp.asarray(to_np(t)) for t in (text, negative)]
    state = stepper.init(x0)
    for i in range(steps):
        timestep = cond.frame_timesteps(indicator, stepper.sigmas[i])  # sigma in [0, 1], not timesteps / 1000
        x_in = cond.model_input(state["latents"], cond_latents, mask)
        v_cond, v_uncond = (cond.conditioned_velocity(dit(params, x_in, timestep, e, jnp.asarray(mask)), x0,
                                                      cond_latents, mask) for e in embeds)
        state, _ = stepper.step(state, cond.guide(v_cond, v_uncond, guidance), jnp.int32(i))
    # guidance 7 weighs the DiT outputs 8x and 7x: fp32 differences ~1e-6 grow to ~1e-5 over 3 steps
    np.testing.assert_allclose(np.asarray(state["latents"]), expected.numpy(), atol=3e-5, rtol=1e-5)


def test_frame_timesteps_without_per_frame_conditioning():
    indicator, _ = cond.condition_mask((2, 16, 3, 1, 1), [1, 0])
    np.testing.assert_allclose(np.asarray(cond.frame_timesteps(indicator, 0.5)), [[1e-4, 0.5, 0.5], [0.5, 0.5, 0.5]])
    np.testing.assert_allclose(np.asarray(cond.frame_timesteps(indicator, 0.5, -1)), np.full((2, 3), 0.5))


def test_match_num_frames_follows_the_pipeline(setup):
    pipe = setup[0]
    video = randn(1, 3, 5, 2, 2, seed=10)
    for target in (5, 17, 12):
        expected = Cosmos2_5_PredictBasePipeline._match_num_frames(pipe, video, target)
        np.testing.assert_array_equal(cond.match_num_frames(video.numpy(), target), expected.numpy())


def test_bad_requests_fail_clearly():
    with pytest.raises(ValueError, match="multiples of 16"):
        cond.latent_shape(1, 93, 700, 1280)
    with pytest.raises(ValueError, match="1 or 2"):
        cond.video_conditioning_video(_video(), FRAMES, 3)
    with pytest.raises(ValueError, match="at least 5"):
        cond.video_conditioning_video(_video()[:, :3], FRAMES, 2)
