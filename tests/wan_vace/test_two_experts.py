"""Wan2.2 VACE (`wan2.2-vace-fun-a14b`): two VACE experts against diffusers' `WanVACEPipeline` with `transformer_2`
and `boundary_ratio`, and the registry entry's official layout (`high_noise_model` / `low_noise_model`).

The tiny pipeline of `test_pipeline.py` with a second, differently perturbed VACE DiT and boundary 0.875 in its
`model_index.json` (3 UniPC steps: timesteps 999 | 857, 600, so each expert runs); the inpainting case with a
scale per layer and a second guidance (the low-noise steps' scale 2 instead of 4 moves frames by 6e-3, 300x the
bound: the test asserts > 1e-3).
"""

from __future__ import annotations

import diffusers
import numpy as np
import pytest
import torch

from tests.oracle import perturb, state_of
from tests.wan_vace import vace_spec_fixtures as fixtures
from tests.tiny_references import WAN_PIPELINE_DIT, umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae
from tests.wan_vace.test_pipeline import (FRAME_ATOL, FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, WIDTH, _box_mask,
                                          _clip, _options, _pil)
from vidax.translator import load
from vidax.translator.models import convert_model
from vidax.translator.testing import mismatches
from vidax.zoo.api import generate
from vidax.zoo.registry import make_pipeline
from vidax.zoo.wan.tiny import build_tokenizer

MODEL = "wan2.2-vace-fun-a14b"
STEPS, GUIDANCE_2, BOUNDARY = 3, 2.0, 0.875


@pytest.fixture(scope="module")
def two_experts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wan22_vace")
    torch.manual_seed(11)
    build_tokenizer(folder / "tokenizer_source")
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder / "tokenizer_source")
    vace = lambda: diffusers.WanVACETransformer3DModel(**WAN_PIPELINE_DIT, vace_layers=[0, 1],  # noqa: E731
                                                      vace_in_channels=96).eval()
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), transformer=vace(), transformer_2=vace(),
                 vae=wan_pipeline_vae())
    for seed, module in enumerate(parts.values()):
        perturb(module, 110 + seed)
    pipe = diffusers.WanVACEPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), boundary_ratio=BOUNDARY,
                                     **parts)
    pipe.save_pretrained(folder / "model")
    video, mask = _clip(0), _box_mask(inner=True)
    np.save(folder / "video.npy", video)
    np.save(folder / "mask.npy", mask)
    latents = torch.randn((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8),
                          generator=torch.Generator().manual_seed(12))
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        expected = pipe(PROMPT, negative_prompt=NEGATIVE, video=_pil(video), mask=_pil(mask), height=HEIGHT,
                        width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                        guidance_scale_2=GUIDANCE_2, conditioning_scale=[1.5, -0.25], latents=latents.clone(),
                        output_type="np").frames[0]
    return folder, pipe, expected


def _run(folder, out, **extra):
    options = _options(folder, out, folder / "latents.npy", video=folder / "video.npy", mask=folder / "mask.npy",
                       conditioning_scale="1.5,-0.25", model=MODEL, steps=STEPS, **extra)
    return generate(options).frames


def test_two_vace_experts_match_diffusers(two_experts, tmp_path):
    folder, _, expected = two_experts
    options = _options(folder, tmp_path / "p.npy", None, model=MODEL, steps=STEPS, guidance_2=GUIDANCE_2)
    family = make_pipeline(MODEL, options)
    s = family.resolve_settings(options)
    assert s.boundary_ratio == BOUNDARY  # the folder's model_index.json
    stepper = family.stepper(s, family.latent_shape(s))
    assert family.experts(s, stepper.timesteps) == [0, 1, 1]
    frames = _run(folder, tmp_path / "v.npy", guidance_2=GUIDANCE_2)
    np.testing.assert_allclose(frames, expected, atol=FRAME_ATOL, rtol=0)
    same_guidance = _run(folder, tmp_path / "w.npy", guidance_2=GUIDANCE)  # the low-noise steps take their own scale
    assert np.abs(same_guidance - expected).max() > 50 * FRAME_ATOL


def test_official_expert_folders_convert(two_experts, tmp_path):
    """The official repo's `high_noise_model/` and `low_noise_model/` (VACE's official names) become `transformer`
    and `transformer_2`, each equal to its diffusers module's tree."""
    _, pipe, _ = two_experts
    experts = {"transformer": (pipe.transformer, "high_noise_model"),
               "transformer_2": (pipe.transformer_2, "low_noise_model")}
    for module, sub in experts.values():
        fixtures.save_reference(module, tmp_path / "repo", "official", subfolder=sub)
    convert_model(MODEL, source=str(tmp_path / "repo"), components=("transformer", "transformer_2"),
                  out=tmp_path / "out", dtype="float32", layout="official")
    for name, (module, _) in experts.items():
        assert mismatches(load(tmp_path / "out" / name), fixtures.expected_tree(state_of(module))) == [], name
