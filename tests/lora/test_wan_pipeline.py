"""`vidax-gen --lora/--lora-2` end to end against diffusers' WanPipeline with the same LoRAs.

One tiny Wan2.2 A14B pipeline (two experts) saved with `save_pretrained`; three LoRAs in three formats:
diffusers/PEFT (alpha in its metadata) at 0.8 and ComfyUI's original keys (lora_down/lora_up + alpha)
at -0.5 on the high-noise `transformer`, musubi-tuner's kohya keys at 1.2 on `transformer_2`. The
reference loads them with `pipe.load_lora_weights` (`load_into_transformer_2=True` for the second expert)
and `pipe.set_adapters`, and runs from the same initial latents; vidax runs `--dtype float32`.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.lora.formats import biases, low_rank_factors, wan_modules, write_musubi, write_original, write_peft
from tests.oracle import state_of
from tests.wan.test_pipeline import FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, STEPS, WIDTH, _latents, _reference_a14b
from vidax.cli.gen import app
from vidax.translator import VidaxError
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

# fp32 on both sides at highest matmul precision (tests/wan/test_pipeline.py measures ~1e-6 without LoRAs)
FRAME_ATOL = 2e-5
STRENGTHS = {"peft": 0.8, "original": -0.5, "musubi": 1.2}


@pytest.fixture(scope="module")
def a14b_lora(tmp_path_factory):
    """(folder, latents .npy, LoRA files, diffusers frames with the LoRAs, diffusers frames without)."""
    folder = tmp_path_factory.mktemp("wan_a14b_lora")
    pipe = _reference_a14b(folder / "model")
    high, low = state_of(pipe.transformer), state_of(pipe.transformer_2)
    files = {
        "peft": write_peft(folder / "peft.safetensors", low_rank_factors(high, wan_modules(2, head=True), 4, 11),
                           alpha=2.0),
        "original": write_original(folder / "original.safetensors", low_rank_factors(high, wan_modules(2), 8, 12),
                                   alpha=4.0, diff_b=biases(high, wan_modules(2), 13)),
        "musubi": write_musubi(folder / "musubi.safetensors", low_rank_factors(low, wan_modules(2), 4, 14), alpha=8.0),
    }
    latents = _latents((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), seed=15)
    np.save(folder / "latents.npy", latents.numpy())
    common = dict(negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                  guidance_scale=GUIDANCE, guidance_scale_2=3.0, output_type="np")
    with torch.no_grad():
        plain = pipe(PROMPT, latents=latents.clone(), **common).frames[0]
        pipe.load_lora_weights(str(files["peft"]), adapter_name="peft")
        pipe.load_lora_weights(str(files["original"]), adapter_name="original")
        pipe.load_lora_weights(str(files["musubi"]), adapter_name="musubi", load_into_transformer_2=True)
        pipe.set_adapters(list(STRENGTHS), list(STRENGTHS.values()))
        frames = pipe(PROMPT, latents=latents.clone(), **common).frames[0]
    return folder, folder / "latents.npy", files, frames, plain


def _options(folder, latents, out, **extra) -> GenerateOptions:
    base = dict(model="wan2.2-t2v-a14b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder / "model"),
                height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=latents, out=out,
                dtype="float32", compile_cache=False, extra={"guidance_2": 3.0})
    return GenerateOptions(**{**base, **extra})


def test_loras_on_both_experts_match_diffusers(a14b_lora, tmp_path):
    folder, latents, files, expected, plain = a14b_lora
    assert np.abs(expected - plain).max() > 100 * FRAME_ATOL  # the LoRAs change the video
    lora = (f"{files['peft']}={STRENGTHS['peft']}", f"{files['original']}={STRENGTHS['original']}")
    result = generate(_options(folder, latents, tmp_path / "v.npy", lora=lora,
                               lora_2=(f"{files['musubi']}={STRENGTHS['musubi']}",)))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    recorded = sidecar["loras"]
    assert [r["strength"] for r in recorded["transformer"]] == [0.8, -0.5]
    assert recorded["transformer_2"][0]["source"] == str(files["musubi"]) and len(recorded["transformer_2"][0]["sha256"]) == 64


def test_cli_takes_repeated_lora_flags(a14b_lora, tmp_path):
    folder, latents, files, expected, _ = a14b_lora
    out = tmp_path / "c.npy"
    args = ["wan2.2-t2v-a14b", "--prompt", PROMPT, "--negative-prompt", NEGATIVE, "--weights", str(folder / "model"),
            "--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES), "--steps", str(STEPS),
            "--guidance", str(GUIDANCE), "--guidance-2", "3.0", "--latents", str(latents), "--dtype", "float32",
            "--no-compile-cache", "--out", str(out),
            "--lora", f"{files['peft']}=0.8", "--lora", f"{files['original']}=-0.5", "--lora-2", f"{files['musubi']}=1.2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(out), expected, atol=FRAME_ATOL, rtol=0)


def test_lora_request_errors_are_one_line_before_work(a14b_lora, tmp_path):
    folder, latents, files, _, _ = a14b_lora
    with pytest.raises(PipelineError, match="--lora-2 .*: the strength after '=' must be a number"):
        _options(folder, latents, tmp_path / "x.npy", lora_2=(f"{files['musubi']}=high",))
    one_expert = GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, weights=str(folder / "model"),
                                 out=tmp_path / "y.npy", lora_2=(str(files["musubi"]),))
    with pytest.raises(VidaxError, match="--lora-2: wan2.1-t2v-1.3b has no transformer_2"):
        generate(one_expert)
    assert not (tmp_path / "y.npy").exists()


def test_vidax_convert_bakes_the_loras_in(a14b_lora, tmp_path):
    from vidax.cli.convert import app as convert_app

    folder, latents, files, expected, _ = a14b_lora
    out = tmp_path / "baked"
    args = ["wan2.2-t2v-a14b", "--source", str(folder / "model"), "--out", str(out), "--dtype", "float32",
            "--lora", f"{files['peft']}=0.8", "--lora", f"{files['original']}=-0.5", "--lora-2", f"{files['musubi']}=1.2"]
    result = CliRunner().invoke(convert_app, args)
    assert result.exit_code == 0, result.output
    record = json.loads((out / "vidax_model.json").read_text())
    assert [r["strength"] for r in record["loras"]["transformer"]] == [0.8, -0.5]
    assert record["loras"]["transformer_2"][0]["sha256"] == json.loads(
        (out / "transformer_2" / "manifest.json").read_text())["loras"][0]["sha256"]
    video = generate(_options(out, latents, tmp_path / "b.npy", weights=str(out)))
    np.testing.assert_allclose(video.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_a_converted_folder_takes_loras_in_its_own_layout(a14b_lora, tmp_path):
    """`vidax-convert` without LoRAs (float32), then `vidax-gen --weights DIR --lora ...`: the deltas go through
    the spec's ops into the converted layout (the source read for its headers only) and match diffusers."""
    from vidax.translator import convert_model

    folder, latents, files, expected, _ = a14b_lora
    out = tmp_path / "plain"
    convert_model("wan2.2-t2v-a14b", source=str(folder / "model"), out=out, dtype="float32")
    lora = (f"{files['peft']}={STRENGTHS['peft']}", f"{files['original']}={STRENGTHS['original']}")
    result = generate(_options(out, latents, tmp_path / "d.npy", weights=str(out), lora=lora,
                               lora_2=(f"{files['musubi']}={STRENGTHS['musubi']}",)))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_a_registry_preset_names_base_model_loras_and_settings(a14b_lora, tmp_path, monkeypatch):
    """A distilled-LoRA preset is a few lines of TOML: the base model, its LoRAs per expert, and settings that
    win over the checkpoint folder's (its scheduler config says shift 3)."""
    from vidax.zoo.registry import make_pipeline

    folder, latents, files, expected, _ = a14b_lora
    preset = f"""
[models."my-a14b-lora-preset"]
alias_of = "wan2.2-t2v-a14b"
description = "Wan2.2 A14B with three LoRAs, 3 steps"
lora = ["{files['peft']}=0.8", "{files['original']}=-0.5"]
lora_2 = ["{files['musubi']}=1.2"]
settings = {{ height = {HEIGHT}, width = {WIDTH}, frames = {FRAMES}, steps = {STEPS}, guidance = {GUIDANCE}, guidance_2 = 3.0 }}
"""
    (tmp_path / "presets.toml").write_text(preset)
    monkeypatch.setenv("VIDAX_MODELS", str(tmp_path / "presets.toml"))
    options = GenerateOptions(model="my-a14b-lora-preset", prompt=PROMPT, negative_prompt=NEGATIVE, latents=latents,
                              weights=str(folder / "model"), out=tmp_path / "p.npy", dtype="float32", compile_cache=False)
    result = generate(options)
    assert result.settings["steps"] == STEPS and len(result.settings["loras"]["transformer"]) == 2
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    (tmp_path / "presets.toml").write_text(preset.replace("guidance_2 = 3.0", "guidance_2 = 3.0, shift = 7.0"))
    family = make_pipeline("my-a14b-lora-preset", options)
    assert family.folder_settings().get("shift") == 3.0 and family.resolve_settings(options).shift == 7.0
    from vidax.translator import convert_model

    baked = tmp_path / "baked"  # vidax-convert PRESET bakes its LoRAs: a run from that folder does not add them again
    convert_model("my-a14b-lora-preset", source=str(folder / "model"), out=baked, components=("transformer",))
    assert len(json.loads((baked / "vidax_model.json").read_text())["loras"]["transformer"]) == 2
    again = dataclasses.replace(options, weights=str(baked))
    assert make_pipeline("my-a14b-lora-preset", again).adapters == {}


def test_loras_on_a_tensor_parallel_mesh(a14b_lora, tmp_path):
    """The merge happens on the host before placement: a tensor-parallel mesh runs the
    merged weights too (8 fake CPU devices; offload streams the same host tree)."""
    folder, latents, files, expected, _ = a14b_lora
    lora = (f"{files['peft']}={STRENGTHS['peft']}", f"{files['original']}={STRENGTHS['original']}")
    result = generate(_options(folder, latents, tmp_path / "m.npy", lora=lora, tp=2,
                               lora_2=(f"{files['musubi']}={STRENGTHS['musubi']}",)))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


# --weights-dtype int8: tests/quantized/test_gguf_pipeline.py measures int8 frames 0.0032 from full precision
# and bounds them at 0.01; a missing scale or wrong axis moves frames by > 0.1.
INT8_FRAMES_ATOL = 0.01


def test_loras_on_an_int8_device_base(a14b_lora, tmp_path):
    """The LoRAs merge into the float32 host weights, and the merged kernels are quantized as they are placed
    (a fresh per-channel scale from the merged values): the int8 run with the LoRAs stays within the int8 bound
    of the fp32 LoRA run, and is farther from the int8 run without them than that bound. Both runs share one
    `StageCache` (as vidax-serve's jobs do), base first: 8-bit weights are not switched in place, so the cache
    must key the placed experts by their LoRAs and place them again."""
    from vidax.zoo.generator.stages import StageCache

    folder, latents, files, expected, _ = a14b_lora
    lora = (f"{files['peft']}={STRENGTHS['peft']}", f"{files['original']}={STRENGTHS['original']}")
    lora_2 = (f"{files['musubi']}={STRENGTHS['musubi']}",)
    cache = StageCache()
    try:
        base = generate(_options(folder, latents, tmp_path / "p.npy", weights_dtype="int8"), cache=cache)
        merged = generate(_options(folder, latents, tmp_path / "q.npy", lora=lora, lora_2=lora_2,
                                   weights_dtype="int8"), cache=cache)
    finally:
        cache.release()
    assert 0 < np.abs(merged.frames - expected).max() < INT8_FRAMES_ATOL
    assert np.abs(merged.frames - base.frames).max() > 3 * INT8_FRAMES_ATOL
