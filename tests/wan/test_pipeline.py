"""The Wan pipeline end to end against diffusers' `WanPipeline` / `WanImageToVideoPipeline`.

A tiny perturbed diffusers pipeline (transformer, VAE, UMT5, a tokenizer built locally, UniPC flow
scheduler) is saved with `save_pretrained`; vidax generates from that same folder, through the real
specs, with the same prompt, the same initial latents (`--latents`), scheduler and steps, and the
decoded frames must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import torch
import diffusers
import transformers

from vidax.zoo.generator.options import GenerateOptions  # noqa: E402
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.video_io import read_video  # noqa: E402
from vidax.zoo.wan.tiny import build_tokenizer  # noqa: E402

from tests.oracle import hub_cached, perturb
from tests.tiny_references import umt5_encoder as _text_encoder
from tests.tiny_references import unipc_flow_scheduler as _scheduler
from tests.tiny_references import wan_pipeline_vae as _vae

PROMPT = "a red kite over a grey sea"
NEGATIVE = "blurry, low quality"
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 32, 48, 5, 3, 4.0

# Frames are compared in [0, 1] after 3 UniPC steps with CFG, a 2-block DiT and a VAE decode, all in
# fp32 at highest matmul precision on both sides. What remains is summation-order rounding (XLA vs
# torch kernels, blockwise vs plain softmax), ~1e-6 relative per op, amplified by guidance 4 and the
# multistep solver; measured max |diff| is ~1e-6. 1e-4 is far below any real error (a wrong
# timestep, mask, norm or guidance changes frames by > 1e-2) yet leaves room for that rounding.
FRAME_ATOL = 1e-4


def _transformer(**extra):
    config = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
                  text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True,
                  qk_norm="rms_norm_across_heads", rope_max_seq_len=64)
    return diffusers.WanTransformer3DModel(**{**config, **extra}).eval()


def _reference_t2v(folder: Path):
    torch.manual_seed(0)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    parts = dict(text_encoder=_text_encoder(len(tokenizer)), transformer=_transformer(), vae=_vae())
    for seed, module in enumerate(parts.values()):
        perturb(module, seed)
    pipe = diffusers.WanPipeline(tokenizer=tokenizer, scheduler=_scheduler(), **parts)
    pipe.save_pretrained(folder)
    return pipe


def _reference_i2v(folder: Path, **transformer):
    """Wan2.1 I2V: 36 input channels, CLIP image tokens through the added k/v cross-attention."""
    torch.manual_seed(1)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    clip = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         image_size=32, patch_size=8, projection_dim=16, hidden_act="gelu")
    parts = dict(text_encoder=_text_encoder(len(tokenizer)), vae=_vae(),
                 transformer=_transformer(in_channels=36, image_dim=32, added_kv_proj_dim=32, **transformer),
                 image_encoder=transformers.CLIPVisionModelWithProjection(clip).eval())
    for seed, module in enumerate(parts.values()):
        perturb(module, 10 + seed)
    processor = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    pipe = diffusers.WanImageToVideoPipeline(tokenizer=tokenizer, scheduler=_scheduler(), image_processor=processor,
                                             **parts)
    pipe.save_pretrained(folder)
    return pipe


TINY_VAE22 = dict(base_dim=8, decoder_base_dim=12, z_dim=8, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                  temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
                  out_channels=12, scale_factor_spatial=16, latents_mean=[0.1 * i - 0.3 for i in range(8)],
                  latents_std=[0.5 + 0.1 * i for i in range(8)])


def _reference_ti2v(folder: Path):
    """Wan2.2 TI2V-5B: residual patchified VAE (16x), per-token timesteps, first-frame substitution."""
    torch.manual_seed(2)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    parts = dict(text_encoder=_text_encoder(len(tokenizer)), vae=diffusers.AutoencoderKLWan(**TINY_VAE22).eval(),
                 transformer=_transformer(in_channels=8, out_channels=8))
    for seed, module in enumerate(parts.values()):
        perturb(module, 20 + seed)
    pipe = diffusers.WanImageToVideoPipeline(tokenizer=tokenizer, scheduler=_scheduler(), expand_timesteps=True, **parts)
    pipe.save_pretrained(folder)
    return pipe


# A request diffusers rounds: frames 6 -> 4 (6 // 4) + 1 = 5, height and width floored to TI2V-5B's 32-pixel
# grid (VAE 16 x patch 2): 48x80 -> 32x64.
ODD = dict(height=48, width=80, frames=6)
ODD_DIFFUSERS = dict(height=48, width=80, num_frames=6)


def _reference_a14b(folder: Path):
    """Wan2.2 A14B T2V: `transformer` above the boundary timestep, `transformer_2` below."""
    torch.manual_seed(3)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    parts = dict(text_encoder=_text_encoder(len(tokenizer)), vae=_vae(), transformer=_transformer(),
                 transformer_2=_transformer())
    for seed, module in enumerate(parts.values()):
        perturb(module, 30 + seed)
    pipe = diffusers.WanPipeline(tokenizer=tokenizer, scheduler=_scheduler(), boundary_ratio=0.875, **parts)
    pipe.save_pretrained(folder)
    return pipe


def _reference_i2v_a14b(folder: Path):
    """Wan2.2 I2V-A14B: two 36-channel experts (boundary 0.9), no CLIP branch."""
    torch.manual_seed(4)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    parts = dict(text_encoder=_text_encoder(len(tokenizer)), vae=_vae(), transformer=_transformer(in_channels=36),
                 transformer_2=_transformer(in_channels=36))
    for seed, module in enumerate(parts.values()):
        perturb(module, 40 + seed)
    pipe = diffusers.WanImageToVideoPipeline(tokenizer=tokenizer, scheduler=_scheduler(), boundary_ratio=0.9, **parts)
    pipe.save_pretrained(folder)
    return pipe


def _latents(shape, seed=1):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    """(folder, latents .npy, diffusers frames [F, H, W, 3]) of one tiny T2V reference run."""
    folder = tmp_path_factory.mktemp("wan_t2v")
    pipe = _reference_t2v(folder / "model")
    latents = _latents((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8))
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                      output_type="np").frames[0]
        unguided = pipe(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                        guidance_scale=1.0, latents=latents.clone(), output_type="np").frames[0]
    np.save(folder / "unguided.npy", unguided)
    return folder, folder / "latents.npy", frames


def _options(folder: Path, latents: Path, out: Path, **extra) -> GenerateOptions:
    base = dict(model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder / "model"),
                height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=latents,
                out=out, dtype="float32", compile_cache=False)
    family = {k: extra.pop(k) for k in ("guidance_2",) if k in extra}  # Wan's own flags
    return GenerateOptions(**{**base, **extra}, extra=family)


@pytest.fixture(scope="module")
def i2v(tmp_path_factory):
    """(folder, image path, latents .npy, diffusers frames) of one tiny Wan2.1 I2V reference run."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("wan_i2v")
    pipe = _reference_i2v(folder / "model")
    pixels = np.random.default_rng(3).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "first.png")
    latents = _latents((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), seed=2)
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        frames = pipe(Image.open(folder / "first.png"), PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                      num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                      latents=latents.clone(), output_type="np").frames[0]
    return folder, folder / "first.png", folder / "latents.npy", frames


@pytest.fixture(scope="module")
def ti2v(tmp_path_factory):
    """(folder, image path, latents .npy, diffusers frames) of one tiny Wan2.2 TI2V-5B image-to-video run."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("wan_ti2v")
    pipe = _reference_ti2v(folder / "model")
    pixels = np.random.default_rng(4).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "first.png")
    latents = _latents((1, 8, (FRAMES - 1) // 4 + 1, HEIGHT // 16, 64 // 16), seed=4)
    np.save(folder / "latents.npy", latents.numpy())
    t2v_pipe = diffusers.WanPipeline(tokenizer=pipe.tokenizer, text_encoder=pipe.text_encoder, vae=pipe.vae,
                                     scheduler=pipe.scheduler, transformer=pipe.transformer, expand_timesteps=True)
    common = dict(negative_prompt=NEGATIVE, height=HEIGHT, width=64, num_frames=FRAMES, num_inference_steps=STEPS,
                  guidance_scale=GUIDANCE, output_type="np")
    odd_latents = _latents((1, 8, 2, 2, 4), seed=7)  # 6 frames at 48x80 run as 5 at 32x64 (see ODD)
    np.save(folder / "odd_latents.npy", odd_latents.numpy())
    with torch.no_grad():
        frames = pipe(Image.open(folder / "first.png"), PROMPT, latents=latents.clone(), **common).frames[0]
        t2v_frames = t2v_pipe(PROMPT, latents=latents.clone(), **common).frames[0]
        odd = t2v_pipe(PROMPT, latents=odd_latents, **{**common, **ODD_DIFFUSERS}).frames[0]
    np.save(folder / "odd.npy", odd)
    return folder, folder / "first.png", folder / "latents.npy", frames, t2v_frames


@pytest.fixture(scope="module")
def a14b(tmp_path_factory):
    """(folder, latents .npy, diffusers frames) of one tiny Wan2.2 A14B run (3 steps: 1 high-noise, 2 low-noise)."""
    folder = tmp_path_factory.mktemp("wan_a14b")
    pipe = _reference_a14b(folder / "model")
    latents = _latents((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), seed=5)
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, guidance_scale_2=3.0,
                      latents=latents.clone(), output_type="np").frames[0]
    return folder, folder / "latents.npy", frames


@pytest.fixture(scope="module")
def i2v_a14b(tmp_path_factory):
    """(folder, image path, latents .npy, diffusers frames) of one tiny Wan2.2 I2V-A14B run."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("wan_i2v_a14b")
    pipe = _reference_i2v_a14b(folder / "model")
    Image.fromarray(np.random.default_rng(6).integers(0, 256, (32, 48, 3), dtype=np.uint8)).save(folder / "first.png")
    latents = _latents((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), seed=6)
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        frames = pipe(Image.open(folder / "first.png"), PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                      num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE, guidance_scale_2=2.0,
                      latents=latents.clone(), output_type="np").frames[0]
    return folder, folder / "first.png", folder / "latents.npy", frames


def test_a_variant_defined_only_in_a_users_registry_file_generates(t2v, tmp_path, monkeypatch):
    """A new Wan variant is a TOML edit: this one exists only here (VIDAX_MODELS), with its own native
    settings (the reference run's size, steps and guidance), and generates diffusers' frames."""
    folder, latents, expected = t2v
    (tmp_path / "mine.toml").write_text(f"""
[models."wan-my-variant"]
family = "wan"
description = "a Wan2.1 T2V variant registered outside vidax"
repos = {{ diffusers = "example/wan-my-variant" }}
components.transformer = {{ spec = "wan/transformer" }}
components.vae = {{ spec = "wan/vae" }}
components.text_encoder = {{ spec = "encoders/umt5" }}
settings = {{ height = {HEIGHT}, width = {WIDTH}, frames = {FRAMES}, steps = {STEPS}, guidance = {GUIDANCE}, fps = 12 }}
""")
    monkeypatch.setenv("VIDAX_MODELS", str(tmp_path / "mine.toml"))
    options = GenerateOptions(model="wan-my-variant", prompt=PROMPT, negative_prompt=NEGATIVE, latents=latents,
                              weights=str(folder / "model"), out=tmp_path / "v.npy", dtype="float32", compile_cache=False)
    result = generate(options)
    assert result.fps == 12 and result.settings["steps"] == STEPS
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_t2v_matches_diffusers(t2v, tmp_path):
    folder, latents, expected = t2v
    result = generate(_options(folder, latents, tmp_path / "video.npy", save_latents=True))
    written = np.load(tmp_path / "video.npy")
    assert written.dtype == np.float32 and written.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(written, expected, atol=FRAME_ATOL, rtol=0)
    np.testing.assert_array_equal(written, result.frames)
    sidecar = json.loads((tmp_path / "video.json").read_text())
    assert sidecar["seed"] == 0 and sidecar["steps"] == STEPS and sidecar["shift"] == 3.0  # the folder's scheduler
    assert sidecar["vidax_version"] and "denoise" in sidecar["stage_seconds"]
    assert np.load(tmp_path / "video.latents.npy").shape == (1, 16, 2, HEIGHT // 8, WIDTH // 8)


@pytest.fixture(scope="module")
def flf2v(tmp_path_factory):
    """Wan2.1 FLF2V: the I2V architecture with a position table over both frames' CLIP tokens (2 x 17)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("wan_flf2v")
    pipe = _reference_i2v(folder / "model", pos_embed_seq_len=34)
    rng = np.random.default_rng(4)
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(folder / "first.png")
    Image.fromarray(rng.integers(0, 256, (36, 64, 3), dtype=np.uint8)).save(folder / "last.png")
    latents = _latents((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), seed=5)
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        frames = pipe(Image.open(folder / "first.png"), PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                      num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                      last_image=Image.open(folder / "last.png"), latents=latents.clone(), output_type="np").frames[0]
    return folder, frames


def test_first_last_frame_matches_diffusers(flf2v, tmp_path):
    """`--image` and `--last-image` (wan2.1-flf2v-14b-720p) against `WanImageToVideoPipeline(last_image=...)`."""
    folder, expected = flf2v
    options = _options(folder, folder / "latents.npy", tmp_path / "v.npy", model="wan2.1-flf2v-14b-720p",
                       image=folder / "first.png", images={"last_image": folder / "last.png"})
    result = generate(options)
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    with pytest.raises(PipelineError, match="give --last-image"):
        generate(_options(folder, folder / "latents.npy", tmp_path / "w.npy", model="wan2.1-flf2v-14b-720p",
                          image=folder / "first.png"))


def test_i2v_matches_diffusers(i2v, tmp_path):
    folder, image, latents, expected = i2v
    result = generate(_options(folder, latents, tmp_path / "video.npy", model="wan2.1-i2v-14b-480p", image=image))
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_ti2v_image_to_video_matches_diffusers(ti2v, tmp_path):
    folder, image, latents, expected, _ = ti2v
    result = generate(_options(folder, latents, tmp_path / "v.npy", model="wan2.2-ti2v-5b", image=image, width=64))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_ti2v_text_to_video_matches_diffusers(ti2v, tmp_path):
    """The same TI2V-5B checkpoint without an image: diffusers' WanPipeline with per-token timesteps."""
    folder, _, latents, _, expected = ti2v
    result = generate(_options(folder, latents, tmp_path / "v.npy", model="wan2.2-ti2v-5b", width=64))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_ti2v_rounds_sizes_like_diffusers(ti2v, tmp_path):
    """48x80 with 6 frames: diffusers makes 5 frames at 32x64 (vidax refused it: "--height 48 is not a multiple
    of 32"); so does vidax, and it records the size it ran."""
    folder = ti2v[0]
    result = generate(_options(folder, folder / "odd_latents.npy", tmp_path / "v.npy", model="wan2.2-ti2v-5b", **ODD))
    expected = np.load(folder / "odd.npy")
    assert result.frames.shape == expected.shape == (5, 32, 64, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    assert (result.settings["height"], result.settings["width"], result.settings["frames"]) == (32, 64, 5)


def test_frames_off_the_vae_grid_round_like_diffusers(t2v, tmp_path):
    """--frames 7: `WanPipeline.__call__` first turns 7 into 4 (7 // 4) + 1 = 5 (a warning), then runs the 5-frame
    request the fixture ran (vidax refused 7: "not of the form 4k+1")."""
    folder, latents, expected = t2v
    result = generate(_options(folder, latents, tmp_path / "v.npy", frames=7))
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_sizes_the_reference_cannot_run_are_refused(ti2v, flf2v, tmp_path):
    """Sizes diffusers accepts and then fails on: under TI2V-5B's 32-pixel grid (an empty latent), and FLF2V
    with frames rounded to 1 (a negative gap between the first and last frame)."""
    from vidax.zoo.registry import make_pipeline

    from PIL import Image

    cases = [(ti2v[0], dict(model="wan2.2-ti2v-5b", height=16, width=64), "--height 16 is below 32", "must be > 0"),
             (flf2v[0], dict(model="wan2.1-flf2v-14b-720p", frames=3), "needs --frames 4 or more", "negative dimension")]
    for folder, change, message, failure in cases:
        options = _options(folder, folder / "latents.npy", tmp_path / "v.npy", **change)
        with pytest.raises(PipelineError, match=message):
            make_pipeline(options.model, options).resolve_settings(options)
        # and the reference does fail on them
        pipe = diffusers.WanImageToVideoPipeline.from_pretrained(folder / "model")
        first = Image.open(folder / "first.png")
        last = {"last_image": first} if "flf2v" in options.model else {}
        size = dict(height=options.height, width=options.width, num_frames=options.frames)
        with pytest.raises((RuntimeError, ValueError), match=failure), torch.no_grad():
            pipe(first, PROMPT, num_inference_steps=1, output_type="np", **size, **last)


def test_a14b_switches_experts_like_diffusers(a14b, tmp_path):
    folder, latents, expected = a14b
    # the folder's model_index.json carries boundary_ratio 0.875: timesteps 999 | 857, 600 -> experts 0 | 1, 1
    result = generate(_options(folder, latents, tmp_path / "v.npy", model="wan2.2-t2v-a14b", guidance_2=3.0))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    swapped = generate(_options(folder, latents, tmp_path / "w.npy", model="wan2.2-t2v-a14b", guidance_2=4.0))
    assert np.abs(swapped.frames - expected).max() > 10 * FRAME_ATOL  # the second guidance scale is used


def test_i2v_a14b_matches_diffusers(i2v_a14b, tmp_path):
    folder, image, latents, expected = i2v_a14b
    result = generate(_options(folder, latents, tmp_path / "v.npy", model="wan2.2-i2v-a14b", image=image, guidance_2=2.0))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_i2v_size_follows_the_image_aspect(i2v):
    """No --height/--width: the image's aspect at the native 480x832 area, on the 16-pixel grid (diffusers' example)."""
    from vidax.zoo.registry import make_pipeline

    folder, _, latents, _ = i2v
    options = _options(folder, latents, Path("v.npy"), model="wan2.1-i2v-14b-480p", height=None, width=None)
    pipeline = make_pipeline(options.model, options)
    native = pipeline.resolve_settings(options)
    assert (native.height, native.width) == (480, 832)
    assert pipeline.size_for_image(np.zeros((1080, 1920, 3), np.uint8), native) == (464, 832)
    assert pipeline.size_for_image(np.zeros((1920, 1080, 3), np.uint8), native) == (832, 464)


def test_i2v_needs_an_image(i2v, tmp_path):
    folder, _, latents, _ = i2v
    with pytest.raises(PipelineError, match="give --image"):
        generate(_options(folder, latents, tmp_path / "v.npy", model="wan2.1-i2v-14b-480p"))


def test_t2v_without_guidance_matches_diffusers(t2v, tmp_path):
    """guidance 1: one DiT pass per step on the prompt alone (diffusers skips the negative branch)."""
    folder, latents, _ = t2v
    result = generate(_options(folder, latents, tmp_path / "v.npy", guidance=1.0))
    np.testing.assert_allclose(result.frames, np.load(folder / "unguided.npy"), atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("tp, sp, dp", [(2, 1, 2), (1, 2, 1)])
def test_t2v_on_a_mesh_matches_diffusers(t2v, tmp_path, tp, sp, dp):
    """The DiT under tensor x CFG-data parallel, and under Ulysses sequence parallel (8 fake CPU devices)."""
    folder, latents, expected = t2v
    result = generate(_options(folder, latents, tmp_path / "v.npy", tp=tp, sp=sp, dp=dp))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("mesh", [dict(), dict(tp=2, dp=2)])
def test_offloaded_blocks_match_diffusers(t2v, tmp_path, mesh):
    """--offload-chunk 1: block weights stream from host memory one block at a time (2 chunks)."""
    folder, latents, expected = t2v
    result = generate(_options(folder, latents, tmp_path / "v.npy", offload_chunk=1, **mesh))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_runs_from_a_converted_folder(t2v, tmp_path):
    """`vidax-convert` output as --weights: converted components load from it, the others (and the
    configs and tokenizer) from the source folder its manifest records."""
    from vidax.translator.models import ConvertOptions, convert_model as run

    folder, latents, expected = t2v
    converted = tmp_path / "converted"
    run(ConvertOptions("wan2.1-t2v-1.3b", source=str(folder / "model"), out=converted, dtype="float32"))
    assert (converted / "transformer" / "manifest.json").is_file()
    result = generate(_options(folder, latents, tmp_path / "v.npy", weights=str(converted)))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_runs_straight_from_the_hub(t2v, tmp_path, monkeypatch):
    """No --weights: the registry's repo, read from the Hugging Face cache (offline) and converted on the fly."""
    folder, latents, expected = t2v
    hub_cached(monkeypatch, tmp_path / "hub", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", folder / "model")
    result = generate(_options(folder, latents, tmp_path / "v.npy", weights=None))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    assert result.settings["weights_source"] == "Wan-AI/Wan2.1-T2V-1.3B-Diffusers@" + "0" * 40  # repo@commit


def test_cli_writes_playable_mp4(t2v, tmp_path):
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    folder, latents, expected = t2v
    out = tmp_path / "video.mp4"
    args = ["wan2.1-t2v-1.3b", "--prompt", PROMPT, "--negative-prompt", NEGATIVE, "--weights", str(folder / "model"),
            "--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES), "--steps", str(STEPS),
            "--guidance", str(GUIDANCE), "--latents", str(latents), "--dtype", "float32", "--out", str(out),
            "--no-compile-cache"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    decoded = read_video(out)
    assert decoded.shape == (FRAMES, HEIGHT, WIDTH, 3)
    # H.264 at crf 18 over yuv420p: chroma is subsampled, so compare means and a loose per-pixel bound
    assert abs(decoded.mean() / 255 - expected.mean()) < 0.02


@pytest.mark.parametrize("change, message", [
    (dict(height=40), "--height 40 is not a multiple of 16 for this model; nearest valid: 32"),
    (dict(frames=0), "--frames must be positive, got 0"),
    (dict(image=Path("missing.png")), "text-to-video only"),
    (dict(tp=3), "cannot be split over tp=3"),
    (dict(guidance_2=3.0), "only two-expert models"),
])
def test_bad_requests_fail_before_work(t2v, tmp_path, change, message):
    folder, latents, _ = t2v
    with pytest.raises(ValueError, match=message):
        generate(_options(folder, latents, tmp_path / "v.npy", **change))


def test_latents_of_wrong_shape_are_rejected(t2v, tmp_path):
    folder, _, _ = t2v
    np.save(tmp_path / "bad.npy", np.zeros((1, 16, 3, 4, 6), np.float32))
    with pytest.raises(PipelineError, match="these settings need"):
        generate(_options(folder, tmp_path / "bad.npy", tmp_path / "v.npy"))
