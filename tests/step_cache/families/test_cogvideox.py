"""`--cache` on CogVideoX 1.5 against diffusers' TaylorSeer, first-block and MagCache hooks (fp32).

`CogVideoXPipeline` batches both CFG branches into one DiT call (`cache_context("cond_uncond")`): one
statistic over the pair, one decision and state for both, logged under that one name. The DiT's hidden
state is a joint stream (video and text tokens): the decisions read the video stream, as the reference's
block hooks read `hidden_states`. DDIM steps (no step noise), tiled VAE (one tile).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

from tests.cogvideox import pipelines as tiny
from tests.cogvideox.pipelines import FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, WIDTH
from tests.step_cache.references import batched
from tests.step_cache.references.batched import MAG_STEPS, STEPS, TAYLOR_STEPS

LATENTS = (1, 4, 4, HEIGHT // 8, WIDTH // 8)  # reference layout [B, F', C, H', W']
ATOL = 2e-5  # the uncached CogVideoX parity bar (tests/cogvideox/test_generate.py)
FIRST_BLOCK = 0.41  # this run's first-block changes: .34-.60, the nearest .40 and .43: full at 0, 3, 5
EXPECTED = {"taylorseer": TAYLOR_STEPS, "first-block": [True, False, False, True, False, True], "magcache": MAG_STEPS}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cogvideox_step_cache") / "model"
    pipe = tiny.pipeline(folder, "15", scheduler="ddim", seed=4)
    pipe.vae.enable_tiling()
    latents = torch.randn(LATENTS, generator=torch.Generator().manual_seed(3))
    np.save(folder.parent / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    batched.save_ratios(folder.parent / "ratios.npy")

    def run():
        return pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                    num_inference_steps=STEPS, guidance_scale=GUIDANCE, use_dynamic_cfg=False, latents=latents,
                    output_type="np").frames[0]

    blocks = pipe.transformer.transformer_blocks
    return folder, batched.cached_runs(pipe.transformer, blocks[1].ff, run, FIRST_BLOCK)


@pytest.mark.parametrize("method", list(EXPECTED))
def test_matches_diffusers_steps_and_frames(reference, tmp_path, method):
    folder, runs = reference
    expected, calls = runs[method]
    assert calls == EXPECTED[method]  # one call per step: the batched pair
    assert np.abs(expected - runs["none"]).max() > 100 * ATOL  # the cache changed the reference's frames
    options = GenerateOptions(model="cogvideox1.5-5b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder),
                              height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE,
                              latents=folder.parent / "latents.npy", out=tmp_path / "v.npy", dtype="float32",
                              compile_cache=False, sampler="ddim", extra={"dynamic_cfg": False}, cache=method,
                              **batched.knobs(method, folder.parent / "ratios.npy"),
                              **({"cache_threshold": FIRST_BLOCK} if method == "first-block" else {}))
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond_uncond": ran} for ran in calls]
