"""The pure pipeline pieces against `LTX2Pipeline` / `LTX2ImageToVideoPipeline` themselves: packing and
normalisation (their static methods), the `--audio-latents` convention, the sampler inputs, the guidance
rows and the guidance combination (a real two-step pipeline run with CFG, STG and modality guidance,
its DiT calls and scheduler steps recorded), and I2V's initial latents and per-token timestep."""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.zoo.ltx2 import guidance, latents as lat
from vidax.zoo.samplers.configs import stepper_from_config

from .references.ltx2_spec_fixtures import TINY_VAE, dit_reference, vae_reference

SCHEDULER = dict(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                 max_image_seq_len=4096, shift_terminal=0.1)  # diffusers' convert_ltx2_to_diffusers.py
ATOL = 2e-5


def np_(t):
    return t.detach().float().numpy()


def test_pack_and_normalise_equal_the_pipeline():
    from diffusers import LTX2Pipeline as P

    g = torch.Generator().manual_seed(0)
    video = torch.randn(2, 6, 3, 4, 5, generator=g)
    audio = torch.randn(2, 4, 7, 8, generator=g)
    mean, std = torch.randn(6, generator=g), torch.rand(6, generator=g) + 0.5
    amean, astd = torch.randn(32, generator=g), torch.rand(32, generator=g) + 0.5
    packed = lat.pack_video(jnp.asarray(np_(video)))
    np.testing.assert_array_equal(packed, np_(P._pack_latents(video)))
    np.testing.assert_array_equal(lat.unpack_video(packed, (3, 4, 5)), np_(video))
    apacked = lat.pack_audio(jnp.asarray(np_(audio)))
    np.testing.assert_array_equal(apacked, np_(P._pack_audio_latents(audio)))
    np.testing.assert_array_equal(lat.unpack_audio(apacked, 8), np_(P._unpack_audio_latents(P._pack_audio_latents(audio), 7, 8)))
    j = lambda t: jnp.asarray(np_(t))  # noqa: E731
    np.testing.assert_allclose(lat.normalize_video(j(video), j(mean), j(std), 0.7),
                               np_(P._normalize_latents(video, mean, std, 0.7)), atol=1e-6)
    np.testing.assert_allclose(lat.denormalize_video(j(video), j(mean), j(std), 0.7),
                               np_(P._denormalize_latents(video, mean, std, 0.7)), atol=1e-6)
    tokens = P._pack_audio_latents(audio)
    np.testing.assert_allclose(lat.normalize_audio(j(tokens), j(amean), j(astd)),
                               np_(P._normalize_audio_latents(tokens, amean, astd)), atol=1e-6)
    np.testing.assert_allclose(lat.denormalize_audio(j(tokens), j(amean), j(astd)),
                               np_(P._denormalize_audio_latents(tokens, amean, astd)), atol=1e-6)


def test_schedule_inputs_equal_the_pipeline_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    tokens, steps = 2 * 22 * 38, 8
    config = {"_class_name": type(sched).__name__, **sched.config}  # as scheduler_config.json ships it
    inputs = guidance.schedule_inputs(config, steps, tokens)
    sched.set_timesteps(sigmas=inputs["sigmas"], mu=inputs["mu"])  # what the pipeline does
    stepper = stepper_from_config(config, steps, **inputs)
    np.testing.assert_allclose(stepper.sigmas, sched.sigmas.numpy(), rtol=1e-6)
    np.testing.assert_allclose(stepper.timesteps, sched.timesteps.numpy(), rtol=1e-6)


def test_guidance_rows_and_scale_resolution():
    scales = guidance.GuidanceScales(audio_guidance=0.0, stg_blocks=(1,))
    assert scales.resolved().audio_guidance == 3.0  # diffusers' `audio or video`
    passes, stg, cross = guidance.pass_controls(scales, num_layers=2)
    assert passes == ("cond", "uncond", "stg", "isolated")
    np.testing.assert_array_equal(stg, [[1, 1], [1, 1], [1, 0], [1, 1]])
    np.testing.assert_array_equal(cross, [1, 1, 1, 0])
    assert guidance.GuidanceScales(1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0).passes == ("cond",)
    with pytest.raises(ValueError, match="STG blocks"):
        guidance.pass_controls(guidance.GuidanceScales(stg_blocks=(5,)), num_layers=2)


@pytest.fixture(scope="module")
def pipeline():
    """A tiny LTX2Pipeline (prompt embeddings passed in: no text encoder needed)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    from .references.ltx2_spec_fixtures import TINY_CONNECTORS, perturbed, vocoder_reference

    transformer = dit_reference("2.0", in_channels=TINY_VAE["latent_channels"], out_channels=TINY_VAE["latent_channels"],
                                audio_in_channels=8, audio_out_channels=8)
    torch.manual_seed(5)
    connectors = perturbed(LTX2TextConnectors(**dict(
        TINY_CONNECTORS["2.0"], caption_channels=12, text_proj_in_factor=2, video_connector_attention_head_dim=6,
        audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=6,
        video_connector_num_learnable_registers=4, audio_connector_num_learnable_registers=4)), 6)
    audio_vae = audio_vae_reference_for(latent_channels=2, mel_bins=16, base_channels=8)
    return LTX2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae_reference(),
                        audio_vae=audio_vae, text_encoder=None, tokenizer=None, connectors=connectors,
                        transformer=transformer, vocoder=vocoder_reference("plain"))


def audio_vae_reference_for(**config):
    from diffusers import AutoencoderKLLTX2Audio

    from .references.ltx2_spec_fixtures import perturbed

    torch.manual_seed(2)
    ref = perturbed(AutoencoderKLLTX2Audio(ch_mult=(1, 2, 4), num_res_blocks=1, **config), 3)
    with torch.no_grad():
        ref.latents_mean.copy_(torch.randn(ref.latents_mean.shape))
        ref.latents_std.copy_(torch.rand(ref.latents_std.shape) + 0.5)
    return ref


def test_guidance_combination_equals_pipeline(pipeline):
    """Two steps of T2V with every guidance term on: each step's guided velocities (what the pipeline
    hands its schedulers) equal `guided_velocities` of the DiT outputs it got; the first DiT call saw
    our normalised `--audio-latents` packed."""
    pipe = pipeline
    scales = guidance.GuidanceScales(guidance=3.0, stg_scale=1.0, modality_scale=2.0, guidance_rescale=0.7,
                                     audio_guidance=5.0, audio_stg_scale=0.5, audio_modality_scale=1.5,
                                     audio_guidance_rescale=0.3, stg_blocks=(1,))
    g = torch.Generator().manual_seed(0)
    frames, height, width = 9, 32, 64
    grid = lat.latent_grid(frames, height, width, spatial_ratio=16)
    audio_len = lat.audio_latent_length(frames, 24.0)
    video0 = torch.randn(1, TINY_VAE["latent_channels"], *grid, generator=g)  # normalised, as the sampler starts
    audio_norm = torch.randn(1, 2, audio_len, 4, generator=g)  # --audio-latents [1, C, L, M], normalised
    mean, std = np_(pipe.audio_vae.latents_mean), np_(pipe.audio_vae.latents_std)
    audio_in = torch.from_numpy(np.asarray(lat.diffusers_audio_latents(jnp.asarray(np_(audio_norm)), mean, std)))
    embeds = torch.randn(2, 8, 24, generator=g)
    calls, steps = [], []
    hook = pipe.transformer.register_forward_hook(
        lambda m, a, kw, out: calls.append((kw, out)), with_kwargs=True)
    step = type(pipe.scheduler).step

    def record(self, model_output, t, sample, **kw):
        steps.append((np_(model_output), np_(sample), float(self.sigmas[self.step_index if self.step_index is not None else 0])))
        return step(self, model_output, t, sample, **kw)

    try:
        type(pipe.scheduler).step = record
        with torch.no_grad():
            out = pipe(prompt_embeds=embeds[:1], prompt_attention_mask=torch.ones(1, 8), negative_prompt_embeds=embeds[1:],
                       negative_prompt_attention_mask=torch.ones(1, 8), height=height, width=width, num_frames=frames,
                       num_inference_steps=2, guidance_scale=scales.guidance, stg_scale=scales.stg_scale,
                       modality_scale=scales.modality_scale, guidance_rescale=scales.guidance_rescale,
                       audio_guidance_scale=scales.audio_guidance, audio_stg_scale=scales.audio_stg_scale,
                       audio_modality_scale=scales.audio_modality_scale,
                       audio_guidance_rescale=scales.audio_guidance_rescale, spatio_temporal_guidance_blocks=[1],
                       latents=lat_denorm(pipe, video0), audio_latents=audio_in, output_type="latent",
                       return_dict=False)
    finally:
        type(pipe.scheduler).step = step
        hook.remove()
    first = calls[0][0]
    np.testing.assert_allclose(np_(first["audio_hidden_states"][1]), np.asarray(lat.pack_audio(jnp.asarray(np_(audio_norm))))[0],
                               atol=1e-5)  # the sampler started from our normalised audio latents
    np.testing.assert_allclose(np_(first["hidden_states"][1]), np.asarray(lat.pack_video(jnp.asarray(np_(video0))))[0], atol=1e-5)
    assert len(calls) == 6 and len(steps) == 4  # 3 DiT calls (CFG pair, STG, isolated) per step; video + audio steps
    for i in range(2):
        (cfg_kw, (v_cfg, a_cfg)), (_, (v_stg, a_stg)), (iso_kw, (v_iso, a_iso)) = calls[3 * i: 3 * i + 3]
        assert iso_kw["isolate_modalities"] and not cfg_kw["isolate_modalities"]
        (want_v, x_v, sigma), (want_a, x_a, _) = steps[2 * i], steps[2 * i + 1]
        video_out = {"uncond": np_(v_cfg[:1]), "cond": np_(v_cfg[1:]), "stg": np_(v_stg), "isolated": np_(v_iso)}
        audio_out = {"uncond": np_(a_cfg[:1]), "cond": np_(a_cfg[1:]), "stg": np_(a_stg), "isolated": np_(a_iso)}
        got_v, got_a = guidance.guided_velocities(scales, x_v, x_a, sigma, video_out, audio_out)
        np.testing.assert_allclose(np.asarray(got_v), want_v, atol=ATOL, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(got_a), want_a, atol=ATOL, rtol=1e-5)
    assert out[0].shape == (1, TINY_VAE["latent_channels"], *grid)


def lat_denorm(pipe, normalised):
    """diffusers normalises given 5-D latents: hand it the de-normalised ones."""
    vae = pipe.vae
    return torch.from_numpy(np.asarray(lat.denormalize_video(jnp.asarray(np_(normalised)), np_(vae.latents_mean),
                                                             np_(vae.latents_std), vae.config.scaling_factor)))


def test_i2v_initial_latents_and_timestep():
    from diffusers import LTX2ImageToVideoPipeline

    vae = vae_reference()
    g = torch.Generator().manual_seed(0)
    image = torch.rand(1, 3, 32, 48, generator=g) * 2 - 1
    fake = types.SimpleNamespace(vae=vae, vae_spatial_compression_ratio=16, vae_temporal_compression_ratio=8,
                                 transformer_spatial_patch_size=1, transformer_temporal_patch_size=1,
                                 _normalize_latents=LTX2ImageToVideoPipeline._normalize_latents,
                                 _pack_latents=LTX2ImageToVideoPipeline._pack_latents)
    with torch.no_grad():
        want, want_mask = LTX2ImageToVideoPipeline.prepare_latents(
            fake, image, 1, TINY_VAE["latent_channels"], 32, 48, 17, dtype=torch.float32, device="cpu",
            generator=torch.Generator().manual_seed(3))
        image_latents = vae.encode(image[:, :, None]).latent_dist.mode()
    grid = lat.latent_grid(17, 32, 48, spatial_ratio=16)
    noise = torch.randn(1, TINY_VAE["latent_channels"], *grid, generator=torch.Generator().manual_seed(3))
    normalised = lat.normalize_video(jnp.asarray(np_(image_latents)), np_(vae.latents_mean), np_(vae.latents_std))
    got, mask = lat.i2v_initial_latents(normalised, jnp.asarray(np_(noise)), grid)
    np.testing.assert_array_equal(mask, np_(want_mask))
    np.testing.assert_allclose(got, np_(want), atol=1e-5)
    t = jnp.asarray([700.0])
    np.testing.assert_allclose(lat.i2v_video_timestep(t, mask), np_(torch.tensor([700.0])[:, None] * (1 - want_mask)))
