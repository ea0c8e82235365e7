"""Text-to-video sampling and decode against diffusers `HunyuanVideo15Pipeline` saved with `save_pretrained`.

The tiny transformer and VAE references, a FlowMatchEuler scheduler (shift 5) and CFG guider (6) are
saved as a diffusers pipeline folder (no text towers); the family's denoise and decode stages read it
through the real specs. Both sides get the same text features (prompt and negative prompt, padded
masks) and the same initial latents; the frames must agree.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig
from vidax.zoo.hunyuan_video15.family import Condition, HunyuanPredict, default_size
from vidax.zoo.hunyuan_video15.text import TextFeatures
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.registry import make_pipeline
from vidax.zoo.generator.stages import Run

from tests.oracle import to_np, unflatten

from .hunyuan_spec_fixtures import dit_reference, vae_reference

SIZE = dict(height=32, width=48, frames=5, steps=3, guidance=6.0, shift=5.0)
LATENT_SHAPE = (1, 4, 2, 2, 3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from diffusers import ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline as Reference

    vae = vae_reference()
    dit = dit_reference(out_channels=4, in_channels=9)  # latent 4 + condition latent 4 + mask 1
    ref = Reference(text_encoder=None, tokenizer=None, transformer=dit, vae=vae,
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=SIZE["shift"]), text_encoder_2=None,
                    tokenizer_2=None, guider=ClassifierFreeGuidance(guidance_scale=SIZE["guidance"]))
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


def test_frames_match_reference(saved, tmp_path):
    ref, root = saved
    prompt, negative = features(1, 5, 2), features(2, 3, 0)
    latents = torch.randn(*LATENT_SHAPE, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = ref(prompt_embeds=prompt[0], prompt_embeds_mask=prompt[1], prompt_embeds_2=prompt[2],
                       prompt_embeds_mask_2=prompt[3], negative_prompt_embeds=negative[0],
                       negative_prompt_embeds_mask=negative[1], negative_prompt_embeds_2=negative[2],
                       negative_prompt_embeds_mask_2=negative[3], latents=latents, height=SIZE["height"],
                       width=SIZE["width"], num_frames=SIZE["frames"], num_inference_steps=SIZE["steps"],
                       output_type="np").frames

    options = GenerateOptions(model="hunyuanvideo-1.5", prompt="", weights=str(root), dtype="float32",
                              out=tmp_path / "v.npy", **SIZE)
    family = make_pipeline(options.model, options)
    s = family.resolve_settings(options)
    cond = Condition(TextFeatures.concat(ours(prompt), ours(negative)), None)
    run = Run(family, options)
    final = family.sample(run, s, to_np(latents), cond)
    frames = family.decode(run, s, final).frames
    assert frames.shape == expected.shape[1:] == (5, 32, 48, 3)
    np.testing.assert_allclose(frames, expected[0], atol=1e-5, rtol=0)


def test_default_size_is_the_reference_bucket():
    from diffusers.pipelines.hunyuan_video1_5.image_processor import HunyuanVideo15ImageProcessor

    processor = HunyuanVideo15ImageProcessor(vae_scale_factor=16)
    for target in (640, 960):
        assert default_size(target) == processor.calculate_default_height_width(9, 16, target)


def test_settings_fit_sizes_as_the_reference_runs_them(saved, tmp_path):
    """HunyuanVideo15Pipeline checks no size: it makes H // 16 x W // 16 latents (30x40 comes out 16x32) and
    fails on an empty one; frames are any count (the VAE decodes 4k+1 of them)."""
    from vidax.zoo.errors import PipelineError

    _, root = saved

    def resolve(**change):
        options = GenerateOptions(model="hunyuanvideo-1.5", prompt="", weights=str(root), out=tmp_path / "v.npy",
                                  **{**SIZE, **change})
        return make_pipeline(options.model, options).resolve_settings(options)

    s = resolve(height=30, width=40, frames=6)
    assert (s.height, s.width, s.frames) == (16, 32, 6)
    for change, message in ((dict(height=8), "--height 8 is below 16"), (dict(width=0), "--width must be positive")):
        with pytest.raises(PipelineError, match=message):
            resolve(**change)


def test_bf16_weights_run_close_to_fp32(saved):
    """Weights converted as shipped (bf16) run the DiT in bf16; the velocity stays near the fp32 one."""
    import jax

    from vidax.zoo.generator.denoise import _resident_prediction

    ref, root = saved
    dit = HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.transformer.config)))
    spec = load_spec("hunyuan_video15/transformer")
    fp32 = unflatten(convert(spec, root, dit.param_shapes()))
    bf16 = unflatten(convert(spec, root, dit.param_shapes(), dtype="bfloat16"))
    assert bf16["x_embedder"]["proj"]["kernel"].dtype == jnp.bfloat16
    assert bf16["blocks"]["attn"]["norm_q"]["scale"].dtype == jnp.float32  # the spec keeps norms in fp32
    latents = jnp.asarray(np.random.default_rng(0).standard_normal(LATENT_SHAPE), jnp.float32)
    cond = Condition(TextFeatures.concat(ours(features(1, 5, 2)), ours(features(2, 3, 0))), None)
    knobs = {"scale": jnp.float32(6.0), "timestep_r": jnp.float32(0.0)}
    outs = []
    for params, dtype in ((fp32, "float32"), (bf16, "bfloat16")):
        predict = HunyuanPredict(True, dtype, False, 5, dit.cfg.image_embed_dim)
        outs.append(_resident_prediction(predict, dit, jax.device_put(params), latents, jnp.float32(500.0), cond, knobs))
    assert outs[1].dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(outs[1])))
    scale = float(jnp.abs(outs[0]).max())
    assert float(jnp.abs(outs[1] - outs[0]).max()) < 0.05 * scale  # bf16 keeps ~3 significant digits
