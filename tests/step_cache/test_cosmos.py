"""`--cache taylorseer` on Cosmos-Predict2.5, a family diffusers' cache hooks do not reach: vidax's decisions
against a schedule typed by hand, its frames against `Cosmos2_5_PredictBasePipeline` (T2V, 6 steps, fp32,
the tiny pipeline of tests/cosmos) with the whole DiT output extrapolated per CFG branch by
tests/step_cache/taylorseer_reference.py (the reference pipeline calls the DiT once per branch).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from vidax.zoo.pipeline import GenerateOptions, generate

from tests.cosmos import reference as ref
from tests.cosmos.helpers import randn
from tests.step_cache import taylorseer_reference

STEPS = 6
TAYLOR = dict(cache_interval=2, cache_warmup=2, cache_order=1)
SCHEDULE = [True, True, False, True, False, True]  # warm-up 0, 1; then (step - 3) % 2 == 0: 3 and 5
FRAME_ATOL = 2e-5


def test_cosmos_taylorseer_matches_a_torch_taylorseer(tmp_path):
    pipe = ref.build(tmp_path)
    noise = randn(*ref.LATENT_SHAPE, seed=11)
    np.save(tmp_path / "noise.npy", noise.numpy())
    common = dict(prompt=ref.PROMPT, height=ref.HEIGHT, width=ref.WIDTH, num_frames=ref.FRAMES,
                  num_inference_steps=STEPS, output_type="np")
    with torch.no_grad():
        plain = pipe(latents=noise.clone(), **common).frames[0]
    forward = pipe.transformer.forward
    try:
        calls = taylorseer_reference.install(pipe.transformer, SCHEDULE, order=1, branches=2)
        with torch.no_grad():
            expected = pipe(latents=noise.clone(), **common).frames[0]
    finally:
        pipe.transformer.forward = forward
    assert calls == [full for full in SCHEDULE for _ in range(2)]
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL
    options = GenerateOptions(model="cosmos-predict2.5-2b", prompt=ref.PROMPT, weights=str(tmp_path / "diffusers"),
                              height=ref.HEIGHT, width=ref.WIDTH, frames=ref.FRAMES, steps=STEPS,
                              latents=tmp_path / "noise.npy", out=tmp_path / "v.npy", dtype="float32",
                              compile_cache=False, cache="taylorseer", **TAYLOR)
    result = generate(options)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"] for entry in log] == [{"cond": full, "uncond": full} for full in SCHEDULE]
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
