"""Every `--cache` method on Wan against diffusers' hooks (`pipe.transformer.enable_cache`), fp32.

One tiny perturbed `WanPipeline` (two-block DiT) saved with `save_pretrained` runs 8 guided UniPC steps
under `TaylorSeerCacheConfig` (lite mode, fp32 factors), `FirstBlockCacheConfig` and `MagCacheConfig`
(given ratios, and calibrating) in turn. Which calls ran the full DiT is read off the second block's
feed-forward (every hook replaces a skipped call's blocks after the first); vidax's sidecar must name the
same steps per CFG branch (Wan calls the DiT once per branch: each has its own state), and the frames
must agree within 2e-5. The TaylorSeer and MagCache runs go through `vidax-gen`'s flags.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
from pathlib import Path

import diffusers
import numpy as np
import pytest
import torch
import transformers

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.wan.tiny import build_tokenizer

from tests.oracle import perturb
from tests.step_cache.references.oracle_calls import recorded_calls
from tests.tiny_references import umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae

PROMPT, NEGATIVE = "a red kite over a grey sea", "blurry, low quality"
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 32, 48, 5, 8, 4.0
FRAME_ATOL = 2e-5  # the bar; the uncached parity of these pipelines is ~1e-6
FIRST_BLOCK = 0.1  # this run's first-block changes: 0.06-0.13, none within 0.5% of it; full runs alternate
# made-up per-step ratios (a model's are calibrated): with threshold 0.08 and up to 2 skips after the
# first 2 steps (retention 0.25 of 8) the accumulated error skips some steps and not others
MAG_RATIOS = [1.0, 1.02, 1.01, 0.99, 1.03, 1.0, 0.97, 0.9]
MAG = dict(cache_threshold=0.08, cache_max_skip=2, cache_retention=0.25)
# TaylorSeer: interval 3 after a 2-step warm-up, order 2, stop at 7: full runs at 0, 1, 3, 6 (refresh) and
# 7 (the stop); steps 2, 4, 5 extrapolate at offsets 1, 1, 2 with up to second-order factors
TAYLOR = dict(cache_interval=3, cache_warmup=2, cache_order=2, cache_stop=7)


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
        perturb(module, 60 + seed)
    pipe = diffusers.WanPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), **parts)
    pipe.save_pretrained(folder)
    return pipe


def _cached_run(pipe, latents, config) -> tuple[np.ndarray, np.ndarray, str]:
    """(frames, per step [cond ran, uncond ran], what the hooks printed) of one run under `config`."""
    pipe.transformer.enable_cache(config)
    printed = io.StringIO()
    try:
        with recorded_calls(pipe.transformer, pipe.transformer.blocks[1].ffn) as calls, torch.no_grad(), \
                contextlib.redirect_stdout(printed):
            frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                          num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                          output_type="np").frames[0]
    finally:
        pipe.transformer.disable_cache()
    return frames, np.asarray(calls).reshape(STEPS, 2), printed.getvalue()


def _uncached_run(pipe, latents) -> np.ndarray:
    with torch.no_grad():
        return pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                    num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                    output_type="np").frames[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wan_block_caches")
    pipe = _reference(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(3))
    np.save(folder / "latents.npy", latents.numpy())
    np.save(folder / "ratios.npy", np.asarray(MAG_RATIOS, np.float32))
    runs = {
        "none": _uncached_run(pipe, latents),
        "taylorseer": _cached_run(pipe, latents, diffusers.TaylorSeerCacheConfig(
            cache_interval=TAYLOR["cache_interval"], disable_cache_before_step=TAYLOR["cache_warmup"],
            max_order=TAYLOR["cache_order"], disable_cache_after_step=TAYLOR["cache_stop"], use_lite_mode=True,
            taylor_factors_dtype=torch.float32)),
        "first-block": _cached_run(pipe, latents, diffusers.FirstBlockCacheConfig(threshold=FIRST_BLOCK)),
        "magcache": _cached_run(pipe, latents, diffusers.MagCacheConfig(
            threshold=MAG["cache_threshold"], max_skip_steps=MAG["cache_max_skip"],
            retention_ratio=MAG["cache_retention"], num_inference_steps=STEPS, mag_ratios=MAG_RATIOS)),
        "calibrate": _cached_run(pipe, latents, diffusers.MagCacheConfig(num_inference_steps=STEPS, calibrate=True)),
    }
    return folder, runs


def _generate(folder: Path, out: Path, **extra):
    options = GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(folder / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                              guidance=GUIDANCE, latents=folder / "latents.npy", out=out, dtype="float32",
                              compile_cache=False, **extra)
    result = generate(options)
    return result, json.loads(out.with_suffix(".json").read_text())["step_cache_steps"]


def _cli(folder: Path, out: Path, *flags: str):
    """`vidax-gen` with the common flags and `flags`: (exit result, sidecar's step log or None)."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    common = ["wan2.1-t2v-1.3b", "--prompt", PROMPT, "--negative-prompt", NEGATIVE, "--weights", str(folder / "model"),
              "--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES), "--steps", str(STEPS),
              "--guidance", str(GUIDANCE), "--latents", str(folder / "latents.npy"), "--dtype", "float32",
              "--no-compile-cache", "--out", str(out)]
    result = CliRunner().invoke(app, [*common, *flags])
    sidecar = out.with_suffix(".json")
    return result, json.loads(sidecar.read_text())["step_cache_steps"] if sidecar.exists() else None


def _flags(knobs: dict) -> list[str]:
    return [item for field, value in knobs.items() for item in ("--" + field.replace("_", "-"), str(value))]


def test_the_cached_references_differ_from_the_uncached_one(reference):
    """What the parity tests compare is the cache's doing: each cached reference run is far from the plain one."""
    _, runs = reference
    for method in ("taylorseer", "first-block", "magcache"):
        assert np.abs(runs[method][0] - runs["none"]).max() > 100 * FRAME_ATOL, method


def test_taylorseer_matches_diffusers(reference, tmp_path):
    """`vidax-gen --cache taylorseer --cache-interval 3 --cache-warmup 2 --cache-order 2 --cache-stop 7`."""
    folder, runs = reference
    expected, ran, _ = runs["taylorseer"]
    assert ran[:, 0].tolist() == [True, True, False, True, False, False, True, True] and (ran[:, 0] == ran[:, 1]).all()
    result, log = _cli(folder, tmp_path / "v.npy", "--cache", "taylorseer", *_flags(TAYLOR))
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(_ran(log), ran)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    assert sidecar["cache"] == "taylorseer" and sidecar["cache_interval"] == 3 and sidecar["cache_stop"] == 7


def _ran(log) -> np.ndarray:
    return np.asarray([[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log])


def test_first_block_cache_matches_diffusers(reference, tmp_path):
    folder, runs = reference
    expected, ran, _ = runs["first-block"]
    assert ran[:, 0].tolist() == [True, False] * 4  # the oracle skipped every other step
    assert (ran[:, 0] == ran[:, 1]).all()
    result, log = _generate(folder, tmp_path / "v.npy", cache="first-block", cache_threshold=FIRST_BLOCK)
    np.testing.assert_array_equal(_ran(log), ran)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_magcache_matches_diffusers(reference, tmp_path):
    """`vidax-gen --cache magcache --mag-ratios FILE --cache-threshold .08 --cache-max-skip 2 --cache-retention .25`."""
    folder, runs = reference
    expected, ran, _ = runs["magcache"]
    # steps 0, 1 retained; then the accumulated error skips 2, 3 (max 2), runs 4, skips 5, 6, runs 7 (0.9)
    assert ran[:, 0].tolist() == [True, True, False, False, True, False, False, True] and (ran[:, 0] == ran[:, 1]).all()
    result, log = _cli(folder, tmp_path / "v.npy", "--cache", "magcache", "--mag-ratios", str(folder / "ratios.npy"),
                       *_flags(MAG))
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(_ran(log), ran)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=FRAME_ATOL, rtol=0)


def test_magcache_calibration_writes_the_reference_ratios(reference, tmp_path):
    """`--cache-calibrate FILE.npy`: every step runs (the uncached frames) and FILE holds the per-step
    magnitude ratios diffusers' calibration prints for the prompt branch."""
    folder, runs = reference
    expected, ran, printed = runs["calibrate"]
    assert ran.all()
    lines = [line for line in printed.splitlines() if line.startswith("[") and line.endswith("]")]
    printed_lists = [ast.literal_eval(line) for line in lines if not line.startswith("[MagCache]")]
    result, log = _generate(folder, tmp_path / "v.npy", cache="magcache", cache_calibrate=tmp_path / "ratios.npy")
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    ratios = np.load(tmp_path / "ratios.npy")
    assert ratios.shape == (STEPS,) and [entry["mag_ratio"] for entry in log] == pytest.approx(ratios.tolist())
    np.testing.assert_allclose(ratios, printed_lists[0], rtol=1e-4)


@pytest.mark.parametrize("extra, message", [
    (dict(cache="teacache-x"), "unknown --cache 'teacache-x'"),
    (dict(cache_interval=2), "--cache-interval need --cache"),
    (dict(cache="taylorseer", cache_warmup=0), "--cache-warmup must be at least 1"),
    (dict(cache="taylorseer", cache_interval=0), "--cache-interval must be at least 1"),
    (dict(cache="magcache", cache_retention=1.5), "--cache-retention from 0 to 1"),
    (dict(cache="first-block", cache_interval=2), "--cache first-block takes no --cache-interval"),
    (dict(cache="magcache", mag_ratios=Path("/nonexistent.npy")), "not a readable .npy"),
])
def test_cache_misuse_is_one_line(extra, message):
    """Each misuse is one PipelineError from the request's own values (`generation.prepare` checks them first)."""
    from vidax.zoo.step_caches.methods import config_from_options

    options = GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, **extra)
    with pytest.raises(PipelineError, match=message):
        config_from_options(options)


def test_misuse_fails_before_any_work(reference, tmp_path):
    folder, _ = reference
    with pytest.raises(PipelineError, match="not a readable .npy"):
        _generate(folder, tmp_path / "v.npy", cache="magcache", mag_ratios=tmp_path / "missing.npy")
    assert not list(tmp_path.iterdir())


def test_vidax_gen_cache_misuse_is_one_line(reference, tmp_path):
    folder, _ = reference
    result, _ = _cli(folder, tmp_path / "v.npy", "--cache-order", "2")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "--cache-order need --cache" in lines[0], result.output


@pytest.fixture(scope="module")
def a14b(tmp_path_factory):
    """A tiny Wan2.2 A14B pipeline (boundary 0.875) under TaylorSeer on both experts: (folder, frames, ran)."""
    folder = tmp_path_factory.mktemp("wan_a14b_taylorseer")
    pipe = _reference(folder / "model")
    second = diffusers.WanTransformer3DModel.from_config(pipe.transformer.config).eval()
    perturb(second, 70)
    pipe = diffusers.WanPipeline(tokenizer=pipe.tokenizer, text_encoder=pipe.text_encoder, vae=pipe.vae,
                                 scheduler=pipe.scheduler, transformer=pipe.transformer, transformer_2=second,
                                 boundary_ratio=0.875)
    pipe.save_pretrained(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(4))
    np.save(folder / "latents.npy", latents.numpy())
    config = dict(cache_interval=2, disable_cache_before_step=1, max_order=1, use_lite_mode=True,
                  taylor_factors_dtype=torch.float32)
    ran = []
    for dit in (pipe.transformer, pipe.transformer_2):  # each expert's own hooks: its own step count
        dit.enable_cache(diffusers.TaylorSeerCacheConfig(**config))
    with recorded_calls(pipe.transformer, pipe.transformer.blocks[1].ffn) as high, \
            recorded_calls(pipe.transformer_2, pipe.transformer_2.blocks[1].ffn) as low, torch.no_grad():
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, guidance_scale_2=3.0,
                      latents=latents.clone(), output_type="np").frames[0]
        ran = np.asarray(high + low).reshape(STEPS, 2)
    return folder, frames, ran, len(high) // 2


def test_taylorseer_starts_afresh_at_the_expert_switch(a14b, tmp_path):
    """Wan2.2 A14B: the low-noise expert's first step runs the full DiT (its hooks count from 0), as vidax's
    fresh state at the switch does; decisions and frames match."""
    folder, expected, ran, high_steps = a14b
    assert 0 < high_steps < STEPS
    warm = [True, False, True, False, True, False, True, False]  # warm-up 1, interval 2, per expert
    assert ran[:, 0].tolist() == warm[:high_steps] + warm[:STEPS - high_steps]
    options = GenerateOptions(model="wan2.2-t2v-a14b", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(folder / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                              guidance=GUIDANCE, latents=folder / "latents.npy", out=tmp_path / "v.npy",
                              dtype="float32", compile_cache=False, extra={"guidance_2": 3.0}, cache="taylorseer",
                              cache_interval=2, cache_warmup=1, cache_order=1)
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    log = json.loads((tmp_path / "v.json").read_text())["step_cache_steps"]
    np.testing.assert_array_equal(_ran(log), ran)
    assert [entry["expert"] for entry in log] == [0] * high_steps + [1] * (STEPS - high_steps)


def test_first_block_cache_on_a_mesh(reference, tmp_path):
    """CFG branches split over "data" (dp 2, one branch per device): each branch's statistic is still its own
    row's, the decisions and frames those of diffusers' per-branch hooks."""
    folder, runs = reference
    expected, ran, _ = runs["first-block"]
    result, log = _generate(folder, tmp_path / "v.npy", cache="first-block", cache_threshold=FIRST_BLOCK, dp=2)
    np.testing.assert_array_equal(_ran(log), ran)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_taylorseer_skipped_steps_stream_no_weights(reference, tmp_path, monkeypatch):
    """With `--offload-chunk 1` (two chunks per DiT call) the blocks are fetched from host memory on the five
    full steps only, and the frames are diffusers'."""
    from vidax.zoo.weights.offload import StreamedDiT

    folder, runs = reference
    expected, ran, _ = runs["taylorseer"]
    fetch, fetched = StreamedDiT._fetch, []
    monkeypatch.setattr(StreamedDiT, "_fetch", lambda self, *a: fetched.append(a[0]) or fetch(self, *a))
    result, log = _generate(folder, tmp_path / "v.npy", cache="taylorseer", offload_chunk=1, **TAYLOR)
    np.testing.assert_array_equal(_ran(log), ran)
    assert len(fetched) == 2 * int(ran[:, 0].sum()) == 10
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("method, mesh", [pytest.param("taylorseer", dict(sp=2), id="taylorseer-sp2"),
                                          pytest.param("first-block", dict(sp=2), id="first-block-sp2"),
                                          pytest.param("taylorseer", dict(dp=2, tp=2), id="taylorseer-dp2tp2")])
def test_split_over_a_mesh_takes_the_same_decisions(reference, tmp_path, monkeypatch, method, mesh):
    """sp 2 (the video tokens split over two devices): the first-block statistic is a mean over the split
    tokens; decisions and frames are those of diffusers' hooks, as on one device. TaylorSeer also with the
    CFG branches split over dp 2 and the heads over tp 2 (each branch's factors a row of the split batch)."""
    from vidax.zoo.generator import generation

    folder, runs = reference
    expected, ran, _ = runs[method]
    meshes, make_run = [], generation.Run
    monkeypatch.setattr(generation, "Run", lambda family, options, mesh, *rest: meshes.append(mesh) or make_run(
        family, options, mesh, *rest))
    knobs = TAYLOR if method == "taylorseer" else dict(cache_threshold=FIRST_BLOCK)
    result, log = _generate(folder, tmp_path / "v.npy", cache=method, **mesh, **knobs)
    axes = {"data": mesh.get("dp", 1), "tensor": mesh.get("tp", 1), "sequence": mesh.get("sp", 1)}
    assert dict(meshes[0].shape) == axes, meshes[0].shape
    np.testing.assert_array_equal(_ran(log), ran)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
