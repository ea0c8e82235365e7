"""Image-to-video sampling against diffusers `HunyuanVideo15ImageToVideoPipeline` (meanflow DiT, CFG).

Tiny DiT, VAE and SigLIP tower saved with `save_pretrained`; vidax converts all three through the
real specs, sizes the video from the image as the reference does, resizes and crops the image,
encodes it (VAE first-frame latents and mask, SigLIP tokens) and samples from the same noise.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from vidax.translator import convert, load_spec
from vidax.zoo.encoders.siglip import SiglipVisionModel, siglip_preprocess, siglip_vision_config
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video15.pipeline import (
    HunyuanVideo15Pipeline,
    SampleSettings,
    bucket_size,
    image_condition,
    resize_and_crop,
)
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

from .helpers import to_np, torch, unflatten
from .hunyuan_spec_fixtures import dit_reference, perturbed, vae_reference
from .test_pipeline import features, ours

transformers = pytest.importorskip("transformers")
TARGET_SIZE = 32  # tiny bucket grid: (target / 16)^2 = 4 latent cells


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from diffusers import ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler
    from diffusers import HunyuanVideo15ImageToVideoPipeline as Reference

    torch.manual_seed(0)
    siglip = perturbed(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(
        hidden_size=12, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)), 4)
    dit = dit_reference(in_channels=9, out_channels=4, target_size=TARGET_SIZE, task_type="i2v")  # meanflow on
    ref = Reference(text_encoder=None, tokenizer=None, transformer=dit, vae=vae_reference(),
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=None, tokenizer_2=None,
                    guider=ClassifierFreeGuidance(guidance_scale=6.0), image_encoder=siglip,
                    feature_extractor=transformers.SiglipImageProcessor(size={"height": 32, "width": 32}))
    root = tmp_path_factory.mktemp("hv15_i2v")
    ref.save_pretrained(root)
    return ref, root


def test_i2v_frames_match_reference(saved):
    from PIL import Image

    ref, root = saved
    image = np.random.default_rng(0).integers(0, 256, (30, 52, 3), dtype=np.uint8)
    height, width = bucket_size(30, 52, TARGET_SIZE)
    assert (height, width) == ref.video_processor.calculate_default_height_width(30, 52, TARGET_SIZE)
    settings = SampleSettings(height=height, width=width, frames=5, steps=3, guidance=6.0, shift=7.0)
    latents = torch.randn(*settings.latent_shape(1, 4), generator=torch.Generator().manual_seed(5))
    prompt, negative = features(1, 5, 2), features(2, 3, 0)
    with torch.no_grad():
        expected = ref(image=Image.fromarray(image), prompt_embeds=prompt[0], prompt_embeds_mask=prompt[1],
                       prompt_embeds_2=prompt[2], prompt_embeds_mask_2=prompt[3], negative_prompt_embeds=negative[0],
                       negative_prompt_embeds_mask=negative[1], negative_prompt_embeds_2=negative[2],
                       negative_prompt_embeds_mask_2=negative[3], latents=latents, num_frames=5,
                       num_inference_steps=3, output_type="np").frames

    dit = HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.transformer.config)))
    vae = HunyuanVideo15VAE(VAEConfig.from_hf_config(dict(ref.vae.config)))
    siglip = SiglipVisionModel(siglip_vision_config(ref.image_encoder.config.to_dict()))
    dit_params = unflatten(convert(load_spec("hunyuan_video15/transformer"), root, dit.param_shapes()))
    vae_params = unflatten(convert(load_spec("hunyuan_video15/vae"), root, vae.param_shapes()))
    siglip_params = unflatten(convert(load_spec("encoders/siglip_vision"), root / "image_encoder", dtype="float32"))

    frame = resize_and_crop(image, height, width)
    tokens = siglip.apply({"params": siglip_params}, jnp.asarray(siglip_preprocess(frame, size=32))).last_hidden_state
    condition = image_condition(vae, vae_params, frame, tokens, tuple(latents.shape))
    pipe = HunyuanVideo15Pipeline(dit, dit_params, vae, vae_params)
    final = pipe.sample(ours(prompt), jnp.asarray(to_np(latents)), settings, negative=ours(negative), image=condition)
    frames = pipe.decode(final)
    assert frames.shape == expected.shape
    np.testing.assert_allclose(frames, expected, atol=1e-5, rtol=0)
