"""The LTX-Video registry entries: every name loads, its shipped configs build our models (sizes offline, as the
planner reads them), and its settings are complete and consistent with the pipelines' pieces."""

from __future__ import annotations

import math

import pytest

from vidax.translator.registry import get_model, load_registry
from vidax.zoo.ltx_video import latents as L
from vidax.zoo.ltx_video.config import SchedulerConfig, TransformerConfig, UpsamplerConfig, VAEConfig
from vidax.zoo.ltx_video.transformer import LTXVideoTransformer
from vidax.zoo.ltx_video.upsampler import LTXLatentUpsampler
from vidax.zoo.ltx_video.vae import LTXVideoVAE

NAMES = ["ltx-video-13b", "ltx-video-13b-distilled", "ltx-video-2b", "ltx-video-2b-distilled"]


def _count(shapes: dict) -> int:
    return sum(math.prod(s) for s in shapes.values())


@pytest.mark.parametrize("name", NAMES)
def test_entry_loads_with_its_components(name):
    entry = get_model(name, load_registry())
    assert {"transformer", "vae", "text_encoder", "tokenizer"} <= set(entry.components)
    assert entry.components["transformer"].spec == "ltx_video/transformer"
    assert ("latent_upsampler" in entry.components) == (entry.settings["pipeline"] == "multi-scale")
    settings = entry.settings
    assert (settings["height"], settings["width"], settings["frames"]) == (704, 1216, 121)
    assert L.latent_grid(settings["frames"], settings["height"], settings["width"]) == (16, 22, 38)
    assert settings["checkpoint"].endswith(".safetensors")
    assert {"fps", "steps", "decode_timestep", "decode_noise_scale", "negative_prompt"} <= set(settings)


@pytest.mark.parametrize("name, billions", [("ltx-video-13b", 13.0), ("ltx-video-2b", 1.9)])
def test_shipped_configs_give_the_released_sizes(name, billions):
    """The DiT sizes the planner reads from `config.transformer` alone: 13B and 2B (1.9B) parameters."""
    entry = get_model(name, load_registry())
    dit = LTXVideoTransformer(TransformerConfig.from_hf_config(entry.config["transformer"]))
    assert _count(dit.param_shapes()) / 1e9 == pytest.approx(billions, rel=0.05)
    vae = LTXVideoVAE(VAEConfig.from_hf_config(entry.config["vae"]))
    assert (vae.cfg.spatial_ratio, vae.cfg.temporal_ratio) == (32, 8)
    assert vae.latent_shape(121, 704, 1216) == (128, 16, 22, 38)
    if "latent_upsampler" in entry.config:
        up = LTXLatentUpsampler(UpsamplerConfig.from_hf_config(entry.config["latent_upsampler"]))
        assert up.cfg.factors == (1, 2, 2)


@pytest.mark.parametrize("name", ["ltx-video-13b-distilled", "ltx-video-2b-distilled"])
def test_distilled_passes(name):
    settings = get_model(name, load_registry()).settings
    static = SchedulerConfig(sampler="linear_quadratic", dynamic_shift=None, shift_terminal=None)
    first = L.official_schedule(static, 1, timesteps=settings["first_pass"]["timesteps"])
    second = L.official_schedule(static, 1, timesteps=settings["second_pass"]["timesteps"])
    assert (first.num_steps, second.num_steps, len(settings["timesteps"])) == (7, 3, settings["steps"])
    assert settings["guidance"] == 1.0


def test_dev_13b_schedule_splits_the_30_steps():
    settings = get_model("ltx-video-13b", load_registry()).settings
    static = SchedulerConfig(sampler="linear_quadratic", dynamic_shift=None, shift_terminal=None)
    first, second = settings["first_pass"], settings["second_pass"]
    a = L.official_schedule(static, 1, num_steps=first["steps"], skip_final=first["skip_final_steps"])
    b = L.official_schedule(static, 1, num_steps=second["steps"], skip_initial=second["skip_initial_steps"])
    assert (a.num_steps, b.num_steps) == (27, 13)
    assert len(first["guidance"]) == len(first["guidance_timesteps"]) == len(first["skip_blocks"]) == 7
