"""`--cache teacache` on LTX-Video (both CFG branches in one DiT call: one statistic over the pair decides for
both) against the TeaCache reference loop (tests/step_cache/references/teacache_reference.py) around diffusers' DiT.

The statistic is block 0's RMS-normed hidden state under its shift and scale (TeaCache4LTX-Video), rescaled
by the published LTX-Video 0.9.1 polynomial, which `--cache-coefficients ltx-video-2b` picks for the tiny
pipeline of tests/ltx_video (6 Euler steps, dynamic shift, guidance rescale).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vidax.zoo.api import generate

from tests.step_cache.references import ltx_video_reference
from tests.step_cache.references import teacache_reference as reference_loop
from tests.step_cache.references.batched import STEPS
from tests.step_cache.test_teacache_easycache_rules import PUBLISHED

FRAME_ATOL = 2e-5
# rescaled changes ~.068, .084, .090, .090 at steps 1-4: with threshold .1 step 1 skips (.068), 2 runs (.152),
# 3 skips (.090), 4 runs (.180); 0 and 5 (first and last) always run
THRESHOLD, EXPECTED = 0.1, [True, False, True, False, True, True]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx_teacache")
    pipe, replay, run = ltx_video_reference.saved_pipeline(root)
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
    options = ltx_video_reference.options(root, tmp_path / "v.npy", cache="teacache", cache_threshold=THRESHOLD,
                                          cache_coefficients="ltx-video-2b")
    result = generate(options)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond_uncond": full} for full in EXPECTED]
    measured = [np.nan if entry["change"]["cond_uncond"] is None else entry["change"]["cond_uncond"] for entry in log]
    np.testing.assert_allclose(measured, changes, rtol=1e-4, equal_nan=True)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
