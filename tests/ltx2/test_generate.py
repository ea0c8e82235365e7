"""The generator behind `vidax-gen ltx-2`, end to end, against diffusers `LTX2Pipeline`.

A tiny LTX-2.0-shaped pipeline (tests/ltx2/pipelines.py) saved with `save_pretrained` is the weights
folder. diffusers runs once per module from its generator's first two draws (video noise, then audio
noise); vidax gets the same draws as --latents `[1, C, F', H', W']` and --audio-latents `[1, Ca, L, M']`
(both in the sampler's normalised space) and must give the same frames and waveform. Every guidance
term is on (CFG, STG on block 1, modality isolation, rescale; the audio scales their own).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.pipeline import GenerateOptions, PipelineError
from vidax.zoo.registry import make_pipeline

from .pipelines import FPS, GUIDANCE, NEGATIVE, PROMPT, SIZE, components, initial_noise, to_np

ATOL = 2e-5  # fp32 end to end (Gemma, connectors, 2 steps x 3 DiT calls, VAE, audio VAE, vocoder)
STEPS = 2
FLAGS = dict(stg_blocks="1")  # the tiny DiT has 2 blocks (LTX-2.0's native STG block is 29)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from diffusers import LTX2Pipeline

    root = tmp_path_factory.mktemp("ltx2_generate")
    pipe = LTX2Pipeline(**components(root))
    pipe.save_pretrained(root / "model")
    return pipe, root / "model"


@pytest.fixture(scope="module")
def reference_run(saved, tmp_path_factory):
    """(--latents, --audio-latents, diffusers' frames [F, H, W, 3], diffusers' waveform [2, n])."""
    pipe, _ = saved
    folder = tmp_path_factory.mktemp("ltx2_reference_run")
    video, audio = initial_noise(pipe, 0, **SIZE)
    np.save(folder / "noise.npy", video)
    np.save(folder / "audio_noise.npy", audio)
    with torch.no_grad():
        out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=SIZE["frames"], height=SIZE["height"],
                   width=SIZE["width"], frame_rate=FPS, num_inference_steps=STEPS,
                   generator=torch.Generator().manual_seed(0), output_type="np", **GUIDANCE)
    return folder / "noise.npy", folder / "audio_noise.npy", out.frames[0], to_np(out.audio[0])


def options(weights, run, tmp_path, **extra) -> GenerateOptions:
    noise, audio_noise = run[:2]
    flags = {**FLAGS, "audio_latents": audio_noise, **extra.pop("extra", {})}
    base = dict(model="ltx-2", prompt=PROMPT, negative_prompt=NEGATIVE, weights=None if weights is None else str(weights),
                steps=STEPS, fps=FPS, latents=noise, out=tmp_path / "out.npy", compile_cache=False, dtype="float32",
                extra=flags, **SIZE)
    return GenerateOptions(**{**base, **extra})


def check(result, run):
    frames, wave = run[2:]
    assert result.frames.shape == frames.shape == (9, 32, 64, 3)
    np.testing.assert_allclose(result.frames, frames, atol=ATOL, rtol=0)
    assert result.audio.shape == wave.shape and result.sample_rate == 24000
    np.testing.assert_allclose(result.audio, wave, atol=ATOL, rtol=0)


def test_generate_matches_reference(saved, reference_run, tmp_path):
    _, root = saved
    opts = options(root, reference_run, tmp_path)
    result = make_pipeline(opts.model, opts).generate(opts)
    check(result, reference_run)
    s = result.settings
    assert (s["guidance"], s["audio_guidance"], s["stg_blocks"], s["use_cross_timestep"]) == (3.0, 7.0, (1,), False)
