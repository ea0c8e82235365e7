"""`--cache teacache` on LTX-Video (both CFG branches in one DiT call: one statistic over the pair decides for
both) against the TeaCache reference loop (tests/step_cache/teacache_reference.py) around diffusers' DiT.

The statistic is block 0's RMS-normed hidden state under its shift and scale (TeaCache4LTX-Video), rescaled
by the published LTX-Video 0.9.1 polynomial, which `--cache-coefficients ltx-video-2b` picks for the tiny
pipeline of tests/ltx_video (6 Euler steps, dynamic shift, guidance rescale).
"""

from __future__ import annotations

import json

import diffusers
import numpy as np
import pytest
import torch

from vidax.zoo.pipeline import GenerateOptions, generate

from tests.ltx_video.pipelines import NEGATIVE, PROMPT, Replay, components, dynamic_scheduler, pack
from tests.step_cache import teacache_reference as reference_loop
from tests.step_cache.batched import STEPS
from tests.step_cache.test_ltx_video import FAMILY_KNOBS, FRAMES, GUIDANCE, HEIGHT, LATENT, SEED, WIDTH
from tests.step_cache.test_teacache_easycache_rules import PUBLISHED

FRAME_ATOL = 2e-5
# rescaled changes ~.068, .084, .090, .090 at steps 1-4: with threshold .1 step 1 skips (.068), 2 runs (.152),
# 3 skips (.090), 4 runs (.180); 0 and 5 (first and last) always run
THRESHOLD, EXPECTED = 0.1, [True, False, True, False, True, True]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx_teacache")
    pipe = diffusers.LTXPipeline(scheduler=dynamic_scheduler(), **components(12, root))
    pipe.save_pretrained(root / "model")
    noise = torch.randn(LATENT, generator=torch.Generator().manual_seed(2))
    np.save(root / "latents.npy", noise.numpy())
    replay = Replay(SEED)
    replay.record(2, 0, LATENT)  # the decode noise

    def run():
        return pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, frame_rate=25,
                    num_inference_steps=STEPS, guidance_scale=GUIDANCE, output_type="np", latents=pack(noise),
                    generator=torch.Generator().manual_seed(SEED), **FAMILY_KNOBS).frames[0]

    with torch.no_grad():
        plain = run()
    blocks = reference_loop.install(pipe.transformer, "transformer_blocks",
                                    modulated=reference_loop.ltx_first_block_modulated,
                                    coefficients=PUBLISHED[("ltx-video-2b", "modulated")], threshold=THRESHOLD,
                                    warmup=1, final=1, steps=STEPS, branches=1)
    with torch.no_grad():
        frames = run()
    changes = [np.nan if c is None else c for c in blocks.changes]
    return root, replay, plain, frames, blocks.decisions, changes


def test_ltx_video_teacache_matches_the_reference_loop(reference, tmp_path, monkeypatch):
    root, replay, plain, expected, decisions, changes = reference
    assert decisions == EXPECTED
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL  # the skips changed the reference's frames
    replay.install(monkeypatch)
    options = GenerateOptions(model="ltx-video-13b-distilled", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(root / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                              guidance=GUIDANCE, latents=root / "latents.npy", out=tmp_path / "v.npy", dtype="float32",
                              compile_cache=False, extra=FAMILY_KNOBS, cache="teacache", cache_threshold=THRESHOLD,
                              cache_coefficients="ltx-video-2b")
    result = generate(options)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond_uncond": full} for full in EXPECTED]
    measured = [np.nan if entry["change"]["cond_uncond"] is None else entry["change"]["cond_uncond"] for entry in log]
    np.testing.assert_allclose(measured, changes, rtol=1e-4, equal_nan=True)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
