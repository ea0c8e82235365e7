"""`--cache` on LTX-Video against diffusers' TaylorSeer, first-block and MagCache hooks (fp32).

`LTXPipeline` batches both CFG branches into one DiT call (`cache_context("cond_uncond")`): one statistic
over the pair, one decision and state for both. The tiny T2V pipeline of tests/ltx_video (dynamic shift,
guidance rescale, decode noise replayed) over 6 Euler steps.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from vidax.zoo.api import generate

from tests.step_cache.references import batched, ltx_video_reference
from tests.step_cache.references.batched import MAG_STEPS, TAYLOR_STEPS

FRAME_ATOL = 2e-5  # the uncached LTX-Video parity bar (tests/ltx_video/test_pipeline.py)
FIRST_BLOCK = 0.1  # this run's first-block changes: .06-.17, the nearest .085 and .104: full at 0 and 3
EXPECTED = {"taylorseer": TAYLOR_STEPS, "first-block": [True, False, False, True, False, False], "magcache": MAG_STEPS}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx_step_cache")
    pipe, replay, run = ltx_video_reference.saved_pipeline(root)
    batched.save_ratios(root / "ratios.npy")
    inner = pipe.transformer.transformer_blocks[1].ff
    return root, replay, batched.cached_runs(pipe.transformer, inner, run, FIRST_BLOCK)


@pytest.mark.parametrize("method", list(EXPECTED))
def test_matches_diffusers_steps_and_frames(reference, tmp_path, monkeypatch, method):
    root, replay, runs = reference
    expected, calls = runs[method]
    assert calls == EXPECTED[method]  # one call per step: the batched pair
    assert np.abs(expected - runs["none"]).max() > 100 * FRAME_ATOL  # the cache changed the reference's frames
    replay.install(monkeypatch)
    options = ltx_video_reference.options(root, tmp_path / "v.npy", cache=method,
                                          **batched.knobs(method, root / "ratios.npy"),
                                          **({"cache_threshold": FIRST_BLOCK} if method == "first-block" else {}))
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond_uncond": ran} for ran in calls]
