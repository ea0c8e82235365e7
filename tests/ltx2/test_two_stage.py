"""`vidax-gen ltx-2 --two-stage` against diffusers' three pipelines chained as its LTX-2 docs chain them
("Two-stages Generation"): `LTX2Pipeline` at half size (`output_type="latent"`) -> `LTX2LatentUpsamplePipeline`
with the spatial latent upsampler -> `LTX2Pipeline` with the distilled LoRA (`load_lora_weights` +
`set_adapters`), a scheduler `from_config(..., use_dynamic_shifting=False, shift_terminal=None)`,
`STAGE_2_DISTILLED_SIGMA_VALUES`, `noise_scale` its first value and `guidance_scale=1.0`.

The tiny LTX-2.0 pipeline of tests/ltx2 saved with `save_pretrained`, the tiny rational x2 upsampler saved in its
`latent_upsampler/`, a PEFT LoRA of video and audio modules as the distilled LoRA. Stage 1's noise is the
reference generator's first draws (--latents, --audio-latents at stage 1's size); stage 2's re-noise (and the
decode noise) are replayed from its second generator. Frames and waveform within 2e-5 at fp32.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from tests.lora.formats import low_rank_factors, write_peft
from tests.lora.ltx2_formats import ltx2_modules
from tests.ltx_video.references.pipelines import Replay
from tests.oracle import save_diffusers, state_of, to_np
from vidax.translator.errors import VidaxError
from vidax.translator.lora import file_sha256
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

from .references.pipelines import FPS, GUIDANCE, NEGATIVE, PROMPT, components, initial_noise
from .references.upsampler_spec_fixtures import upsampler_reference

ATOL = 2e-5
FULL = dict(height=64, width=128, frames=9)
STEPS = 2
STAGE_2_SEED = 5


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """(folder, stage-1 noise files, LoRA file, replay of stage 2's draws, diffusers' frames and waveform)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2LatentUpsamplePipeline, LTX2Pipeline
    from diffusers.pipelines.ltx2.utils import STAGE_2_DISTILLED_SIGMA_VALUES as SIGMAS

    root = tmp_path_factory.mktemp("ltx2_two_stage")
    pipe = LTX2Pipeline(**components(root))
    pipe.save_pretrained(root / "model")
    upsampler = upsampler_reference()
    save_diffusers(upsampler, root / "model" / "latent_upsampler")
    state = state_of(pipe.transformer)
    lora = write_peft(root / "distilled.safetensors", low_rank_factors(state, ltx2_modules(state), 4, 81, std=0.15))
    half = dict(height=FULL["height"] // 2, width=FULL["width"] // 2)
    video, audio = initial_noise(pipe, 0, frames=FULL["frames"], **half)
    np.save(root / "noise.npy", video)
    np.save(root / "audio_noise.npy", audio)
    common = dict(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=FULL["frames"], frame_rate=FPS, return_dict=False)
    with torch.no_grad():
        video_latent, audio_latent = pipe(**common, **half, num_inference_steps=STEPS, output_type="latent",
                                          generator=torch.Generator().manual_seed(0), **GUIDANCE)
        up = LTX2LatentUpsamplePipeline(vae=pipe.vae, latent_upsampler=upsampler)(
            latents=video_latent, output_type="latent", return_dict=False)[0]
        pipe.load_lora_weights(str(lora), adapter_name="stage_2_distilled")
        pipe.set_adapters("stage_2_distilled", 1.0)
        pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config, use_dynamic_shifting=False,
                                                                     shift_terminal=None)
        frames, wave = pipe(**common, height=FULL["height"], width=FULL["width"], latents=up, audio_latents=audio_latent,
                            num_inference_steps=len(SIGMAS), noise_scale=SIGMAS[0], sigmas=SIGMAS,
                            generator=torch.Generator().manual_seed(STAGE_2_SEED), output_type="np",
                            **{**GUIDANCE, "guidance_scale": 1.0})
    replay = Replay(STAGE_2_SEED)  # the second generator's draws, in its order
    tokens = up.shape[2] * up.shape[3] * up.shape[4]
    replay.record(4, 0, (1, tokens, up.shape[1]))  # the video re-noise, packed
    replay.record(4, 1, (1, audio_latent.shape[2], audio_latent.shape[1] * audio_latent.shape[3]))  # the audio's
    if pipe.vae.config.timestep_conditioning:
        replay.record(2, 0, tuple(up.shape))
    return root, lora, replay, frames[0], to_np(wave[0])


def _options(root, out, **extra) -> GenerateOptions:
    flags = {"stg_blocks": "1", "audio_latents": root / "audio_noise.npy", "two_stage": True, **extra}
    return GenerateOptions(model="ltx-2", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(root / "model"),
                           steps=STEPS, fps=FPS, latents=root / "noise.npy", out=out, compile_cache=False,
                           dtype="float32", extra=flags, **FULL)


def test_two_stage_matches_diffusers_chain(chain, tmp_path, monkeypatch):
    root, lora, replay, frames, wave = chain
    replay.install(monkeypatch)
    result = generate(_options(root, tmp_path / "v.npy", two_stage_lora=f"{lora}=1.0"))
    assert replay.used == set(replay.draws)
    assert result.frames.shape == frames.shape == (9, 64, 128, 3)
    np.testing.assert_allclose(result.frames, frames, atol=ATOL, rtol=0)
    np.testing.assert_allclose(result.audio, wave, atol=ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    assert sidecar["two_stage"] is True
    assert sidecar["two_stage_lora"] == {"source": str(lora), "strength": 1.0, "sha256": file_sha256(lora),
                                         "file": lora.name}


def _without_upsampler(root, tmp_path) -> str:
    """The saved pipeline less its latent_upsampler/ (its other folders linked)."""
    folder = tmp_path / "no_upsampler"
    folder.mkdir()
    for item in (root / "model").iterdir():
        if item.name != "latent_upsampler":
            (folder / item.name).symlink_to(item)
    return str(folder)


def _an_image(root, tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((64, 128, 3), np.uint8)).save(tmp_path / "first.png")
    return tmp_path / "first.png"


@pytest.mark.parametrize("change, message", [
    (dict(width=80), "multiples of 32"),
    (dict(two_stage_lora="/nowhere/distilled.safetensors"), "no such file"),
    (dict(weights=_without_upsampler), "needs the spatial latent upsampler"),
    (dict(image=_an_image), "--two-stage runs text-to-video"),
])
def test_two_stage_requests_fail_before_work(chain, tmp_path, change, message):
    root, lora = chain[:2]
    extra = {"two_stage_lora": change.pop("two_stage_lora", str(lora))}
    for key in ("weights", "image"):  # made in the test's own folder
        if key in change:
            change[key] = change[key](root, tmp_path)
    options = dataclasses.replace(_options(root, tmp_path / "x.npy", **extra), **change)
    with pytest.raises(VidaxError, match=message):
        generate(options)
    assert not (tmp_path / "x.npy").exists()


def test_the_registry_preset_runs_two_stage_without_the_flag(chain, tmp_path):
    """`vidax-gen ltx-2-two-stage` resolves to the two-stage chain at its preset size with no `--two-stage`;
    `--no-two-stage` turns it off; `ltx-2` stays single-stage. Settings only: nothing generated."""
    from vidax.zoo.registry import make_pipeline

    root, lora = chain[:2]

    def resolved(model, **extra):
        options = _options(root, tmp_path / "x.npy", two_stage_lora=str(lora), **extra)
        flags = {k: v for k, v in options.extra.items() if k != "two_stage" or k in extra}  # no flag unless given
        options = dataclasses.replace(options, model=model, height=None, width=None, extra=flags)
        return make_pipeline(model, options).resolve_settings(options)

    preset = resolved("ltx-2-two-stage")
    assert preset.two_stage and (preset.height, preset.width) == (1024, 1536)
    assert not resolved("ltx-2-two-stage", two_stage=False).two_stage
    assert not resolved("ltx-2").two_stage
