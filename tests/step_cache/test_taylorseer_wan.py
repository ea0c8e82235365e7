"""`--cache taylorseer` on Wan against diffusers' `TaylorSeerCacheConfig` hook (lite mode, fp32 factors).

A tiny perturbed `WanPipeline` (two-block DiT) saved with `save_pretrained` runs 8 UniPC steps with CFG
with `pipe.transformer.enable_cache(...)`; vidax generates from the same folder. Which DiT calls ran
the full model in diffusers is read off a forward hook on the first block's feed-forward (lite mode
replaces a skipped call's blocks by zeros and its `proj_out` by the Taylor series); vidax's sidecar
must name the same steps per branch, and the frames must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import diffusers
import numpy as np
import pytest
import torch
import transformers

from vidax.zoo.pipeline import GenerateOptions, PipelineError, generate
from vidax.zoo.wan.tiny import build_tokenizer

from tests.oracle import perturb
from tests.step_cache.oracle_calls import full_dit_calls
from tests.tiny_references import umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae

PROMPT, NEGATIVE = "a red kite over a grey sea", "blurry, low quality"
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 32, 48, 5, 8, 4.0
# interval 3 after a 2-step warm-up, order 2, stop at 7: full runs at 0, 1, 3, 6 (refresh) and 7 (the
# stop); steps 2, 4, 5 extrapolate at offsets 1, 1, 2 with up to second-order factors
KNOBS = dict(cache_interval=3, cache_warmup=2, cache_order=2, cache_stop=7)
FULL_STEPS = [True, True, False, True, False, False, True, True]
# Frames after 8 guided UniPC steps, fp32 at highest precision on both sides; the uncached parity of the
# same pipeline is ~1e-6 (tests/wan/test_pipeline.py). The bar for cached runs.
FRAME_ATOL = 2e-5


def _reference(folder: Path) -> diffusers.WanPipeline:
    torch.manual_seed(0)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    dit = diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_max_seq_len=64).eval()
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), transformer=dit, vae=wan_pipeline_vae())
    for seed, module in enumerate(parts.values()):
        perturb(module, 50 + seed)
    pipe = diffusers.WanPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), **parts)
    pipe.save_pretrained(folder)
    return pipe


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(folder, latents .npy, diffusers frames, per step [cond ran, uncond ran]) of one cached reference run."""
    folder = tmp_path_factory.mktemp("wan_taylorseer")
    pipe = _reference(folder / "model")
    latents = torch.randn((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(1))
    np.save(folder / "latents.npy", latents.numpy())
    pipe.transformer.enable_cache(diffusers.TaylorSeerCacheConfig(
        cache_interval=KNOBS["cache_interval"], disable_cache_before_step=KNOBS["cache_warmup"],
        max_order=KNOBS["cache_order"], disable_cache_after_step=KNOBS["cache_stop"], use_lite_mode=True,
        taylor_factors_dtype=torch.float32))
    calls = full_dit_calls(pipe.transformer, pipe.transformer.blocks[0].ffn)
    with torch.no_grad():
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                      output_type="np").frames[0]
    return folder, folder / "latents.npy", frames, np.asarray(calls).reshape(STEPS, 2)


def _options(folder: Path, latents: Path, out: Path, **extra) -> GenerateOptions:
    return GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder / "model"),
                           height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=latents,
                           out=out, dtype="float32", compile_cache=False, **extra)


def test_reference_skips_the_steps_the_rule_names(reference):
    """The oracle itself: diffusers' hook ran the full DiT on exactly these steps, for both branches."""
    *_, ran = reference
    assert ran[:, 0].tolist() == FULL_STEPS and ran[:, 1].tolist() == FULL_STEPS


def test_taylorseer_matches_diffusers_steps_and_frames(reference, tmp_path):
    folder, latents, expected, ran = reference
    result = generate(_options(folder, latents, tmp_path / "v.npy", cache="taylorseer", **KNOBS))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    log = sidecar["step_cache_steps"]
    assert [entry["step"] for entry in log] == list(range(STEPS))
    assert [entry["full_dit"]["cond"] for entry in log] == ran[:, 0].tolist()
    assert [entry["full_dit"]["uncond"] for entry in log] == ran[:, 1].tolist()
    assert sidecar["cache"] == "taylorseer" and sidecar["cache_interval"] == 3 and sidecar["cache_stop"] == 7
    uncached = generate(_options(folder, latents, tmp_path / "u.npy"))  # the cache changed the frames
    assert np.abs(uncached.frames - result.frames).max() > 100 * FRAME_ATOL


@pytest.mark.parametrize("extra, message", [
    (dict(cache="teacache-x"), "unknown --cache 'teacache-x'"),
    (dict(cache_interval=2), "--cache-interval need --cache"),
    (dict(cache="taylorseer", cache_warmup=0), "--cache-warmup must be at least 1"),
    (dict(cache="taylorseer", cache_interval=0), "--cache-interval must be at least 1"),
])
def test_cache_misuse_is_one_line_before_any_work(reference, tmp_path, extra, message):
    folder, latents, *_ = reference
    with pytest.raises(PipelineError, match=message):
        generate(_options(folder, latents, tmp_path / "v.npy", **extra))
    assert not list(tmp_path.iterdir())


def test_vidax_gen_cache_flags(reference, tmp_path):
    """The flags reach the run: the written frames and sidecar are the library call's; misuse is one line."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    folder, latents, expected, ran = reference
    common = ["wan2.1-t2v-1.3b", "--prompt", PROMPT, "--negative-prompt", NEGATIVE, "--weights", str(folder / "model"),
              "--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES), "--steps", str(STEPS),
              "--guidance", str(GUIDANCE), "--latents", str(latents), "--dtype", "float32", "--no-compile-cache"]
    flags = ["--cache", "taylorseer", "--cache-interval", "3", "--cache-warmup", "2", "--cache-order", "2",
             "--cache-stop", "7"]
    result = CliRunner().invoke(app, [*common, *flags, "--out", str(tmp_path / "v.npy")])
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=FRAME_ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    assert [entry["full_dit"]["uncond"] for entry in log] == ran[:, 1].tolist()
    bad = CliRunner().invoke(app, [*common, "--cache-order", "2", "--out", str(tmp_path / "w.npy")])
    lines = [line for line in bad.output.splitlines() if line.strip()]
    assert bad.exit_code != 0 and len(lines) == 1 and "--cache-order need --cache" in lines[0], bad.output
