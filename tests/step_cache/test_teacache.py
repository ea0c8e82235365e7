"""`--cache teacache` against the TeaCache reference algorithm run on diffusers' DiTs (fp32), and
`--cache easycache` against ComfyUI's EasyCache rule written in torch (tests/step_cache/references/easycache_reference.py)
on the same Wan pipeline.

diffusers has no TeaCache hook: tests/step_cache/references/teacache_reference.py runs the reference's loop (written
there in torch, independently of vidax) around the tiny pipelines' block lists, deciding from the
published coefficients typed in tests/step_cache/test_teacache_easycache_rules.py. vidax must take the
same decision per step and CFG branch, measure the same changes and make frames within 2e-5.

- Wan (one DiT call per branch, each branch its own accumulator): the time embedding `e` (warm-up 1,
  final step 1) through `vidax-gen`, and `--cache-use-ret-steps` (the time projection `e0`, 5 warm-up
  steps, no final step).
- LTX-Video (both branches in one call: one statistic over the pair): block 0's modulated input with
  the published LTX-Video 0.9.1 set picked by `--cache-coefficients`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

from tests.step_cache.references import teacache_reference as reference_loop
from tests.step_cache.test_teacache_easycache_rules import PUBLISHED
from tests.step_cache.families.test_wan import GUIDANCE, HEIGHT, NEGATIVE, PROMPT, STEPS, WIDTH, FRAMES, _cli, _reference

FRAME_ATOL = 2e-5
# The tiny model's time embedding changes by 0.50-1.03 between steps, far outside the range the polynomial
# was fitted on: rescaled 204.7, 1467.8, 92.3, 878.2, 392.2, 31.2 at steps 1-6 (e depends on the timestep
# alone, so skips do not change them). Threshold 300: step 1 skips (204.7), 2 runs (1672.5), 3 skips (92.3),
# 4 runs (970.5), 5 runs (392.2), 6 skips (31.2), 7 runs (the final step); step 0 runs (warm-up).
WAN_E = dict(threshold=300.0, expected=[True, False, True, False, True, True, False, True])
# e0's rescaled changes are all negative here: after the 5 warm-up steps every step skips (no final step).
WAN_E0 = dict(threshold=0.1, expected=[True] * 5 + [False] * 3)


def _wan_reference_run(pipe, latents, mode: str, threshold: float):
    """(frames, decisions [steps, 2], changes [steps, 2]) of the reference TeaCache loop on the tiny Wan."""
    warmup, final = (5, 0) if mode == "e0" else (1, 1)
    seen, hook = reference_loop.wan_time_inputs(pipe.transformer)
    blocks = reference_loop.install(pipe.transformer, "blocks", modulated=lambda *_: seen[mode],
                                    coefficients=PUBLISHED[("wan2.1-t2v-1.3b", mode)], threshold=threshold,
                                    warmup=warmup, final=final, steps=STEPS, branches=2)
    try:
        with torch.no_grad():
            frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                          num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                          output_type="np").frames[0]
    finally:
        hook.remove()
        reference_loop.restore(pipe.transformer, "blocks", blocks)
    changes = [np.nan if c is None else c for c in blocks.changes]
    return frames, np.asarray(blocks.decisions).reshape(STEPS, 2), np.asarray(changes).reshape(STEPS, 2)


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wan_teacache")
    pipe = _reference(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(3))
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        plain = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                     num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                     output_type="np").frames[0]
    runs = {mode: _wan_reference_run(pipe, latents, mode, knobs["threshold"])
            for mode, knobs in (("e", WAN_E), ("e0", WAN_E0))}
    PIPES[folder] = pipe
    return folder, plain, runs


PIPES = {}  # the module's reference pipeline, by folder


def wan_pipe(folder):
    return PIPES[folder]


def _log_arrays(log, branches=("cond", "uncond")):
    ran = np.asarray([[entry["full_dit"][b] for b in branches] for entry in log])
    changes = np.asarray([[np.nan if entry["change"][b] is None else entry["change"][b] for b in branches]
                          for entry in log])
    return ran, changes


def test_wan_teacache_matches_the_reference_loop(wan, tmp_path):
    """`vidax-gen --cache teacache --cache-threshold 300`: per branch the reference's decisions (each branch
    its own accumulator), its measured changes, and its frames; the skips changed the frames."""
    folder, plain, runs = wan
    expected, ran, changes = runs["e"]
    assert ran[:, 0].tolist() == WAN_E["expected"] and (ran[:, 0] == ran[:, 1]).all()
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL
    result, log = _cli(folder, tmp_path / "v.npy", "--cache", "teacache", "--cache-threshold", "300")
    assert result.exit_code == 0, result.output
    ours, measured = _log_arrays(log)
    np.testing.assert_array_equal(ours, ran)
    np.testing.assert_allclose(measured, changes, rtol=1e-5, equal_nan=True)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    assert sidecar["cache"] == "teacache" and sidecar["cache_threshold"] == 300.0


def test_wan_teacache_use_ret_steps(wan, tmp_path):
    """`--cache-use-ret-steps`: the time projection e0, 5 warm-up steps, none at the end."""
    folder, _, runs = wan
    expected, ran, changes = runs["e0"]
    assert ran[:, 0].tolist() == WAN_E0["expected"] and (ran[:, 0] == ran[:, 1]).all()
    options = GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(folder / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                              guidance=GUIDANCE, latents=folder / "latents.npy", out=tmp_path / "v.npy",
                              dtype="float32", compile_cache=False, cache="teacache",
                              cache_threshold=WAN_E0["threshold"], cache_use_ret_steps=True)
    result = generate(options)
    ours, measured = _log_arrays(json.loads((tmp_path / "v.json").read_text())["step_cache_steps"])
    np.testing.assert_array_equal(ours, ran)
    np.testing.assert_allclose(measured, changes, rtol=1e-5, equal_nan=True)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("extra, message", [
    (dict(cache="teacache"), "needs --cache-threshold"),
    (dict(cache="teacache", cache_threshold=0.1, cache_coefficients="cosmos-predict2.5-2b"),
     "no TeaCache coefficients for cosmos-predict2.5-2b"),
    (dict(cache="teacache", cache_threshold=0.1, cache_coefficients="ltx-video-2b", cache_use_ret_steps=True),
     "no use_ret_steps"),
    (dict(cache="first-block", cache_coefficients="ltx-video-2b"), "takes no --cache-coefficients"),
    (dict(cache="easycache", cache_start_percent=0.5, cache_end_percent=0.4), "--cache-start-percent <="),
    (dict(cache="teacache", cache_threshold=0.1, cache_start_percent=0.5), "takes no --cache-start-percent"),
])
def test_teacache_misuse_is_one_line(extra, message):
    from vidax.zoo.step_caches.methods import config_from_options

    with pytest.raises(PipelineError, match=message):
        config_from_options(GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, **extra))


# --- EasyCache (ComfyUI's node) on the same pipeline --------------------------------------------------

# ComfyUI's defaults; at shift 3 steps 0-1 lie before the window, 2 and 3 run to measure the rate, then the
# cumulative change is .150 at step 4 (skips), .459 at 5 (runs), .189 at 6 (skips), .562 at 7 (runs)
EASY = dict(threshold=0.2, start=0.15, end=0.95)
EASY_EXPECTED = [[True, True]] * 4 + [[False, False], [True, True], [False, False], [True, True]]
# device reads per step: none before the window (0-1) and at its first step (2), then one fused vector
EASY_READS = [0, 0, 0] + [1000] * 5


def _count_device_reads(monkeypatch) -> list[int]:
    """Per EasyCache step, how many device values were read on the host (`float(x)`, `x.item()`,
    `jax.device_get`, `np.asarray(x)` through `__array__`), and the fused reads of `read_scalars` (added
    as 1000s): the issue allows one device-to-host scalar per decision step."""
    from jax._src import array

    from vidax.zoo.step_caches import methods as step_cache, easy as step_cache_easy

    count, per_step = [0], []
    value, to_array, read = array.ArrayImpl._value, array.ArrayImpl.__array__, step_cache_easy.read_scalars

    def counted_value(self):
        count[0] += 1
        return value.fget(self)

    def counted_array(self, *args, **kwargs):
        count[0] += 1
        return to_array(self, *args, **kwargs)

    def counted_read(values):
        count[0] += 1000
        with monkeypatch.context() as quiet:  # the helper's own transfer counts once, as 1000
            quiet.setattr(array.ArrayImpl, "_value", value)
            quiet.setattr(array.ArrayImpl, "__array__", to_array)
            return read(values)

    step = step_cache.StepCache._easycache

    def counted_step(self, *args, **kwargs):
        count[0] = 0
        with monkeypatch.context() as patch:
            patch.setattr(array.ArrayImpl, "_value", property(counted_value))
            patch.setattr(array.ArrayImpl, "__array__", counted_array)
            out = step(self, *args, **kwargs)
        per_step.append(count[0])
        return out

    monkeypatch.setattr(step_cache_easy, "read_scalars", counted_read)
    monkeypatch.setattr(step_cache.StepCache, "_easycache", counted_step)
    return per_step


def test_wan_easycache_matches_the_comfyui_rule(wan, tmp_path, monkeypatch):
    """`--cache easycache --cache-threshold T --cache-start-percent S --cache-end-percent E` against
    tests/step_cache/references/easycache_reference.py on diffusers' Wan (calls per branch; the prompt branch decides);
    each step reads at most one fused vector from the device (none before the window or at its first step)."""
    from tests.step_cache.references import easycache_reference

    folder, plain, _ = wan
    pipe = wan_pipe(folder)
    latents = torch.from_numpy(np.load(folder / "latents.npy"))
    forward = pipe.transformer.forward
    try:
        record = easycache_reference.install(pipe.transformer, EASY["threshold"], EASY["start"], EASY["end"],
                                             shift=float(pipe.scheduler.config.flow_shift), branches=2)
        with torch.no_grad():
            expected = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                            num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents,
                            output_type="np").frames[0]
    finally:
        pipe.transformer.forward = forward
    ran = np.asarray(record["full"]).reshape(STEPS, 2)
    assert all(abs(total - EASY["threshold"]) > 0.01 for total in record["sums"])
    assert ran.tolist() == EASY_EXPECTED
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL
    reads = _count_device_reads(monkeypatch)
    result, log = _cli(folder, tmp_path / "v.npy", "--cache", "easycache", "--cache-threshold", str(EASY["threshold"]),
                       "--cache-start-percent", str(EASY["start"]), "--cache-end-percent", str(EASY["end"]))
    assert result.exit_code == 0, result.output
    assert reads == EASY_READS
    np.testing.assert_array_equal([[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log], ran)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=FRAME_ATOL, rtol=0)
