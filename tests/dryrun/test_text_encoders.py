"""Text encoders beyond Wan's under `--dry-run`: T5-XXL of CogVideoX and LTX-Video, HunyuanVideo's Llama (with
CLIP-L's weights beside it, the planner's towers held together), HunyuanVideo 1.0 I2V's Llava (the image's tokens
expanded, its vision tower run; CLIP-L beside), HunyuanVideo-1.5's Qwen2.5-VL (ByT5 beside) and Cosmos-Predict2.5's
Reason1 (every layer's hidden state concatenated), at their prompt length (fp32 weights: a bf16
compile on CPU measures the CPU's fp32 copies, docs/DRY_RUN.md). The planner counts the weights; the activations
over a few hundred tokens stay within 10% beside them."""

from __future__ import annotations

import pytest

from vidax.zoo.plan.dry_run import dry_run
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.compute.planner import GIB, Layout
from vidax.zoo.registry import make_pipeline


@pytest.mark.parametrize("model", ["cogvideox1.5-5b", "ltx-video-13b", "hunyuanvideo",
                                   "hunyuanvideo-1.5-480p-t2v", "hunyuanvideo-i2v", "cosmos-predict2.5-2b"])
def test_text_encoder_planner_within_ten_percent_of_xla(model):
    options = GenerateOptions(model=model, prompt="", dtype="float32")
    stage = dry_run(make_pipeline(model, options), options, Layout(), 1, 30 * GIB, stages=("text",)).peak("text encoder")
    assert stage.temp > 0 and stage.flops > 0
    assert abs(stage.planned - stage.total) <= 0.10 * stage.total, (model, stage.planned / 2**20, stage.total / 2**20)
