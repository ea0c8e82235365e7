"""Step caches on HunyuanVideo-1.5, a family diffusers' cache hooks do not reach (fp32, 6 steps, the tiny
pipeline of tests/hunyuan_video15; the reference pipeline calls the DiT once per CFG branch).

- `--cache taylorseer`: vidax's decisions against a schedule typed by hand, its frames against
  `HunyuanVideo15Pipeline` with the whole DiT output extrapolated by tests/step_cache/references/taylorseer_reference.py.
- `--cache first-block`: decisions, and frames, against the pipeline with its block list run by
  tests/step_cache/references/first_block_reference.py (each branch its own state; decisions typed by hand from the
  changes that loop measured).
- `--cache magcache`: decisions against the hand-computed ones of tests/step_cache/references/batched.py's ratios, frames
  against the pipeline with those decisions applied to its block list (each branch its own residual of the
  video stream; a skipped call passes the text stream through unchanged).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

from tests.hunyuan_video15.pipelines import saved, towers  # noqa: F401  (module fixtures: the tiny pipeline)
from tests.step_cache.references import first_block_reference, taylorseer_reference

PROMPT = 'a neon sign that says "OPEN" above a door'
STEPS = 6
TAYLOR = dict(cache_interval=2, cache_warmup=2, cache_order=1)
# warm-up 2 runs steps 0 and 1; then a step runs when (step - 2 - 1) % 2 == 0: steps 3 and 5
SCHEDULE = [True, True, False, True, False, True]
FRAME_ATOL = 2e-5
# this run's block-0 residual changes against the last full step: .404/.407 (step 1), .318/.320, .364/.366,
# .468/.469 (step 4, runs), .525/.528 (step 5, runs, against step 4's)
FIRST_BLOCK = 0.45
FIRST_BLOCK_RAN = [[True, True], [False, False], [False, False], [False, False], [True, True], [True, True]]


def _run(latents):
    return dict(prompt=PROMPT, latents=latents, height=32, width=48, num_frames=5, num_inference_steps=STEPS,
                output_type="np")


def _latents(tmp_path):
    latents = torch.randn(1, 4, 2, 2, 3, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "noise.npy", latents.numpy())
    return latents


def _options(root, tmp_path, **cache):
    return GenerateOptions(model="hunyuanvideo-1.5", prompt=PROMPT, weights=str(root), height=32, width=48,
                           frames=5, steps=STEPS, latents=tmp_path / "noise.npy", out=tmp_path / "v.npy",
                           compile_cache=False, dtype="float32", **cache)


def test_hunyuan_video15_taylorseer_matches_a_torch_taylorseer(saved, tmp_path):  # noqa: F811
    pipe, root = saved
    run = _run(_latents(tmp_path))
    with torch.no_grad():
        plain = pipe(**run).frames[0]
    forward = pipe.transformer.forward
    try:
        calls = taylorseer_reference.install(pipe.transformer, SCHEDULE, order=1, branches=2)
        with torch.no_grad():
            expected = pipe(**run).frames[0]
    finally:
        pipe.transformer.forward = forward
    assert calls == [full for full in SCHEDULE for _ in range(2)]  # both branches, one DiT call each
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL
    result = generate(_options(root, tmp_path, cache="taylorseer", **TAYLOR))
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond": full, "uncond": full} for full in SCHEDULE]
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_hunyuan_video15_first_block_matches_a_torch_first_block_cache(saved, tmp_path):  # noqa: F811
    pipe, root = saved
    run = _run(_latents(tmp_path))
    blocks = pipe.transformer.transformer_blocks
    loop = first_block_reference.FirstBlockBlocks(blocks, FIRST_BLOCK, branches=2)
    pipe.transformer.transformer_blocks = loop
    try:
        with torch.no_grad():
            expected = pipe(**run).frames[0]
    finally:
        pipe.transformer.transformer_blocks = blocks
    ran = np.asarray(loop.decisions).reshape(STEPS, 2)
    assert ran.tolist() == FIRST_BLOCK_RAN
    assert all(abs(change - FIRST_BLOCK) > 0.01 for change in loop.changes if change is not None)
    result = generate(_options(root, tmp_path, cache="first-block", cache_threshold=FIRST_BLOCK))
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    np.testing.assert_array_equal([[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log], ran)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_hunyuan_video15_magcache_takes_the_hand_computed_decisions(saved, tmp_path):  # noqa: F811
    """`--cache magcache` with tests/step_cache/references/batched.py's made-up ratios: its hand-computed decisions (full at
    0, 3, 4) for each branch; frames against the pipeline with those decisions applied by
    first_block_reference.ScheduledResidualBlocks."""
    from tests.step_cache.references import batched

    assert batched.STEPS == STEPS
    pipe, root = saved
    run = _run(_latents(tmp_path))
    blocks = pipe.transformer.transformer_blocks
    with torch.no_grad():
        plain = pipe(**run).frames[0]
        pipe.transformer.transformer_blocks = first_block_reference.ScheduledResidualBlocks(
            blocks, batched.MAG_STEPS, branches=2, video=0)
        try:
            expected = pipe(**run).frames[0]
        finally:
            pipe.transformer.transformer_blocks = blocks
    assert np.abs(expected - plain).max() > 10 * FRAME_ATOL
    batched.save_ratios(tmp_path / "ratios.npy")
    result = generate(_options(root, tmp_path, cache="magcache", **batched.knobs("magcache", tmp_path / "ratios.npy")))
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    ran = [[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log]
    assert ran == [[full, full] for full in batched.MAG_STEPS]
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
