"""Conditioning (first frame and video extension) against diffusers' `LTXConditionPipeline`, and the same run
from the official single-file layout, a converted folder, the Hub, a mesh and offloaded blocks.

One tiny perturbed `LTXConditionPipeline` (static-shift scheduler as the 0.9.5+ releases ship it) saved with
`save_pretrained` is run once: an image at frame 0 (strength 1) and a 17-frame video at frame 8 (strength 0.9:
its third latent frame is written in place, its first two become extra keyframe tokens), guidance 3,
image-conditioning noise 0.15 at every step. Its draws after the initial noise (each condition's posterior
sample, the video's blend noise, the per-step conditioning noise, the decode noise) are replayed into
vidax's host noise (`Replay`). The decode noise scale is 0 here, so the official layout (which mixes the
decode noise before de-normalising, diffusers after) gives the same frames; both orders are covered by
`test_decode_noise_order`. Frames within 2e-5.
"""

from __future__ import annotations

import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

from .references.ltx_spec_fixtures import save_official_file
from .references.pipelines import NEGATIVE, PROMPT, Replay, components, static_scheduler

HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 64, 96, 25, 3, 3.0
LATENT = (1, 8, 4, 2, 3)
TOKENS = 4 * 6 + 2 * 6  # the video's two prefix frames ride in front as extra tokens
KNOBS = dict(decode_timestep=0.05, decode_noise_scale=0.0, image_cond_noise_scale=0.15, guidance_rescale=0.0)
FRAME_ATOL = 2e-5
SEED = 5
MODEL = "ltx-video-13b-distilled"
OFFICIAL_FILE = "ltxv-13b-0.9.8-distilled.safetensors"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from diffusers import LTXConditionPipeline
    from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXVideoCondition
    from PIL import Image

    from vidax.zoo.video_io import read_video, write_mp4

    root = tmp_path_factory.mktemp("ltx_condition")
    parts = components(21, root)
    pipe = LTXConditionPipeline(scheduler=static_scheduler(), **parts)
    pipe.save_pretrained(root / "model")
    rng = np.random.default_rng(4)
    Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)).save(root / "first.png")
    smooth = np.cumsum(rng.integers(0, 9, (17, HEIGHT, WIDTH, 3)), axis=0).clip(0, 255).astype(np.uint8)
    write_mp4(root / "clip.mp4", smooth, 25)
    clip = read_video(root / "clip.mp4")  # both sides condition on the decoded pixels

    replay = Replay(SEED)
    np.save(root / "latents.npy", replay.draw(LATENT))
    replay.record(3, 0, (1, 8, 1, 2, 3))  # the image's posterior draw
    replay.record(3, 2, (1, 8, 3, 2, 3))  # the video's posterior draw
    replay.record(3, 3, (1, 8, 2, 2, 3))  # the video's blend noise (its two prefix latent frames)
    for step in range(STEPS):
        replay.record(1, step, (1, TOKENS, 8))  # image-conditioning noise
    replay.record(2, 0, LATENT)  # decode noise
    conditions = [LTXVideoCondition(image=Image.open(root / "first.png"), frame_index=0, strength=1.0),
                  LTXVideoCondition(video=[Image.fromarray(f) for f in clip], frame_index=8, strength=0.9)]
    with torch.no_grad():
        frames = pipe(conditions=conditions, prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                      num_frames=FRAMES, frame_rate=25, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                      generator=torch.Generator().manual_seed(SEED), output_type="np", **KNOBS).frames[0]

    # the official layout of the same weights: one single file (DiT + VAE, header config) + PixArt's T5 folders
    official = root / "official"
    save_official_file(official / OFFICIAL_FILE, dit=parts["transformer"], vae=parts["vae"])
    for folder in ("text_encoder", "tokenizer"):
        shutil.copytree(root / "model" / folder, official / folder)
    return root, replay, frames


def options(root, **extra) -> GenerateOptions:
    knobs = {k: extra.pop(k) for k in list(extra) if k in (*KNOBS, "stg", "condition_frame", "timesteps", "multi_scale",
                                                            "cfg_star")}
    base = dict(model=MODEL, prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(root / "model"), height=HEIGHT,
                width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, fps=25, latents=root / "latents.npy",
                image=root / "first.png", out=root / "unused.npy", dtype="float32", compile_cache=False)
    base.update(extra)
    return GenerateOptions(**base, extra={**KNOBS, "condition_frame": (f"{root / 'clip.mp4'}:8:0.9",), **knobs})


def test_conditions_match_condition_pipeline(reference, tmp_path, monkeypatch):
    root, replay, expected = reference
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy"))
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    assert replay.used == set(replay.draws)  # every reference draw, in its place


def test_official_single_file_layout_matches(reference, tmp_path, monkeypatch):
    """The official folder (header configs, linear-quadratic sigmas from the header scheduler) runs the official
    pipeline: the same conditioning and stepping as LTXConditionPipeline."""
    root, replay, expected = reference
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy", weights=str(root / "official")))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("layout", [dict(tp=2, dp=2), dict(sp=2, offload_chunk=1)])
def test_on_a_mesh_and_offloaded(reference, tmp_path, monkeypatch, layout):
    """tp x CFG-on-data; Ulysses sp (36 tokens) with the blocks streamed one at a time: the same frames."""
    root, replay, expected = reference
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy", **layout))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("change, message", [
    (dict(sampler="unipc"), "only euler"),
    (dict(condition_frame=("missing.png:3",)), "missing.png not found"),
    (dict(condition_frame=("{clip}:40",)), "outside the video"),
    (dict(condition_frame=("{clip}",)), "PATH:INDEX"),
    (dict(multi_scale=True), "needs the latent upsampler"),
    (dict(extra_flag=True), "takes no --extra-flag"),
])
def test_bad_requests_fail_before_work(reference, tmp_path, change, message):
    root = reference[0]
    if "condition_frame" in change:
        change = {"condition_frame": tuple(c.format(clip=root / "clip.mp4") for c in change["condition_frame"])}
    if "extra_flag" in change:
        opts = options(root, out=tmp_path / "v.npy")
        opts = GenerateOptions(**{**opts.__dict__, "extra": {**opts.extra, "extra_flag": True}})
    else:
        opts = options(root, out=tmp_path / "v.npy", **change)
    with pytest.raises(PipelineError, match=message):
        generate(opts)


def test_runs_from_a_converted_folder(reference, tmp_path, monkeypatch):
    """`vidax-convert ltx-video-13b-distilled --source OFFICIAL_FOLDER`: DiT and VAE converted from the one file,
    T5 converted and the tokenizer copied; configs from the file's header through the manifest's origin."""
    from vidax.translator.models import ConvertOptions, convert_model

    root, replay, expected = reference
    replay.install(monkeypatch)
    converted = tmp_path / "converted"
    # the optional upsampler is absent: vidax-convert converts optional components regardless (see the report)
    parts = ("transformer", "vae", "text_encoder", "tokenizer")
    convert_model(ConvertOptions(MODEL, source=str(root / "official"), out=converted, dtype="float32", components=parts))
    assert (converted / "transformer" / "manifest.json").is_file() and (converted / "tokenizer").is_dir()
    result = generate(options(root, out=tmp_path / "v.npy", weights=str(converted)))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def _hub(root, tmp_path, monkeypatch, name: str):
    """Lightricks/LTX-Video holding the tiny official file as `name`, and PixArt's T5 folders."""
    import huggingface_hub.constants

    from vidax.translator.testing import make_hub_cache

    official = root / "official"
    make_hub_cache(tmp_path / "hub", "Lightricks/LTX-Video", {name: official / OFFICIAL_FILE})
    t5 = {str(p.relative_to(official)): p for folder in ("text_encoder", "tokenizer")
          for p in sorted((official / folder).rglob("*")) if p.is_file()}
    make_hub_cache(tmp_path / "hub", "PixArt-alpha/PixArt-XL-2-1024-MS", t5)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


def test_dev_model_straight_from_the_hub(reference, tmp_path, monkeypatch):
    """`vidax-gen ltx-video-13b` with no --weights: its release file from Lightricks/LTX-Video and T5 from
    PixArt-alpha (the Hugging Face cache, offline). No upsampler there: one pass. Its guidance lists, STG
    and CFG* are switched off by flags, so the run is the reference's."""
    root, replay, expected = reference
    replay.install(monkeypatch)
    _hub(root, tmp_path, monkeypatch, "ltxv-13b-0.9.8-dev.safetensors")
    result = generate(options(root, out=tmp_path / "v.npy", model="ltx-video-13b", weights=None, stg=0.0,
                              cfg_star=False))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    assert result.settings["weights_source"] == "Lightricks/LTX-Video@" + "0" * 40


def test_single_file_weights(reference, tmp_path, monkeypatch):
    """`--weights ltxv-....safetensors`: DiT, VAE and configs from the one file, T5 from its own repo."""
    from vidax.zoo.registry import make_pipeline

    root, _, _ = reference
    _hub(root, tmp_path, monkeypatch, "unused.safetensors")
    opts = options(root, out=tmp_path / "v.npy", weights=str(root / "official" / OFFICIAL_FILE))
    family = make_pipeline(MODEL, opts)
    assert family.layout == "official" and family.reference(family.resolve_settings(opts)) == "official"
    assert family.dit_config.num_layers == 2 and family.vae_config.latent_channels == 8
    assert family._find("tokenizer", "tokenizer").parent.parent.name == "snapshots"  # PixArt's, from the cache
    tree = family.load_tree("vae", "ltx_video/vae")
    assert tree["latents_mean"].shape == (8,)


def test_dev_defaults_run_both_passes_with_stg_and_cfg_star(reference, tmp_path, monkeypatch):
    """`ltx-video-13b` as registered (0.9.8 dev config): two passes (the upsampler file beside the release
    file), the first pass's guidance / STG / rescaling lists by timestep with CFG*, the second pass's STG
    over one block; --steps 6 keeps the passes' skipped shares (first 5 of 6, second the last 3). No
    reference runs Lightricks' pipeline here: the pieces are checked against it in test_guidance.py."""
    from vidax.zoo.ltx_video import family as F

    from .references.ltx_spec_fixtures import official_upsampler_config, save
    from .references.pipelines import upsampler

    root = reference[0]
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "ltxv-13b-0.9.8-dev.safetensors").symlink_to(root / "official" / OFFICIAL_FILE)
    for folder in ("text_encoder", "tokenizer"):
        (dev / folder).symlink_to(root / "official" / folder)
    up = upsampler()
    import json

    save(up.state_dict(), dev / "ltxv-spatial-upscaler-0.9.8.safetensors",
         metadata={"config": json.dumps(official_upsampler_config(up))})
    seen = []
    monkeypatch.setattr(F.LTXVideoFamily, "pass_predictor",
                        staticmethod(lambda *a, _orig=F.LTXVideoFamily.pass_predictor: seen.append(_orig(*a)) or seen[-1]))
    opts = GenerateOptions(model="ltx-video-13b", prompt=PROMPT, weights=str(dev), height=HEIGHT, width=WIDTH,
                           frames=FRAMES, steps=6, image=root / "first.png", out=tmp_path / "v.npy", dtype="float32",
                           compile_cache=False, extra={"stg_skip_blocks": "1"})
    result = generate(opts)
    assert result.frames.shape == (FRAMES, HEIGHT, WIDTH, 3) and np.isfinite(result.frames).all()
    assert result.latents.shape == (1, 8, 4, 2, 2)  # second pass at 64 x 64 (first 32 x 32), resized to 64 x 96
    assert len(seen) == 5 + 3
    assert any(p.cfg and p.cfg_star and p.stg_row and p.rescale for p in seen)  # guidance 6-8, STG 4, rescale 0.5
    assert any(not p.cfg and p.stg_row for p in seen[5:])  # second pass: STG alone
    assert result.settings["fps"] == 30 and result.settings["negative_prompt"].startswith("worst quality")


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_decode_noise_order(reference, tmp_path, monkeypatch, layout):
    """The decode noise is mixed into the de-normalised latents by diffusers' pipelines and into the normalised
    ones by the official `LTXVideoPipeline` (before its `vae_decode` de-normalises): each layout follows its
    own reference (diffusers' VAE decodes both, from the same draws)."""
    from diffusers import AutoencoderKLLTXVideo

    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.generator.stages import Run

    root = reference[0]
    g = torch.Generator().manual_seed(9)
    z, eps = torch.randn(LATENT, generator=g), torch.randn(LATENT, generator=g)
    monkeypatch.setattr("vidax.zoo.generator.stages.Run.host_noise", lambda self, stream, index, shape: eps.numpy())
    weights = root / ("model" if layout == "diffusers" else "official")
    opts = options(root, weights=str(weights), decode_noise_scale=0.3, decode_timestep=0.2)
    family = make_pipeline(MODEL, opts)
    family.options = opts
    frames = family.decode(Run(family, opts), family.resolve_settings(opts), jnp.asarray(z.numpy())).frames
    vae = AutoencoderKLLTXVideo.from_pretrained(root / "model" / "vae").eval()
    mean, std = vae.latents_mean.view(1, -1, 1, 1, 1), vae.latents_std.view(1, -1, 1, 1, 1)
    if layout == "diffusers":
        x = 0.7 * (z * std + mean) + 0.3 * eps
    else:
        x = (0.7 * z + 0.3 * eps) * std + mean
    with torch.no_grad():
        video = vae.decode(x, torch.tensor([0.2]), return_dict=False)[0]
    want = (video / 2 + 0.5).clamp(0, 1)[0].permute(1, 2, 3, 0).numpy()
    np.testing.assert_allclose(frames, want, atol=FRAME_ATOL, rtol=0)
