"""CogVideoX 1.0 end to end against diffusers (pipelines saved with `save_pretrained`):

- `vidax-gen cogvideox-2b` vs `CogVideoXPipeline`: the sincos position table over 226 text tokens, the
  2B VAE scaling (1.15258426), `CogVideoXDDIMScheduler` (snr_shift_scale 3) without dynamic CFG, the
  default empty negative prompt; 9 frames at 32x48 (3 latent frames, decoded 3 at once), the VAE tiled
  for real (two 48x40-pixel tiles side by side, blended over 8 columns), as cli_demo runs it.
- `vidax-gen cogvideox-5b` vs `CogVideoXPipeline` from a folder that ships `CogVideoXDDIMScheduler`: the
  folder's scheduler wins over the registry's DPM, dynamic CFG follows it (off); 1.0's RoPE on a cropped grid.
- `vidax-gen cogvideox-5b-i2v` vs `CogVideoXImageToVideoPipeline`: 1.0's RoPE (linspace crop of the
  sample grid) plus the learned position table (only at its 48x64 sample size), image latents multiplied
  by the VAE scaling, `CogVideoXDPMScheduler` with dynamic CFG.

Each reference runs once per module; vidax generates from the same folder with the same initial latents
(and, for DPM, the reference's step and posterior noise through a patched `host_noise`, tests only).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

from . import pipelines as tiny
from .pipelines import FRAMES, GUIDANCE, HEIGHT, PROMPT, STEPS, WIDTH

ATOL = 2e-5  # fp32 both sides; observed max |diff| ~3e-6 (summation order; the tiles' blends included)
SCHEDULER_2B = dict(tiny.SCHEDULER, snr_shift_scale=3.0)
# tiles of half the sample size: 48x40 pixels (6x5 latents, stride 5x4 latents = the 40x32 pixels each tile
# keeps). diffusers' tiling is consistent only where the latent stride times 8 equals the pixels a tile keeps
# (true of the released 480x720 configs); other tiny tile sizes make it return larger frames than asked.
VAE_TWO_TILES = dict(sample_height=96, sample_width=80)


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    """(options, diffusers' frames) of one tiny 2B-style run."""
    root = tmp_path_factory.mktemp("cogvideox_2b")
    folder = root / "model"
    ref = tiny.pipeline(folder, "2b", scheduler="ddim", seed=20,
                        vae=dict(VAE_TWO_TILES, scaling_factor=1.15258426),
                        scheduler_config=SCHEDULER_2B)
    ref.vae.enable_tiling()
    latents = torch.randn(1, 3, 4, HEIGHT // 8, WIDTH // 8, generator=torch.Generator().manual_seed(9))
    np.save(root / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    with torch.no_grad():
        frames = ref(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                     guidance_scale=GUIDANCE, latents=latents, output_type="np").frames[0]
    options = GenerateOptions(model="cogvideox-2b", prompt=PROMPT, weights=str(folder), height=HEIGHT, width=WIDTH,
                              frames=FRAMES, steps=STEPS, latents=root / "latents.npy", out=root / "out.npy",
                              dtype="float32", compile_cache=False)
    return options, frames


def test_2b_matches_reference(t2v):
    options, expected = t2v
    result = generate(options)
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)
    s = result.settings
    assert (s["sampler"], s["dynamic_cfg"], s["guidance"], s["negative_prompt"], s["fps"]) == ("ddim", False, 6.0, "", 8)


@pytest.fixture(scope="module")
def t2v_5b(tmp_path_factory):
    """(options, diffusers' frames) of one tiny 5B-style run, its folder shipping `CogVideoXDDIMScheduler`."""
    root = tmp_path_factory.mktemp("cogvideox_5b")
    folder = root / "model"
    ref = tiny.pipeline(folder, "5b", scheduler="ddim", seed=40, vae=dict(tiny.VAE_ONE_TILE, scaling_factor=0.7))
    latents = torch.randn(1, 3, 4, HEIGHT // 8, WIDTH // 8, generator=torch.Generator().manual_seed(12))
    np.save(root / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    with torch.no_grad():
        frames = ref(prompt=PROMPT, negative_prompt=tiny.NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                     num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents, output_type="np").frames[0]
    options = GenerateOptions(model="cogvideox-5b", prompt=PROMPT, negative_prompt=tiny.NEGATIVE, weights=str(folder),
                              height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, latents=root / "latents.npy",
                              out=root / "out.npy", dtype="float32", compile_cache=False)
    return options, frames


def test_5b_runs_the_folders_scheduler(t2v_5b):
    """The registry's cogvideox-5b samples with DPM (cli_demo); a folder shipping DDIM is sampled with DDIM, and
    dynamic CFG follows (off): diffusers' defaults for that folder. 1.0's RoPE crops the 30x45-style sample grid
    (here 3x4 patches) to the 2x3 grid of a smaller video: fractional positions."""
    options, expected = t2v_5b
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)
    assert (result.settings["sampler"], result.settings["dynamic_cfg"]) == ("ddim", False)


def test_2b_takes_exactly_226_text_tokens(t2v):
    options, _ = t2v
    with pytest.raises(PipelineError, match="--max-sequence-length must be 226"):
        generate(dataclasses.replace(options, extra={"max_sequence_length": 128}))


# The oracle's own fp32 rounding must stay well inside the bar (`test_5b_i2v_matches_reference`).
ROUNDING_OF_THE_ORACLE = ATOL / 2


@pytest.fixture(scope="module")
def i2v(tmp_path_factory):
    """(options, the reference's draws, diffusers' fp32 and fp64 frames) of one tiny 5B-I2V-style run at its
    learned table's 48x64: the same saved weights and draws, the pipeline run in fp32 and then in fp64."""
    from PIL import Image

    root = tmp_path_factory.mktemp("cogvideox_5b_i2v")
    folder = root / "model"
    height, width = 48, 64
    ref = tiny.pipeline(folder, "5b_i2v", scheduler="dpm", seed=31, vae=dict(sample_height=96, sample_width=128,
                                                                             scaling_factor=0.7))
    ref.vae.enable_tiling()
    Image.fromarray(np.random.default_rng(5).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(root / "first.png")
    shape = (1, 3, 4, height // 8, width // 8)
    latents = torch.randn(shape, generator=torch.Generator().manual_seed(11))
    np.save(root / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    image_noise, noise = tiny.reference_draws(2, STEPS, shape, image_shape=(1, 4, 1, height // 8, width // 8))
    frames = {}
    for dtype in (torch.float32, torch.float64):
        with torch.no_grad(), pytest.MonkeyPatch.context() as monkeypatch:
            tiny.draw_as_fp32(monkeypatch)  # fp64 draws the fp32 run's values (a no-op for fp32)
            frames[dtype] = ref.to(dtype)(
                image=Image.open(root / "first.png"), prompt=PROMPT, height=height, width=width, num_frames=FRAMES,
                num_inference_steps=STEPS, guidance_scale=GUIDANCE, use_dynamic_cfg=True, latents=latents.to(dtype),
                generator=torch.Generator().manual_seed(2), output_type="np").frames[0]
    options = GenerateOptions(model="cogvideox-5b-i2v", prompt=PROMPT, image=root / "first.png", weights=str(folder),
                              height=height, width=width, frames=FRAMES, steps=STEPS, latents=root / "latents.npy",
                              out=root / "out.npy", dtype="float32", compile_cache=False)
    return options, image_noise, noise, frames[torch.float32], frames[torch.float64]


def test_5b_i2v_matches_reference(i2v):
    """vidax's fp32 frames within 2e-5 of the reference's exact ones (the pipeline in fp64), on a tiny model
    whose own fp32 rounding is half of that at most.

    The first seed of this fixture (30) made a model whose frames fp32 could not pin down: its VAE decoder
    carried one ulp of rounding anywhere in it into up to 1.3e-5 of its output, and the dynamic CFG step at
    scale 7 multiplied the branches' rounding by 13. Diffusers' own fp32 frames were 1.28e-5 from its fp64
    ones (2.65e-5 with torch, MKL and oneDNN held to AVX2; 1.94e-5 under QEMU's AMD EPYC-Milan model) and
    vidax's 1.29e-5 (1.56e-5; 2.07e-5), so the two fp32 runs were 1.73e-5 apart here and 4.04e-5 on an AMD
    EPYC 7003: the test measured the CPU's rounding, not vidax. Seeds 30-35 gave the oracle's fp32 rounding
    1.33e-5, 3.9e-6, 6.4e-6, 2.13e-5, 6.7e-6 and 4.2e-6: this one (31) is the first within a quarter of the
    bar, and the first assertion keeps it within half (a change to the fixture or to diffusers that makes the
    model rounding-bound again fails there, not as a parity miss). Measured: the oracle 3.9e-6 (4.6e-6 held
    to AVX2), vidax at level 0 5.5e-6 from the exact frames."""
    options, image_noise, noise, oracle_fp32, exact = i2v
    np.testing.assert_allclose(oracle_fp32, exact, atol=ROUNDING_OF_THE_ORACLE, rtol=0)
    frames, settings = generate_with_reference_noise(options, image_noise, noise)
    assert frames.shape == exact.shape == (FRAMES, 48, 64, 3)
    np.testing.assert_allclose(frames, exact, atol=ATOL, rtol=0)
    assert (settings["sampler"], settings["dynamic_cfg"]) == ("dpm", True)


def generate_with_reference_noise(options, image_noise, noise):
    """vidax's frames and settings with the reference's posterior and step noise."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        tiny.patch_host_noise(monkeypatch, image_noise, noise)
        result = generate(options)
    return result.frames, result.settings


def test_5b_i2v_learned_table_covers_its_sample_size_only(i2v):
    options, *_ = i2v
    with pytest.raises(PipelineError, match="learned position table covers 6 x 8 latents"):
        generate(dataclasses.replace(options, height=HEIGHT, width=WIDTH))
