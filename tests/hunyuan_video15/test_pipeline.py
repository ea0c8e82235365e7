"""Text-to-video sampling and decode against diffusers `HunyuanVideo15Pipeline` saved with `save_pretrained`.

The tiny transformer and VAE references, a FlowMatchEuler scheduler (shift 5) and CFG guider (6) are
saved as a diffusers pipeline folder; vidax converts both components from it through the real specs.
Both sides get the same text features (prompt and negative prompt, padded masks) and the same
initial latents; the frames must agree.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from vidax.translator import convert, load_spec
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video15.pipeline import HunyuanVideo15Pipeline, SampleSettings, TextFeatures, default_size
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

from .helpers import to_np, torch, unflatten
from .hunyuan_spec_fixtures import dit_reference, vae_reference

SETTINGS = SampleSettings(height=32, width=48, frames=5, steps=3, guidance=6.0, shift=5.0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from diffusers import ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline as Reference

    vae = vae_reference()
    dit = dit_reference(out_channels=4, in_channels=9)  # latent 4 + condition latent 4 + mask 1
    ref = Reference(text_encoder=None, tokenizer=None, transformer=dit, vae=vae,
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=SETTINGS.shift), text_encoder_2=None,
                    tokenizer_2=None, guider=ClassifierFreeGuidance(guidance_scale=SETTINGS.guidance))
    root = tmp_path_factory.mktemp("hv15_pipeline")
    ref.save_pretrained(root)
    return ref, root


def features(seed: int, valid: int, valid_2: int):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(1, 6, dtype=torch.long)
    mask[:, :valid] = 1
    mask_2 = torch.zeros(1, 4, dtype=torch.long)
    mask_2[:, :valid_2] = 1
    return torch.randn(1, 6, 24, generator=g), mask, torch.randn(1, 4, 20, generator=g), mask_2


def ours(feats) -> TextFeatures:
    text, mask, text_2, mask_2 = (jnp.asarray(to_np(t)) for t in feats)
    return TextFeatures(text, mask.astype(bool), text_2, mask_2.astype(bool))


def test_frames_match_reference(saved):
    ref, root = saved
    prompt, negative = features(1, 5, 2), features(2, 3, 0)
    latents = torch.randn(*SETTINGS.latent_shape(1, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = ref(prompt_embeds=prompt[0], prompt_embeds_mask=prompt[1], prompt_embeds_2=prompt[2],
                       prompt_embeds_mask_2=prompt[3], negative_prompt_embeds=negative[0],
                       negative_prompt_embeds_mask=negative[1], negative_prompt_embeds_2=negative[2],
                       negative_prompt_embeds_mask_2=negative[3], latents=latents, height=SETTINGS.height,
                       width=SETTINGS.width, num_frames=SETTINGS.frames, num_inference_steps=SETTINGS.steps,
                       output_type="np").frames

    dit = HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.transformer.config)))
    vae = HunyuanVideo15VAE(VAEConfig.from_hf_config(dict(ref.vae.config)))
    dit_params = unflatten(convert(load_spec("hunyuan_video15/transformer"), root, dit.param_shapes()))
    vae_params = unflatten(convert(load_spec("hunyuan_video15/vae"), root, vae.param_shapes()))
    pipe = HunyuanVideo15Pipeline(dit, dit_params, vae, vae_params)
    final = pipe.sample(ours(prompt), jnp.asarray(to_np(latents)), SETTINGS, negative=ours(negative))
    frames = pipe.decode(final)
    assert frames.shape == expected.shape == (1, 5, 32, 48, 3)
    np.testing.assert_allclose(frames, expected, atol=1e-5, rtol=0)


def test_default_size_is_the_reference_bucket():
    from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

    processor = HunyuanVideo15ImageProcessor(vae_scale_factor=16)
    for target in (640, 960):
        assert default_size(target) == processor.calculate_default_height_width(9, 16, target)


def test_settings_refuse_bad_sizes():
    from vidax.zoo.pipeline import PipelineError

    with pytest.raises(PipelineError, match="4k\\+1"):
        SampleSettings(height=32, width=48, frames=6)
    with pytest.raises(PipelineError, match="multiples of 16"):
        SampleSettings(height=30, width=48)


def test_bf16_weights_run_close_to_fp32(saved):
    """Weights converted as shipped (bf16) run the DiT in bf16; the velocity stays near the fp32 one."""
    import jax

    from vidax.zoo.hunyuan_video15.pipeline import _velocity, t2v_condition

    ref, root = saved
    dit = HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.transformer.config)))
    spec = load_spec("hunyuan_video15/transformer")
    fp32 = unflatten(convert(spec, root, dit.param_shapes()))
    bf16 = unflatten(convert(spec, root, dit.param_shapes(), dtype="bfloat16"))
    assert bf16["x_embedder"]["proj"]["kernel"].dtype == jnp.bfloat16
    assert bf16["blocks"]["attn"]["norm_q"]["scale"].dtype == jnp.float32  # the spec keeps norms in fp32
    latents = jnp.asarray(np.random.default_rng(0).standard_normal(SETTINGS.latent_shape(1, 4)), jnp.float32)
    prompt, negative = ours(features(1, 5, 2)), ours(features(2, 3, 0))
    text = TextFeatures.concat(prompt, negative)
    outs = [_velocity(dit, jax.device_put(p), text, 6.0, latents, jnp.float32(500.0), None, t2v_condition(dit, latents))
            for p in (fp32, bf16)]
    assert outs[1].dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(outs[1])))
    scale = float(jnp.abs(outs[0]).max())
    assert float(jnp.abs(outs[1] - outs[0]).max()) < 0.05 * scale  # bf16 keeps ~3 significant digits
