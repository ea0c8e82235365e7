"""Step caches on LTX-2, whose DiT returns video and audio together (a family diffusers' cache hooks do not
reach). The tiny LTX-2.0 pipeline of tests/ltx2 (T2V with its soundtrack, 6 steps, fp32), CFG only: the
reference batches the pair in one call (`cache_context("cond_uncond")`), so one statistic over both rows
and one decision for both streams.

- `--cache taylorseer`: decisions against the schedule typed by hand; frames and waveform against
  `LTX2Pipeline` with both DiT outputs extrapolated by taylorseer_reference.py.
- `--cache first-block`: decisions and outputs against the pipeline with its block list run by
  first_block_reference.AudioVideoBlocks (the statistic on block 0's video residual; both streams'
  residuals of the remaining blocks cached).
- `--cache magcache`: the hand-computed decisions of tests/step_cache/references/batched.py's ratios, outputs against
  the pipeline with them applied to its block list (both streams' residuals).
With STG or modality isolation on, the reference calls the DiT apart for those passes (own contexts) while
vidax batches every pass: the first-block cache is refused there in one line (tested).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

from tests.ltx2.references.pipelines import FPS, GUIDANCE, NEGATIVE, PROMPT, SIZE, components, initial_noise
from tests.oracle import to_np
from tests.step_cache.references import batched, first_block_reference, taylorseer_reference, torch_loops
from tests.step_cache.references.batched import MAG_STEPS, STEPS, TAYLOR, TAYLOR_STEPS

ATOL = 2e-5  # the uncached LTX-2 parity bar (tests/ltx2/test_generate.py)
CFG_ONLY = dict(stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0, audio_modality_scale=1.0)
# this run's block-0 video residual changes against the last full step: .103 (step 1), .136, .222 (step 3,
# runs), .120, .189 (step 5, runs)
FIRST_BLOCK = 0.17
FIRST_BLOCK_RAN = [True, False, False, True, False, True]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from diffusers import LTX2Pipeline

    root = tmp_path_factory.mktemp("ltx2_step_cache")
    pipe = LTX2Pipeline(**components(root))
    pipe.save_pretrained(root / "model")
    video, audio = initial_noise(pipe, 0, **SIZE)
    np.save(root / "noise.npy", video)
    np.save(root / "audio_noise.npy", audio)
    batched.save_ratios(root / "ratios.npy")

    def run():
        with torch.no_grad():
            out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=SIZE["frames"], height=SIZE["height"],
                       width=SIZE["width"], frame_rate=FPS, num_inference_steps=STEPS,
                       generator=torch.Generator().manual_seed(0), output_type="np", **{**GUIDANCE, **CFG_ONLY})
        return out.frames[0], to_np(out.audio[0])

    runs = {"none": run()}
    with torch_loops.replaced(pipe.transformer, "forward"):
        runs["taylor_calls"] = taylorseer_reference.install(pipe.transformer, TAYLOR_STEPS, order=1, branches=1)
        runs["taylorseer"] = run()
    blocks = pipe.transformer.transformer_blocks
    loops = {"first-block": first_block_reference.AudioVideoBlocks(blocks, threshold=FIRST_BLOCK),
             "magcache": first_block_reference.AudioVideoBlocks(blocks, schedule=MAG_STEPS)}
    runs.update(torch_loops.runs_with_loops(pipe.transformer, "transformer_blocks", loops, run))
    return root, runs, loops["first-block"]


def _generate(root, tmp_path, flags=CFG_ONLY, **cache):
    options = GenerateOptions(model="ltx-2", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(root / "model"),
                              steps=STEPS, fps=FPS, latents=root / "noise.npy", out=tmp_path / "out.npy",
                              compile_cache=False, dtype="float32", **SIZE, **cache,
                              extra={"stg_blocks": "1", "audio_latents": root / "audio_noise.npy", **flags})
    result = generate(options)
    log = torch_loops.step_log(tmp_path / "out.npy")
    return result, [entry["full_dit"]["cond_uncond"] for entry in log]


def _check(result, expected, plain, moved=100 * ATOL):
    frames, wave = expected
    assert max(np.abs(frames - plain[0]).max(), np.abs(wave - plain[1]).max()) > moved  # the cache's doing
    np.testing.assert_allclose(result.frames, frames, atol=ATOL, rtol=0)
    np.testing.assert_allclose(result.audio, wave, atol=ATOL, rtol=0)


def test_taylorseer_extrapolates_video_and_audio(reference, tmp_path):
    root, runs, _ = reference
    assert runs["taylor_calls"] == TAYLOR_STEPS
    result, ran = _generate(root, tmp_path, cache="taylorseer", **TAYLOR)
    assert ran == TAYLOR_STEPS
    _check(result, runs["taylorseer"], runs["none"])


def test_first_block_matches_a_torch_first_block_cache(reference, tmp_path):
    root, runs, loop = reference
    assert loop.decisions == FIRST_BLOCK_RAN
    assert all(abs(change - FIRST_BLOCK) > 0.1 * FIRST_BLOCK for change in loop.changes if change is not None)
    result, ran = _generate(root, tmp_path, cache="first-block", cache_threshold=FIRST_BLOCK)
    assert ran == FIRST_BLOCK_RAN
    _check(result, runs["first-block"], runs["none"])


def test_magcache_takes_the_hand_computed_decisions(reference, tmp_path):
    root, runs, _ = reference
    result, ran = _generate(root, tmp_path, cache="magcache", **batched.knobs("magcache", root / "ratios.npy"))
    assert ran == MAG_STEPS
    _check(result, runs["magcache"], runs["none"])


def test_first_block_with_stg_is_refused(reference, tmp_path):
    root, *_ = reference
    with pytest.raises(PipelineError, match="cond_uncond, uncond_stg"):
        _generate(root, tmp_path, flags={"stg_scale": 1.0, "modality_scale": 1.0, "audio_modality_scale": 1.0},
                  cache="first-block", cache_threshold=FIRST_BLOCK)
    assert not (tmp_path / "out.npy").exists()
