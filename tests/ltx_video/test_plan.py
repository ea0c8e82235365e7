"""`vidax-gen MODEL --plan` for every LTX-Video model offline with an empty Hugging Face cache (sizes from the
registry's `config` tables), the memory job the planner gets, and the family flags through the CLI."""

from __future__ import annotations

import pytest

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.registry import make_pipeline

NAMES = ["ltx-video-13b", "ltx-video-13b-distilled", "ltx-video-2b", "ltx-video-2b-distilled"]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))


@pytest.mark.parametrize("name", NAMES)
def test_plan_offline_from_the_registry(offline, name):
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    result = CliRunner().invoke(app, [name, "--plan", "--devices", "4", "--device-memory", "30.75"])
    assert result.exit_code == 0, result.output
    assert "GiB per device on 4 x 30.8 GiB" in result.output


def test_frame_counts_by_reference(offline):
    """A diffusers-layout model takes any frame count as LTXPipeline does (12 runs 2 latent frames) and sides
    that are multiples of 32; an official checkpoint takes any size, as `inference.py` pads it (12 frames run
    17: 3 latent frames; 50 x 70 runs 64 x 96)."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    diffusers = GenerateOptions(model="ltx-video-13b-distilled", prompt="", frames=12)
    family = make_pipeline(diffusers.model, diffusers)
    assert family.layout == "diffusers" and family.latent_shape(family.resolve_settings(diffusers))[2] == 2
    official = GenerateOptions(model="ltx-video-13b", prompt="", frames=12, height=50, width=70,
                               extra={"multi_scale": False})
    family = make_pipeline(official.model, official)
    assert family.layout == "official" and family.latent_shape(family.resolve_settings(official)) == (1, 128, 3, 2, 3)
    result = CliRunner().invoke(app, ["ltx-video-13b", "--plan", "--frames", "12", "--height", "700", "--width", "1200",
                                      "--devices", "4", "--device-memory", "141"])
    assert result.exit_code == 0, result.output


def test_memory_job_follows_the_passes_and_branches(offline):
    """13B dev: the second pass (896 x 1600, 16 x 28 x 50 tokens) is the largest; CFG + STG run 3 rows;
    one pass (--no-multi-scale) at 704 x 1216; the distilled model runs one row."""
    dev = GenerateOptions(model="ltx-video-13b", prompt="")
    job = make_pipeline(dev.model, dev).memory_job(dev)
    assert (job.tokens, job.batch, job.text_tokens, job.dit.depth) == (16 * 28 * 50, 3, 256, 48)
    one = GenerateOptions(model="ltx-video-13b", prompt="", extra={"multi_scale": False})
    assert make_pipeline(one.model, one).memory_job(one).tokens == 16 * 22 * 38
    distilled = GenerateOptions(model="ltx-video-13b-distilled", prompt="")
    assert make_pipeline(distilled.model, distilled).memory_job(distilled).batch == 1


def test_family_flags_reach_the_settings_through_the_cli(offline, tmp_path):
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    image = tmp_path / "key.png"
    from PIL import Image
    import numpy as np

    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    args = ["ltx-video-2b", "--plan", "--guidance-rescale", "0.5", "--decode-timestep", "0.1", "--stg", "2",
            "--stg-skip-blocks", "3,4", "--condition-frame", f"{image}:16:0.5", "--no-multi-scale", "--timesteps",
            "1000,500", "--no-vae-tiling"]
    # a fixed device size: the host's own (CPU devices share its free memory) may not hold the whole VAE decode
    result = CliRunner().invoke(app, args + ["--devices", "4", "--device-memory", "141"])
    assert result.exit_code == 0, result.output
    from vidax.cli.gen import family_options

    extra, _ = family_options("ltx-video-2b", args[2:])
    options = GenerateOptions(model="ltx-video-2b", prompt="", extra=extra)
    s = make_pipeline(options.model, options).resolve_settings(options)
    assert (s.guidance_rescale, s.decode_timestep, s.stg, s.multi_scale) == (0.5, 0.1, 2.0, False)
    assert s.condition_frame == (f"{image}:16:0.5",) and s.stg_skip_blocks == "3,4" and s.fps == 30
    assert s.vae_tiling is False
    bad = CliRunner().invoke(app, ["ltx-video-2b", "--plan", "--stg-skip-blocks", "28"])
    assert bad.exit_code != 0 and "blocks 0..27" in bad.output


def test_memory_job_counts_the_vae_tiles(offline, monkeypatch):
    """The VAE term: the whole 896 x 1600 x 121 decode of the 13B second pass with --no-vae-tiling, the
    padded tile's (17 x 512 x 512) with --vae-tiling; by default tiles only where the whole decode would not
    fit the device (30.75 GB: tiles; 141 GB: none)."""
    from vidax.zoo.ltx_video.vae import decode_peak_bytes
    from vidax.zoo.parts.vae_tiling import TileSizes

    def job(**extra):
        options = GenerateOptions(model="ltx-video-13b", prompt="", extra=extra)
        family = make_pipeline(options.model, options)
        return family.memory_job(options), family.vae_config

    whole, cfg = job(vae_tiling=False)
    tiled, _ = job(vae_tiling=True)
    assert whole.vae_peak_activation_bytes == decode_peak_bytes(cfg, 121, 896, 1600) > 30e9
    assert tiled.vae_peak_activation_bytes == decode_peak_bytes(cfg, 121, 896, 1600, TileSizes()) < 1e9
    for memory, want in ((30.75e9, tiled), (141e9, whole)):
        monkeypatch.setattr("vidax.zoo.compute.planner.device_memory_bytes", lambda memory=memory: (4, int(memory)))
        assert job()[0].vae_peak_activation_bytes == want.vae_peak_activation_bytes
