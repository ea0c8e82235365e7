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


def test_fp32_encoders_run_layer_by_layer_on_accelerators_too():
    """On a TPU an encoder's fp32 weights go to the matrix unit in bf16 parts, converted all at once out of the scan
    (CogVideoX's fp32 T5-XXL for a v5e: 26.4 GB of temporaries beside 19 GB of weights; its one-layer unit holds
    the weights and 90 MB more), so fp32 encoders run a layer per program there as large ones do on a CPU; bf16
    ones stay one program (UMT5-XXL's temporaries on a v5e: 2.6% of its weights)."""
    import jax
    import jax.numpy as jnp

    from vidax.zoo.compute.runtime import LAYERED_CPU_BYTES, encoder_runs_layer_by_layer, platform_override

    rows = LAYERED_CPU_BYTES // 4096 + 1
    fp32 = {"layers": jax.ShapeDtypeStruct((rows, 1024), jnp.float32)}
    bf16 = {"layers": jax.ShapeDtypeStruct((2 * rows, 1024), jnp.bfloat16)}
    small = {"layers": jax.ShapeDtypeStruct((rows // 2, 1024), jnp.float32)}
    with platform_override("tpu", "TPU v5 lite", 1, 16 << 30):
        assert [encoder_runs_layer_by_layer(w) for w in (fp32, bf16, small)] == [True, False, False]
    with platform_override("cpu", "cpu", 1, 16 << 30):
        assert [encoder_runs_layer_by_layer(w) for w in (fp32, bf16, small)] == [True, True, False]
