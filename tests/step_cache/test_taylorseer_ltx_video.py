"""`--cache taylorseer` on LTX-Video against diffusers' `TaylorSeerCacheConfig` hook (lite mode, fp32).

`LTXPipeline` batches both CFG branches into one DiT call (`cache_context("cond_uncond")`): one decision and
one state for the pair. The tiny T2V pipeline of tests/ltx_video (dynamic shift, guidance rescale, decode
noise replayed) over 6 Euler steps.
"""

from __future__ import annotations

import json

import diffusers
import numpy as np
import pytest
import torch

from vidax.zoo.pipeline import GenerateOptions, generate

from tests.ltx_video.pipelines import NEGATIVE, PROMPT, Replay, components, dynamic_scheduler, pack
from tests.step_cache.oracle_calls import full_dit_calls

HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 64, 96, 9, 6, 3.0
LATENT = (1, 8, 2, 2, 3)
FAMILY_KNOBS = dict(guidance_rescale=0.3, decode_timestep=0.05, decode_noise_scale=0.025)
KNOBS = dict(cache_interval=2, cache_warmup=2, cache_order=1)  # full runs at 0, 1, 3, 5
SEED = 7
FRAME_ATOL = 2e-5  # the uncached LTX-Video parity bar (tests/ltx_video/test_pipeline.py)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx_taylorseer")
    pipe = diffusers.LTXPipeline(scheduler=dynamic_scheduler(), **components(12, root))
    pipe.save_pretrained(root / "model")
    noise = torch.randn(LATENT, generator=torch.Generator().manual_seed(2))
    np.save(root / "latents.npy", noise.numpy())
    replay = Replay(SEED)
    replay.record(2, 0, LATENT)  # the decode noise
    pipe.transformer.enable_cache(diffusers.TaylorSeerCacheConfig(
        cache_interval=KNOBS["cache_interval"], disable_cache_before_step=KNOBS["cache_warmup"],
        max_order=KNOBS["cache_order"], use_lite_mode=True, taylor_factors_dtype=torch.float32))
    calls = full_dit_calls(pipe.transformer, pipe.transformer.transformer_blocks[0].ff)
    with torch.no_grad():
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, frame_rate=25,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, output_type="np", latents=pack(noise),
                      generator=torch.Generator().manual_seed(SEED), **FAMILY_KNOBS).frames[0]
    return root, replay, frames, calls


def test_taylorseer_matches_diffusers_steps_and_frames(reference, tmp_path, monkeypatch):
    root, replay, expected, calls = reference
    assert calls == [True, True, False, True, False, True]  # one call per step: the batched pair
    replay.install(monkeypatch)
    options = GenerateOptions(model="ltx-video-13b-distilled", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(root / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                              guidance=GUIDANCE, latents=root / "latents.npy", out=tmp_path / "v.npy", dtype="float32",
                              compile_cache=False, extra=FAMILY_KNOBS, cache="taylorseer", **KNOBS)
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond_uncond": ran} for ran in calls]
