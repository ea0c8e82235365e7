"""Step caches on Cosmos-Predict2.5, a family diffusers' cache hooks do not reach (T2V, 6 steps, fp32, the
tiny pipeline of tests/cosmos; the reference pipeline calls the DiT once per CFG branch).

- `--cache taylorseer`: decisions against a schedule typed by hand, frames against
  `Cosmos2_5_PredictBasePipeline` with the whole DiT output extrapolated by taylorseer_reference.py.
- `--cache first-block`: decisions and frames against the pipeline with its block list run by
  first_block_reference.py (each branch its own state).
- `--cache magcache`: decisions against the hand-computed ones of tests/step_cache/references/batched.py's ratios, frames
  against the pipeline with those decisions applied to its block list.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

from tests.cosmos import reference as ref
from tests.cosmos.helpers import randn
from tests.step_cache.references import first_block_reference, taylorseer_reference

STEPS = 6
TAYLOR = dict(cache_interval=2, cache_warmup=2, cache_order=1)
SCHEDULE = [True, True, False, True, False, True]  # warm-up 0, 1; then (step - 3) % 2 == 0: 3 and 5
FRAME_ATOL = 2e-5


# this run's block-0 residual changes against the last full step: .00056/.00057 (step 1), .0029/.0029,
# .0132/.0136 (step 3, runs), .0243/.0246, .0090/.0090
FIRST_BLOCK = 0.005
FIRST_BLOCK_RAN = [[True, True], [False, False], [False, False], [True, True], [True, True], [True, True]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos_step_cache")
    pipe = ref.build(root)
    noise = randn(*ref.LATENT_SHAPE, seed=11)
    np.save(root / "noise.npy", noise.numpy())
    with torch.no_grad():
        plain = pipe(latents=noise.clone(), **_common()).frames[0]
    return pipe, root, noise, plain


def _common():
    return dict(prompt=ref.PROMPT, height=ref.HEIGHT, width=ref.WIDTH, num_frames=ref.FRAMES,
                num_inference_steps=STEPS, output_type="np")


def _generate(root, tmp_path, **cache):
    options = GenerateOptions(model="cosmos-predict2.5-2b", prompt=ref.PROMPT, weights=str(root / "diffusers"),
                              height=ref.HEIGHT, width=ref.WIDTH, frames=ref.FRAMES, steps=STEPS,
                              latents=root / "noise.npy", out=tmp_path / "v.npy", dtype="float32",
                              compile_cache=False, **cache)
    result = generate(options)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    return result, [[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log]


def test_cosmos_taylorseer_matches_a_torch_taylorseer(reference, tmp_path):
    pipe, root, noise, plain = reference
    forward = pipe.transformer.forward
    try:
        calls = taylorseer_reference.install(pipe.transformer, SCHEDULE, order=1, branches=2)
        with torch.no_grad():
            expected = pipe(latents=noise.clone(), **_common()).frames[0]
    finally:
        pipe.transformer.forward = forward
    assert calls == [full for full in SCHEDULE for _ in range(2)]
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL
    result, ran = _generate(root, tmp_path, cache="taylorseer", **TAYLOR)
    assert ran == [[full, full] for full in SCHEDULE]
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_cosmos_first_block_matches_a_torch_first_block_cache(reference, tmp_path):
    pipe, root, noise, plain = reference
    blocks = pipe.transformer.transformer_blocks
    loop = first_block_reference.FirstBlockBlocks(blocks, FIRST_BLOCK, branches=2)
    pipe.transformer.transformer_blocks = loop
    try:
        with torch.no_grad():
            expected = pipe(latents=noise.clone(), **_common()).frames[0]
    finally:
        pipe.transformer.transformer_blocks = blocks
    ran = np.asarray(loop.decisions).reshape(STEPS, 2).tolist()
    assert ran == FIRST_BLOCK_RAN
    assert all(abs(change - FIRST_BLOCK) > 0.1 * FIRST_BLOCK for change in loop.changes if change is not None)
    assert np.abs(expected - plain).max() > 10 * FRAME_ATOL  # the skips' effect (5.7e-4): small residual changes
    result, ours = _generate(root, tmp_path, cache="first-block", cache_threshold=FIRST_BLOCK)
    assert ours == ran
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_cosmos_magcache_takes_the_hand_computed_decisions(reference, tmp_path):
    """`--cache magcache` with tests/step_cache/references/batched.py's made-up ratios: its hand-computed decisions
    (full at 0, 3, 4), each branch its own state; frames against the pipeline with those decisions applied
    by first_block_reference.ScheduledResidualBlocks."""
    from tests.step_cache.references import batched

    assert batched.STEPS == STEPS
    pipe, root, noise, plain = reference
    blocks = pipe.transformer.transformer_blocks
    pipe.transformer.transformer_blocks = first_block_reference.ScheduledResidualBlocks(blocks, batched.MAG_STEPS, 2)
    try:
        with torch.no_grad():
            expected = pipe(latents=noise.clone(), **_common()).frames[0]
    finally:
        pipe.transformer.transformer_blocks = blocks
    assert np.abs(expected - plain).max() > 10 * FRAME_ATOL
    batched.save_ratios(tmp_path / "ratios.npy")
    result, ran = _generate(root, tmp_path, cache="magcache", **batched.knobs("magcache", tmp_path / "ratios.npy"))
    assert ran == [[full, full] for full in batched.MAG_STEPS]
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
