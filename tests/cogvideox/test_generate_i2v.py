"""CogVideoX 1.5 image-to-video end to end against diffusers `CogVideoXImageToVideoPipeline` (save_pretrained).

A tiny perturbed 1.5 I2V pipeline (32 -> 8 input channels: noisy and image latents; ofs 2.0; the VAE's
`invert_scale_latents`) runs once: a 30x52 image resized to 32x48, 9 frames (3 latent frames padded to
4), 3 DPM steps with dynamic CFG. The reference's generator first samples the image's posterior, then
each DPM step's noise; vidax takes those draws by patching `host_noise` (tests only).

A variant of our own (a user TOML, VIDAX_MODELS) with the released entry's components and the tiny size as
its native size runs the parity.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.registry import make_pipeline

from . import pipelines as tiny
from .pipelines import FRAMES, GUIDANCE, HEIGHT, PROMPT, STEPS, WIDTH

ATOL = 2e-5  # fp32 both sides; observed max |diff| ~2e-6 (summation order)
LATENTS = (1, 4, 4, HEIGHT // 8, WIDTH // 8)  # reference layout [B, F', C, H', W']
IMAGE_NOISE = (1, 4, 1, HEIGHT // 8, WIDTH // 8)  # the posterior sample's [B, z, 1, H', W']
TINY = "cogvideox1.5-tiny-i2v"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(folder, image, latents .npy in vidax's layout, posterior noise, DPM step noise, diffusers' frames)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("cogvideox15_i2v")
    folder = root / "model"
    ref = tiny.pipeline(folder, "15_i2v", scheduler="dpm", seed=10,
                        vae=dict(tiny.VAE_ONE_TILE, scaling_factor=0.7, invert_scale_latents=True))
    ref.vae.enable_tiling()
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (30, 52, 3), dtype=np.uint8)).save(root / "first.png")
    latents = torch.randn(LATENTS, generator=torch.Generator().manual_seed(8))
    np.save(root / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    image_noise, noise = tiny.reference_draws(1, STEPS, LATENTS, image_shape=IMAGE_NOISE)
    with torch.no_grad():
        frames = ref(image=Image.open(root / "first.png"), prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                     num_inference_steps=STEPS, guidance_scale=GUIDANCE, use_dynamic_cfg=True, latents=latents,
                     generator=torch.Generator().manual_seed(1), output_type="np").frames[0]
    return folder, root / "first.png", root / "latents.npy", image_noise, noise, frames


@pytest.fixture
def tiny_variant(reference, tmp_path, monkeypatch):
    """cogvideox1.5-5b-i2v's registry entry with the tiny size's limits (min side 32, max side 48)."""
    (tmp_path / "mine.toml").write_text(f"""
[models."{TINY}"]
family = "cogvideox"
description = "CogVideoX1.5-5B-I2V's layout at a tiny size"
repos = {{ diffusers = "example/tiny-i2v" }}
default_layout = "diffusers"
variants = ["i2v"]
components.transformer = {{ spec = "cogvideox/transformer15", subfolder = "transformer", copy = "config.json" }}
components.vae = {{ spec = "cogvideox/vae", subfolder = "vae", copy = "config.json" }}
components.text_encoder = {{ spec = "encoders/t5", subfolder = "text_encoder", copy = "config.json", dtype = "float32" }}
components.tokenizer = {{ subfolder = "tokenizer", copy = "*" }}
components.scheduler = {{ subfolder = "scheduler", copy = "scheduler_config.json" }}
settings = {{ height = {HEIGHT}, width = {WIDTH}, frames = 81, steps = 50, guidance = 6.0, fps = 16, sampler = "dpm" }}
""")
    monkeypatch.setenv("VIDAX_MODELS", str(tmp_path / "mine.toml"))
    folder, image, latents, image_noise, noise, _ = reference
    tiny.patch_host_noise(monkeypatch, image_noise, noise)
    return GenerateOptions(model=TINY, prompt=PROMPT, image=image, weights=str(folder), frames=FRAMES, steps=STEPS,
                           latents=latents, out=tmp_path / "out.npy", dtype="float32", compile_cache=False)


def test_generate_matches_reference(reference, tiny_variant):
    """No --height/--width: the native size; the image posterior's sample, ofs, the divided image latents."""
    *_, expected = reference
    result = generate(tiny_variant)
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)
    assert result.settings["sampler"] == "dpm" and result.settings["dynamic_cfg"] is True


@pytest.mark.parametrize("change, message", [
    (dict(image=None), "give --image"),
])
def test_bad_requests_fail_before_work(tiny_variant, change, message):
    import dataclasses

    with pytest.raises(PipelineError, match=message):
        generate(dataclasses.replace(tiny_variant, **change))


def test_released_sizes(tmp_path, monkeypatch):
    """cogvideox1.5-5b-i2v (registry configs, nothing downloaded) takes the sizes diffusers' pipeline takes:
    the model card's (shorter side 768, longer up to 1360) and others on the 16-pixel grid, either
    orientation, up to its RoPE grid (2400x2400 pixels); beyond it fails before any work."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty"))
    name = "cogvideox1.5-5b-i2v"

    def settings(height, width):
        options = GenerateOptions(model=name, prompt="", height=height, width=width)
        return make_pipeline(name, options).resolve_settings(options)

    for size in ((768, 1360), (1360, 768), (768, 768), (768, 1024), (480, 720), (768, 1376), (2400, 2400)):
        assert (settings(*size).height, settings(*size).width) == size
    with pytest.raises(PipelineError, match="exceeds the RoPE grid"):
        settings(768, 2416)
    family = make_pipeline(name, GenerateOptions(model=name, prompt=""))
    assert family.image_roles() == {"image": True}
    assert family.latent_shape(settings(768, 1360)) == (1, 16, 22, 96, 170)  # 81 frames: 21 latents + 1 pad
