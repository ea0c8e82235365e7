"""Sizes the official `inference.py` pads: an official checkpoint takes any height, width and frame count.

Lightricks' `inference.py` runs `LTXVideoPipeline` at the padded size (sides up to multiples of 32, frames up
to 8k + 1; the initial noise has the padded shape), zero-pads each conditioning image by the same margins
(smaller half at the top / left) and crops the video back: `images[:, :, :F, top:-bottom, left:-right]`.
Lightricks' package is not installed here: its pipeline is reproduced as the other official-layout tests
reproduce it (`LTXConditionPipeline` on the same weights: the same conditioning and per-token stepping), run
at the padded size with the padded conditioning image, then cropped as `inference.py` crops. Frames within
2e-5. The padding arithmetic is checked against values worked out by hand from `inference.py`.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from vidax.zoo.ltx_video.latents import Padding, crop_padding, official_padding
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

from .references.ltx_spec_fixtures import save_official_file
from .references.pipelines import NEGATIVE, PROMPT, Replay, components, static_scheduler

HEIGHT, WIDTH, FRAMES = 49, 67, 12
# inference.py's run of it, by hand: 64 x 96 x 17, margins 15 rows (7 top, 8 bottom), 29 columns (14 left, 15 right)
PADDED = Padding(17, 64, 96, 7, 8, 14, 15)
LATENT = (1, 8, 3, 2, 3)  # the --latents convention: the padded size's latents
STEPS, GUIDANCE, SEED = 3, 3.0, 7
KNOBS = dict(decode_timestep=0.05, decode_noise_scale=0.0, image_cond_noise_scale=0.15, guidance_rescale=0.0)
MODEL = "ltx-video-13b-distilled"
OFFICIAL_FILE = "ltxv-13b-0.9.8-distilled.safetensors"


@pytest.mark.parametrize("request_size, want", [
    # ((H, W, F), Padding(F', H', W', top, bottom, left, right)) from inference.py's arithmetic, by hand
    ((50, 70, 12), Padding(17, 64, 96, 7, 7, 13, 13)),
    ((33, 65, 1), Padding(1, 64, 96, 15, 16, 15, 16)),  # odd margins: the extra row / column at the bottom / right
    ((704, 1216, 121), Padding(121, 704, 1216)),  # already on the grid: unchanged
    ((32, 32, 2), Padding(9, 32, 32)),
    ((31, 1, 9), Padding(9, 32, 32, 0, 1, 15, 16)),
    ((64, 96, 10), Padding(17, 64, 96)),  # ((10 - 2) // 8 + 1) * 8 + 1
])
def test_padding_arithmetic(request_size, want):
    assert official_padding(*request_size) == want


def test_crop_takes_the_request_from_the_middle():
    pad = Padding(9, 64, 96, 15, 16, 15, 16)
    video = np.arange(9 * 64 * 96 * 3, dtype=np.float32).reshape(9, 64, 96, 3)
    np.testing.assert_array_equal(crop_padding(video, pad, 5), video[:5, 15:48, 15:80])
    assert crop_padding(video, Padding(9, 64, 96), 9).shape == video.shape


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from diffusers import LTXConditionPipeline
    from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXVideoCondition
    from PIL import Image

    root = tmp_path_factory.mktemp("ltx_official_padding")
    parts = components(23, root)
    pipe = LTXConditionPipeline(scheduler=static_scheduler(), **parts)
    pipe.save_pretrained(root / "model")
    official = root / "official"
    save_official_file(official / OFFICIAL_FILE, dit=parts["transformer"], vae=parts["vae"])
    for folder in ("text_encoder", "tokenizer"):
        shutil.copytree(root / "model" / folder, official / folder)
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(root / "first.png")

    # inference.py's conditioning image: at the requested size, padded with 0 in [-1, 1] (0.5 in [0, 1])
    content = np.asarray(Image.open(root / "first.png").convert("RGB").resize((WIDTH, HEIGHT), Image.LANCZOS),
                         np.float32) / 255.0
    padded = np.full((PADDED.height, PADDED.width, 3), 0.5, np.float32)
    padded[PADDED.top:PADDED.top + HEIGHT, PADDED.left:PADDED.left + WIDTH] = content
    image = torch.from_numpy(padded).permute(2, 0, 1)[None]

    replay = Replay(SEED)
    np.save(root / "latents.npy", replay.draw(LATENT))
    replay.record(3, 0, (1, 8, 1, 2, 3))  # the image's posterior draw
    for step in range(STEPS):
        replay.record(1, step, (1, 3 * 2 * 3, 8))  # image-conditioning noise
    replay.record(2, 0, LATENT)  # decode noise (scale 0: both layouts' orders agree)
    with torch.no_grad():
        frames = pipe(conditions=[LTXVideoCondition(image=image, frame_index=0, strength=1.0)], prompt=PROMPT,
                      negative_prompt=NEGATIVE, height=PADDED.height, width=PADDED.width, num_frames=PADDED.frames,
                      frame_rate=25, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                      generator=torch.Generator().manual_seed(SEED), output_type="np", **KNOBS).frames[0]
    assert frames.shape == (PADDED.frames, PADDED.height, PADDED.width, 3)
    cropped = frames[:FRAMES, PADDED.top:PADDED.height - PADDED.bottom, PADDED.left:PADDED.width - PADDED.right]
    return root, replay, cropped


def options(root, **change) -> GenerateOptions:
    base = dict(model=MODEL, prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(root / "official"), height=HEIGHT,
                width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, fps=25, latents=root / "latents.npy",
                image=root / "first.png", out=root / "unused.npy", dtype="float32", compile_cache=False)
    return GenerateOptions(**{**base, **change}, extra=dict(KNOBS))


def test_official_layout_pads_and_crops_as_inference_py(reference, tmp_path, monkeypatch):
    root, replay, expected = reference
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy"))
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=2e-5, rtol=0)
    assert replay.used == set(replay.draws)  # every reference draw at its padded shape
    assert result.latents.shape == LATENT
    assert (result.settings["height"], result.settings["width"], result.settings["frames"]) == (HEIGHT, WIDTH, FRAMES)
    assert official_padding(HEIGHT, WIDTH, FRAMES) == PADDED
    assert result.settings["padded_size"] == [17, 64, 96] and result.settings["latent_shape"] == list(LATENT)


@pytest.mark.parametrize("change, message", [
    (dict(latents="unpadded"), r"latents have shape \(1, 8, 2, 2, 3\), these settings need \(1, 8, 3, 2, 3\)"),
    (dict(weights="model"), "--height 49 is not a multiple of 32"),  # diffusers folders keep diffusers' check
])
def test_refusals_before_work(reference, tmp_path, change, message):
    root = reference[0]
    if change.get("latents") == "unpadded":  # the request's own 12 frames' latents: not the padded run's
        np.save(tmp_path / "small.npy", np.zeros((1, 8, 2, 2, 3), np.float32))
        change = dict(latents=tmp_path / "small.npy")
    if change.get("weights") == "model":
        change = dict(weights=str(root / "model"))
    with pytest.raises(PipelineError, match=message):
        generate(options(root, out=tmp_path / "v.npy", **change))
