"""`--cache taylorseer` on CogVideoX 1.5 against diffusers' `TaylorSeerCacheConfig` hook (lite mode, fp32).

`CogVideoXPipeline` batches both CFG branches into one DiT call (`cache_context("cond_uncond")`): one
decision and one state for the pair, logged under that one branch name. DDIM steps (no step noise).
"""

from __future__ import annotations

import json

import diffusers
import numpy as np
import pytest
import torch

from vidax.zoo.pipeline import GenerateOptions, generate

from tests.cogvideox import pipelines as tiny
from tests.cogvideox.pipelines import FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, WIDTH
from tests.step_cache.oracle_calls import full_dit_calls

STEPS = 6
KNOBS = dict(cache_interval=2, cache_warmup=2, cache_order=1)  # full runs at 0, 1, 3, 5; offsets 1 at 2 and 4
LATENTS = (1, 4, 4, HEIGHT // 8, WIDTH // 8)  # reference layout [B, F', C, H', W']
ATOL = 2e-5  # the uncached CogVideoX parity bar (tests/cogvideox/test_generate.py)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cogvideox_taylorseer") / "model"
    pipe = tiny.pipeline(folder, "15", scheduler="ddim", seed=4)
    pipe.vae.enable_tiling()
    latents = torch.randn(LATENTS, generator=torch.Generator().manual_seed(3))
    np.save(folder.parent / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    pipe.transformer.enable_cache(diffusers.TaylorSeerCacheConfig(
        cache_interval=KNOBS["cache_interval"], disable_cache_before_step=KNOBS["cache_warmup"],
        max_order=KNOBS["cache_order"], use_lite_mode=True, taylor_factors_dtype=torch.float32))
    calls = full_dit_calls(pipe.transformer, pipe.transformer.transformer_blocks[0].ff)
    with torch.no_grad():
        frames = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, use_dynamic_cfg=False, latents=latents,
                      output_type="np").frames[0]
    return folder, folder.parent / "latents.npy", frames, calls


def test_taylorseer_matches_diffusers_steps_and_frames(reference, tmp_path):
    folder, latents, expected, calls = reference
    assert calls == [True, True, False, True, False, True]  # one call per step: the batched pair
    options = GenerateOptions(model="cogvideox1.5-5b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder),
                              height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=latents,
                              out=tmp_path / "v.npy", dtype="float32", compile_cache=False, sampler="ddim",
                              extra={"dynamic_cfg": False}, cache="taylorseer", **KNOBS)
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [list(entry["full_dit"]) for entry in log] == [["cond_uncond"]] * STEPS
    assert [entry["full_dit"]["cond_uncond"] for entry in log] == calls
