"""`--cache taylorseer` on HunyuanVideo 1.0 against diffusers' `TaylorSeerCacheConfig` hook (lite mode, fp32).

The guidance-distilled `HunyuanVideoPipeline` calls the DiT once per step (`cache_context("cond")`, the
embedded guidance); its DiT has two block groups (dual then single stream), which TaylorSeer does not
look into. The first-block cache and MagCache, which split the blocks, refuse it with one line.
"""

from __future__ import annotations

import json

import diffusers
import numpy as np
import pytest
import torch

from vidax.zoo.pipeline import GenerateOptions, PipelineError, generate

from tests.hunyuan_video import pipelines as tiny
from tests.step_cache.batched import STEPS, TAYLOR, TAYLOR_STEPS, configs
from tests.step_cache.oracle_calls import full_dit_calls

FRAME_ATOL = 2e-5  # the uncached HunyuanVideo parity bar (tests/hunyuan_video/test_generate.py)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv_step_cache")
    pipe = tiny.t2v_pipeline(root, tiny.towers(root))
    np.save(root / "noise.npy", tiny.latents(0))
    pipe.transformer.enable_cache(configs(0.1)["taylorseer"])
    calls = full_dit_calls(pipe.transformer, pipe.transformer.single_transformer_blocks[-1].proj_mlp)
    with torch.no_grad():
        frames = pipe(prompt=tiny.PROMPT, height=tiny.HEIGHT, width=tiny.WIDTH, num_frames=tiny.FRAMES,
                      num_inference_steps=STEPS, latents=torch.from_numpy(np.load(root / "noise.npy")),
                      output_type="np").frames[0]
    return root, frames, calls


def _options(root, out, **cache) -> GenerateOptions:
    return GenerateOptions(model="hunyuanvideo", prompt=tiny.PROMPT, weights=str(root / "model"), height=tiny.HEIGHT,
                           width=tiny.WIDTH, frames=tiny.FRAMES, steps=STEPS, latents=root / "noise.npy", out=out,
                           compile_cache=False, dtype="float32", **cache)


def test_taylorseer_matches_diffusers_steps_and_frames(reference, tmp_path):
    root, expected, calls = reference
    assert calls == TAYLOR_STEPS
    result = generate(_options(root, tmp_path / "v.npy", cache="taylorseer", **TAYLOR))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond": ran} for ran in calls]


def test_block_split_caches_refuse_two_block_groups(reference, tmp_path):
    root, *_ = reference
    with pytest.raises(PipelineError, match="a DiT with one block group"):
        generate(_options(root, tmp_path / "v.npy", cache="first-block"))
    assert not (tmp_path / "v.npy").exists()
