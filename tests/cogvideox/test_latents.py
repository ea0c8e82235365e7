"""The pure CogVideoX pipeline pieces against diffusers' own pipelines (tiny 1.5 components).

- A `CogVideoXPipeline` run (1.5, 9 frames: 3 latent frames padded to 4; DPM with dynamic CFG)
  records the initial latents' shape, each step's guidance scale, and what it decodes: our frame
  plan, latent shape, `guidance_scales` and `to_vae_latents` must give the same.
- A `CogVideoXImageToVideoPipeline` step records the DiT's inputs: ofs 2.0, and the image latents
  half of its input equals our `image_latents` from the same posterior and the same noise.
- `prepare_latents` with an image directly: 1.0's scaling (multiply) and 1.5's (divide), with and
  without the first-frame copy that an unpadded 1.5 frame count gets.
"""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import (
    CogVideoXDDIMScheduler,
    CogVideoXDPMScheduler,
    CogVideoXImageToVideoPipeline,
    CogVideoXPipeline,
)
from vidax.zoo.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig
from vidax.zoo.cogvideox.latents import (
    OFS,
    frame_plan,
    from_reference_layout,
    guidance_scales,
    image_latents,
    latent_shape,
    reference_scheduler_config,
    to_reference_layout,
    to_vae_latents,
)
from vidax.zoo.samplers import stepper_from_config

from . import cogvideox_spec_fixtures as fx

SCHEDULER = dict(beta_end=0.012, beta_schedule="scaled_linear", beta_start=0.00085, clip_sample=False,
                 num_train_timesteps=1000, prediction_type="v_prediction", rescale_betas_zero_snr=True,
                 set_alpha_to_one=True, snr_shift_scale=1.0, steps_offset=0, timestep_spacing="trailing")
HEIGHT, WIDTH = 48, 64


def configs(dit, vae):
    return CogVideoXTransformerConfig.from_hf_config(fx.config_json(dit)), CogVideoXVAEConfig.from_hf_config(fx.config_json(vae))


@pytest.fixture(scope="module")
def vae():
    return fx.vae_reference()


def text_embeds(seed: int):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, fx.TEXT_LEN, fx.TEXT_DIM, generator=gen), torch.randn(1, fx.TEXT_LEN, fx.TEXT_DIM, generator=gen))


def test_t2v_frames_guidance_and_decode_input(vae):
    dit = fx.dit_reference("15")
    pipe = CogVideoXPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=dit,
                             scheduler=CogVideoXDPMScheduler(**SCHEDULER))
    seen = {"scales": [], "latents": []}

    def first_input(module, args, kwargs):
        seen.setdefault("input_shape", tuple(kwargs["hidden_states"].shape))

    hook = dit.register_forward_pre_hook(first_input, with_kwargs=True)

    def record(p, i, t, kwargs):
        seen["scales"].append(p.guidance_scale)
        seen["latents"].append(kwargs["latents"].clone())
        return {}

    def decode(latents):  # what the pipeline decodes, before its own division by the scaling factor
        seen["decoded"] = latents.clone()
        return torch.zeros(1, 3, 1, 8, 8)

    pipe.decode_latents = decode
    cond, uncond = text_embeds(0)
    try:
        pipe(prompt_embeds=cond, negative_prompt_embeds=uncond, height=HEIGHT, width=WIDTH, num_frames=9,
             num_inference_steps=3, guidance_scale=6.0, use_dynamic_cfg=True, generator=torch.Generator().manual_seed(0),
             callback_on_step_end=record, output_type="pt", max_sequence_length=fx.TEXT_LEN)
    finally:
        hook.remove()
    dit_cfg, vae_cfg = configs(dit, vae)
    plan = frame_plan(9, vae_cfg, dit_cfg)
    assert (plan.latent_frames, plan.drop, plan.padded_frames) == (4, 1, 13)
    _, c, f, h, w = latent_shape(1, plan, HEIGHT, WIDTH, vae_cfg, dit_cfg)
    assert seen["input_shape"] == (2, f, c, h, w)  # the CFG batch in the reference's layout

    timesteps = pipe.scheduler.timesteps.numpy()
    np.testing.assert_allclose(guidance_scales(6.0, timesteps, dynamic=True), seen["scales"], rtol=1e-12)
    assert guidance_scales(6.0, timesteps, dynamic=False) == [6.0] * 3

    final = from_reference_layout(jnp.asarray(seen["latents"][-1].numpy()))
    ours = to_vae_latents(final, plan, vae_cfg)
    want = seen["decoded"].permute(0, 2, 1, 3, 4).numpy() / vae_cfg.scaling_factor
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(to_reference_layout(final)), seen["latents"][-1].numpy())


def test_i2v_image_latents_and_ofs(vae):
    """One I2V step: the DiT's input is [noisy latents, image latents] on the channels, ofs 2.0."""
    from PIL import Image

    dit = fx.dit_reference("15_i2v")
    pipe = CogVideoXImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=dit,
                                         scheduler=CogVideoXDDIMScheduler(**SCHEDULER))
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8))
    seen = {}

    def first_input(module, args, kwargs):
        seen.setdefault("kwargs", kwargs)

    hook = dit.register_forward_pre_hook(first_input, with_kwargs=True)
    cond, uncond = text_embeds(1)
    try:
        pipe(image=image, prompt_embeds=cond, negative_prompt_embeds=uncond, height=HEIGHT, width=WIDTH, num_frames=9,
             num_inference_steps=1, guidance_scale=6.0, generator=torch.Generator().manual_seed(3), output_type="latent",
             max_sequence_length=fx.TEXT_LEN)
    finally:
        hook.remove()
    assert seen["kwargs"]["ofs"].tolist() == [OFS]

    # the same posterior and noise: the generator's first draw samples the image's posterior
    pixels = pipe.video_processor.preprocess(image, height=HEIGHT, width=WIDTH).unsqueeze(2)
    with torch.no_grad():
        moments = vae.encode(pixels).latent_dist.parameters
    noise = torch.randn(moments[:, :4].shape, generator=torch.Generator().manual_seed(3))
    dit_cfg, vae_cfg = configs(dit, vae)
    plan = frame_plan(9, vae_cfg, dit_cfg)
    ours = image_latents(jnp.asarray(moments.numpy()), jnp.asarray(noise.numpy()), plan.latent_frames, vae_cfg, dit_cfg)
    want = seen["kwargs"]["hidden_states"][:1, :, 4:].permute(0, 2, 1, 3, 4).numpy()  # cond row, image channels
    assert ours.shape == want.shape == (1, 4, 4, 6, 8)
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("version, frames", [("1.0", 9), ("1.5", 9), ("1.5", 13)],
                         ids=["1.0", "1.5-unpadded", "1.5-padded"])
def test_prepare_latents_with_image(version, frames):
    """diffusers I2V `prepare_latents` on a stand-in pipeline: scaling and the 1.5 first-frame copy."""
    dit = fx.dit_reference("5b_i2v" if version == "1.0" else "15_i2v")
    invert = version == "1.5"
    vae = fx.vae_reference(scaling_factor=0.7, invert_scale_latents=invert)
    stand_in = types.SimpleNamespace(vae=vae, transformer=dit, vae_scale_factor_temporal=4, vae_scale_factor_spatial=8,
                                     vae_scaling_factor_image=0.7, scheduler=types.SimpleNamespace(init_noise_sigma=1.0))
    image = torch.rand(1, 3, HEIGHT, WIDTH, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        noisy, want = CogVideoXImageToVideoPipeline.prepare_latents(
            stand_in, image, 1, 4, frames, HEIGHT, WIDTH, torch.float32, "cpu", torch.Generator().manual_seed(4))
        moments = vae.encode(image.unsqueeze(2)).latent_dist.parameters
    noise = torch.randn(moments[:, :4].shape, generator=torch.Generator().manual_seed(4))
    dit_cfg = CogVideoXTransformerConfig.from_hf_config(fx.config_json(dit))
    vae_cfg = CogVideoXVAEConfig.from_hf_config(fx.config_json(vae))
    assert vae_cfg.invert_scale_latents == invert
    latent_frames = (frames - 1) // 4 + 1  # prepare_latents' own count (no frame_plan padding here)
    ours = image_latents(jnp.asarray(moments.numpy()), jnp.asarray(noise.numpy()), latent_frames, vae_cfg, dit_cfg)
    np.testing.assert_allclose(np.asarray(to_reference_layout(ours)), want.numpy(), rtol=1e-5, atol=1e-6)
    plan = frame_plan(frames, vae_cfg, dit_cfg)
    if plan.drop == 0:  # a frame count the pipeline does not pad: the noise has the same shape
        assert latent_shape(1, plan, HEIGHT, WIDTH, vae_cfg, dit_cfg) == tuple(noisy.permute(0, 2, 1, 3, 4).shape)


@pytest.mark.parametrize("scheduler", ["CogVideoXDDIMScheduler", "CogVideoXDPMScheduler"])
def test_scheduler_choice_gives_the_reference_grid(scheduler):
    """The reference script swaps the scheduler class with `from_config(config, timestep_spacing="trailing")`."""
    shipped = {"_class_name": "CogVideoXDDIMScheduler", **SCHEDULER, "timestep_spacing": "linspace"}
    config = reference_scheduler_config(shipped, scheduler)
    cls = {"CogVideoXDDIMScheduler": CogVideoXDDIMScheduler, "CogVideoXDPMScheduler": CogVideoXDPMScheduler}[scheduler]
    reference = cls.from_config(shipped, timestep_spacing="trailing")
    reference.set_timesteps(50)
    stepper = stepper_from_config(config, 50)
    np.testing.assert_array_equal(np.asarray(stepper.timesteps), reference.timesteps.numpy())
    assert type(stepper).__name__ == ("DDIM" if scheduler == "CogVideoXDDIMScheduler" else "CogVideoXDPM")
    with pytest.raises(ValueError, match="CogVideoX samplers"):
        reference_scheduler_config(shipped, "UniPCMultistepScheduler")
