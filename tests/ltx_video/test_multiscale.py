"""The two-pass (multi-scale) default of the 0.9.8 models against diffusers' pipelines composed as Lightricks'
`LTXMultiScalePipeline` runs them.

A tiny `LTXConditionPipeline` and `LTXLatentUpsamplerModel` (saved under `latent_upsampler/`, as the
diffusers docs pair them) run `ltx-video-13b-distilled`'s registry settings: a first pass at 2/3 of the size
over the official first timestep list, the x2 latent upsampler with AdaIN (factor 1) to the first pass's
latents (`LTXLatentUpsamplePipeline`), a second pass at twice the first size from the upsampled latents
noised to 0.9094 over the second list (`LTXConditionPipeline(latents=..., denoise_strength=...)`, the
diffusers spelling of the official `latents` input), the official tone mapping (0.6) of the final latents
before decode, and the bilinear resize of the frames to the requested size (`LTXMultiScalePipeline`).
An image conditions frame 0 in both passes (re-encoded at each size). One generator drives the reference
in order; `Replay` hands vidax the same draws. Frames within 2e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

from .references.pipelines import NEGATIVE, PROMPT, Replay, components, static_scheduler, upsampler

HEIGHT, WIDTH, FRAMES = 128, 160, 9  # first pass int(x · 0.6666666) down to 32: 64 x 96
FIRST, SECOND = (64, 96), (128, 192)
FIRST_T = [1000.0, 993.7, 987.5, 981.2, 975.0, 909.4, 725.0]
SECOND_T = [1000.0, 909.4, 725.0, 421.9]  # denoise_strength 0.8 keeps the last 3, from sigma 0.9094
KNOBS = dict(decode_timestep=0.05, decode_noise_scale=0.025, image_cond_noise_scale=0.15)
SEED = 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from diffusers import LTXConditionPipeline, LTXLatentUpsamplePipeline
    from PIL import Image

    root = tmp_path_factory.mktemp("ltx_multiscale")
    parts = components(31, root)
    pipe = LTXConditionPipeline(scheduler=static_scheduler(), **parts)
    pipe.save_pretrained(root / "model")
    up_model = upsampler()
    up_model.save_pretrained(root / "model" / "latent_upsampler")
    up_pipe = LTXLatentUpsamplePipeline(vae=parts["vae"], latent_upsampler=up_model)
    Image.fromarray(np.random.default_rng(8).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)).save(root / "first.png")

    replay = Replay(SEED)
    first_latent, second_latent = (1, 8, 2, 2, 3), (1, 8, 2, 4, 6)
    np.save(root / "latents.npy", replay.draw(first_latent))
    replay.record(3, 0, (1, 8, 1, 2, 3))
    for i in range(len(FIRST_T)):
        replay.record(1, i, (1, 12, 8))
    replay.record(4, 0, second_latent)  # the second pass's fresh noise
    replay.record(3, 100, (1, 8, 1, 4, 6))
    for i in range(3):
        replay.record(5, i, (1, 48, 8))
    replay.record(2, 0, second_latent)

    generator = torch.Generator().manual_seed(SEED)
    image = Image.open(root / "first.png")
    common = dict(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=FRAMES, frame_rate=25, guidance_scale=1.0,
                  image_cond_noise_scale=KNOBS["image_cond_noise_scale"], generator=generator, output_type="latent")
    with torch.no_grad():
        first = pipe(image=image, height=FIRST[0], width=FIRST[1], timesteps=FIRST_T, **common).frames
        upsampled = up_pipe(latents=first, adain_factor=1.0, output_type="latent").frames
        final = pipe(image=image, height=SECOND[0], width=SECOND[1], timesteps=SECOND_T, denoise_strength=0.8,
                     latents=upsampled, **common).frames
        # the official decode: tone-map the final (normalised) latents, then diffusers' decode of them
        final = up_pipe.tone_map_latents(final, 0.6)
        latents = pipe._denormalize_latents(final, pipe.vae.latents_mean, pipe.vae.latents_std,
                                            pipe.vae.config.scaling_factor)
        noise = torch.randn(latents.shape, generator=generator)
        latents = (1 - KNOBS["decode_noise_scale"]) * latents + KNOBS["decode_noise_scale"] * noise
        video = pipe.vae.decode(latents, torch.tensor([KNOBS["decode_timestep"]]), return_dict=False)[0]
        frames = (video / 2 + 0.5).clamp(0, 1)[0].permute(1, 0, 2, 3)  # [F, 3, H, W]
        frames = torch.nn.functional.interpolate(frames, size=(HEIGHT, WIDTH), mode="bilinear", align_corners=False)
    return root, replay, frames.permute(0, 2, 3, 1).numpy()


def test_two_passes_match_the_composed_pipelines(reference, tmp_path, monkeypatch):
    root, replay, expected = reference
    replay.install(monkeypatch)
    options = GenerateOptions(model="ltx-video-13b-distilled", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(root / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES,
                              latents=root / "latents.npy", image=root / "first.png", out=tmp_path / "v.npy",
                              dtype="float32", compile_cache=False, extra=KNOBS)
    result = generate(options)
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=2e-5, rtol=0)
    assert replay.used == set(replay.draws)
    assert result.latents.shape == (1, 8, 2, 4, 6) and "refine" in result.times and "upsample" in result.times
