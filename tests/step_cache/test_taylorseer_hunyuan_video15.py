"""`--cache taylorseer` on HunyuanVideo-1.5, a family diffusers' cache hooks do not reach: vidax's decisions
against a schedule typed by hand, and its frames against `HunyuanVideo15Pipeline` with the whole DiT output
extrapolated by tests/step_cache/taylorseer_reference.py (torch, per CFG branch: the reference pipeline calls
the DiT once per branch), fp32, 6 steps.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from vidax.zoo.pipeline import GenerateOptions, generate

from tests.hunyuan_video15.pipelines import saved, towers  # noqa: F401  (module fixtures: the tiny pipeline)
from tests.step_cache import taylorseer_reference

PROMPT = 'a neon sign that says "OPEN" above a door'
STEPS = 6
TAYLOR = dict(cache_interval=2, cache_warmup=2, cache_order=1)
# warm-up 2 runs steps 0 and 1; then a step runs when (step - 2 - 1) % 2 == 0: steps 3 and 5
SCHEDULE = [True, True, False, True, False, True]
FRAME_ATOL = 2e-5


def test_hunyuan_video15_taylorseer_matches_a_torch_taylorseer(saved, tmp_path):  # noqa: F811
    pipe, root = saved
    latents = torch.randn(1, 4, 2, 2, 3, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "noise.npy", latents.numpy())
    run = dict(prompt=PROMPT, latents=latents, height=32, width=48, num_frames=5, num_inference_steps=STEPS,
               output_type="np")
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
    options = GenerateOptions(model="hunyuanvideo-1.5", prompt=PROMPT, weights=str(root), height=32, width=48,
                              frames=5, steps=STEPS, latents=tmp_path / "noise.npy", out=tmp_path / "v.npy",
                              compile_cache=False, dtype="float32", cache="taylorseer", **TAYLOR)
    result = generate(options)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond": full, "uncond": full} for full in SCHEDULE]
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
