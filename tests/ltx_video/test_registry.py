"""The LTX-Video registry entries: every name loads, its shipped configs build our models (sizes offline, as the
planner reads them), and its settings are complete and consistent with the pipelines' pieces."""

from __future__ import annotations

import math

import numpy as np

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
    release = entry.components["transformer"].file["official"]
    assert release == entry.components["vae"].file["official"] and release[0].startswith("ltxv-")
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


@pytest.fixture
def offline(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))


def _family(name: str, **extra):
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model=name, prompt="", extra=extra)
    family = make_pipeline(name, options)
    return family, family.resolve_settings(options)


def test_dev_13b_guidance_follows_the_official_lists(offline):
    """configs/ltxv-13b-0.9.8-dev.yaml: first pass 27 of 30 linear-quadratic steps at 448 x 800, each step's
    guidance / STG / rescaling / skipped blocks picked by the first guidance timestep at or below it; the second
    pass the last 13 of 30 at 896 x 1600 with STG 1 over block 27."""
    family, s = _family("ltx-video-13b")
    first, second = family._passes(s)
    assert (first.height, first.width, second.height, second.width) == (448, 800, 896, 1600)
    guides = family._guides(s, first)
    sched = family._schedule(s, first, "official")
    assert len(guides) == 27 and sched.num_steps == 27
    marks = [1.0, 0.996, 0.9933, 0.9850, 0.9767, 0.9008, 0.6180]
    table = s.first_pass
    for t, g in zip(np.asarray(sched.timesteps) / 1000, guides):
        i = next((k for k, m in enumerate(marks) if m <= t), len(marks) - 1)
        assert (g.guidance, g.stg, g.rescale, list(g.skip), g.cfg_star) == \
            (table["guidance"][i], table["stg"][i], table["rescale"][i], table["skip_blocks"][i], True)
    late = family._guides(s, second)
    assert len(late) == 13 and {(g.guidance, g.stg, g.skip) for g in late} == {(1.0, 1.0, (27,))}


def test_2b_dev_is_one_pass_with_stg_and_rescaling(offline):
    family, s = _family("ltx-video-2b")
    (only,) = family._passes(s)
    guides = family._guides(s, only)
    assert (only.height, only.width, only.steps, len(guides)) == (704, 1216, 40, 40)
    assert {(g.guidance, g.stg, g.rescale, g.skip, g.cfg_star) for g in guides} == {(3.0, 1.0, 0.7, (19,), False)}


@pytest.mark.parametrize("name", ["ltx-video-13b-distilled", "ltx-video-2b-distilled"])
def test_distilled_two_passes_follow_the_official_lists(offline, name):
    family, s = _family(name)
    first, second = family._passes(s)
    a, b = family._schedule(s, first, "official"), family._schedule(s, second, "official")
    np.testing.assert_allclose(a.sigmas, [1.0, 0.9937, 0.9875, 0.9812, 0.975, 0.9094, 0.725, 0.0], rtol=1e-6)
    np.testing.assert_allclose(b.sigmas, [0.9094, 0.725, 0.4219, 0.0], rtol=1e-6)
    assert second.tone_map == (0.6 if "13b" in name else 0.0)
    assert all(g.guidance == 1.0 and g.stg == 0.0 for g in family._guides(s, first) + family._guides(s, second))
