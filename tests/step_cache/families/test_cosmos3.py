"""Step caches on Cosmos3 (T2V, 6 steps, fp32, the tiny "nano" pipeline of tests/cosmos3; the reference
`Cosmos3OmniPipeline` calls the DiT once per CFG branch, `cache_context("cond")` / `("uncond")`).

diffusers registers `Cosmos3VLTextMoTDecoderLayer` (text stream `und_seq` first, video stream `gen_seq`
second), but in 0.42 only its TaylorSeer hook runs on it: the first-block and MagCache hooks ask the layer
for an argument it does not have (`hidden_states`, `encoder_hidden_states`) on the first step they could
skip. So:

- `--cache taylorseer`: frames against diffusers' hook (lite: `proj_out`'s output extrapolated; the layers'
  names hold no "block", so they run every step and the decisions, per branch, are the schedule typed by hand).
- `--cache first-block`: decisions and frames against the pipeline with its layer list run by
  first_block_reference.py (the statistic on the video stream's residual, both streams' residuals cached,
  each branch its own state).
- `--cache magcache`: the hand-computed decisions of tests/step_cache/references/batched.py's ratios, frames against
  the pipeline with them applied to its layer list (the video stream's residual; the text stream passes a
  skipped step unchanged, as diffusers' MagCache head hook would return it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.api import generate

from tests.cosmos3 import test_generate as c3
from tests.step_cache.references import batched, first_block_reference, torch_loops
from tests.step_cache.references.batched import MAG_STEPS, STEPS, TAYLOR, TAYLOR_STEPS

FRAME_ATOL = 2e-5  # the uncached Cosmos3 parity bar (tests/cosmos3/test_generate.py)
SEED = 13
# this run's first-layer video residual changes against the last full step (cond/uncond): .0176/.0180 (step 1),
# .043/.044, .082/.084 (step 3, runs), .068/.070 (step 4, runs), .147/.150
FIRST_BLOCK = 0.06
FIRST_BLOCK_RAN = [[True, True], [False, False], [False, False], [True, True], [True, True], [True, True]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos3_step_cache")
    pipe = c3.build(root, "nano")
    np.save(root / "noise.npy", c3._noise(SEED))
    batched.save_ratios(root / "ratios.npy")

    def run():
        with torch.no_grad():
            return pipe(prompt=c3.PROMPT, negative_prompt=c3.NEGATIVE, fps=c3.FPS, num_inference_steps=STEPS,
                        generator=torch.Generator().manual_seed(SEED), output_type="np", enable_safety_check=False,
                        num_frames=c3.FRAMES, height=c3.HEIGHT, width=c3.WIDTH)[0]

    runs = {"none": run()}
    pipe.transformer.enable_cache(batched.configs(FIRST_BLOCK)["taylorseer"])
    try:
        runs["taylorseer"] = run()
    finally:
        pipe.transformer.disable_cache()
    layers = pipe.transformer.layers
    loops = {"first-block": first_block_reference.FirstBlockBlocks(layers, FIRST_BLOCK, branches=2, video=1),
             "magcache": first_block_reference.ScheduledResidualBlocks(layers, MAG_STEPS, branches=2, video=1)}
    runs.update(torch_loops.runs_with_loops(pipe.transformer, "layers", loops, run))
    return root, runs, loops["first-block"]


def _generate(root, tmp_path, **cache):
    options = c3.options("cosmos3-nano", root / "model", root / "noise.npy", tmp_path, steps=STEPS, **cache)
    result = generate(options)
    log = torch_loops.step_log(tmp_path / "v.npy")
    return result, [[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log]


def test_taylorseer_matches_diffusers_hook(reference, tmp_path):
    root, runs, _ = reference
    assert np.abs(runs["taylorseer"] - runs["none"]).max() > 100 * FRAME_ATOL  # the extrapolation's doing
    result, ran = _generate(root, tmp_path, cache="taylorseer", **TAYLOR)
    assert ran == [[full, full] for full in TAYLOR_STEPS]
    np.testing.assert_allclose(result.frames, runs["taylorseer"], atol=FRAME_ATOL, rtol=0)


def test_first_block_matches_a_torch_first_block_cache(reference, tmp_path):
    root, runs, loop = reference
    assert np.asarray(loop.decisions).reshape(STEPS, 2).tolist() == FIRST_BLOCK_RAN
    assert all(abs(change - FIRST_BLOCK) > 0.1 * FIRST_BLOCK for change in loop.changes if change is not None)
    assert np.abs(runs["first-block"] - runs["none"]).max() > 5 * FRAME_ATOL  # two skips early on move it 1.8e-4
    result, ran = _generate(root, tmp_path, cache="first-block", cache_threshold=FIRST_BLOCK)
    assert ran == FIRST_BLOCK_RAN
    np.testing.assert_allclose(result.frames, runs["first-block"], atol=FRAME_ATOL, rtol=0)


def test_magcache_takes_the_hand_computed_decisions(reference, tmp_path):
    root, runs, _ = reference
    assert np.abs(runs["magcache"] - runs["none"]).max() > 100 * FRAME_ATOL
    result, ran = _generate(root, tmp_path, cache="magcache", **batched.knobs("magcache", root / "ratios.npy"))
    assert ran == [[full, full] for full in MAG_STEPS]
    np.testing.assert_allclose(result.frames, runs["magcache"], atol=FRAME_ATOL, rtol=0)
