"""`vidax-gen` LTX-Video end to end against diffusers' `LTXPipeline` and `LTXImageToVideoPipeline`.

Tiny perturbed pipelines (DiT, timestep-conditioned 0.9.5-style VAE, T5, a tokenizer built locally, the
0.9.0/0.9.1 dynamically shifted scheduler) saved with `save_pretrained`; vidax generates from that folder
through the real specs with the same prompt, settings and initial latents (`--latents`, unpacked; diffusers
takes its packed reshaping). The noise the references draw after the initial latents (decode noise; the
I2V image's posterior sample) comes from their seeded generator: `Replay` feeds vidax the same draws in
place of its host noise. Frames must agree to 2e-5 (fp32, highest matmul precision both sides).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate

from .references.pipelines import NEGATIVE, PROMPT, Replay, components, dynamic_scheduler, pack

HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 64, 96, 9, 3, 3.0
LATENT = (1, 8, 2, 2, 3)
KNOBS = dict(guidance_rescale=0.3, decode_timestep=0.05, decode_noise_scale=0.025)
FRAME_ATOL = 2e-5
SEED = 7


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    """(folder, latents .npy, replay draws, diffusers frames, I2V image, I2V latents, I2V draws, I2V frames)."""
    from diffusers import LTXImageToVideoPipeline, LTXPipeline
    from PIL import Image

    root = tmp_path_factory.mktemp("ltx_t2v")
    parts = components(11, root)
    pipe = LTXPipeline(scheduler=dynamic_scheduler(), **parts)
    pipe.save_pretrained(root / "model")
    noise = torch.randn(LATENT, generator=torch.Generator().manual_seed(1))
    np.save(root / "latents.npy", noise.numpy())
    replay = Replay(SEED)
    replay.record(2, 0, LATENT)  # the decode noise
    common = dict(negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, frame_rate=25,
                  num_inference_steps=STEPS, guidance_scale=GUIDANCE, output_type="np", **KNOBS)
    with torch.no_grad():
        frames = pipe(PROMPT, latents=pack(noise), generator=torch.Generator().manual_seed(SEED), **common).frames[0]

    # LTXImageToVideoPipeline on the same components: its latents come from the generator (the image's
    # posterior sample first, then the noise), so vidax is handed that noise and replays the rest
    i2v = LTXImageToVideoPipeline(scheduler=dynamic_scheduler(), **parts)
    image = np.random.default_rng(3).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    Image.fromarray(image).save(root / "first.png")
    i2v_replay = Replay(SEED + 1)
    i2v_replay.record(3, 0, (1, 8, 1, 2, 3))  # the image's posterior draw
    np.save(root / "i2v_latents.npy", i2v_replay.draw(LATENT))
    i2v_replay.record(2, 0, LATENT)
    with torch.no_grad():
        i2v_frames = i2v(Image.open(root / "first.png"), PROMPT, generator=torch.Generator().manual_seed(SEED + 1),
                         **common).frames[0]
    return root, replay, frames, i2v_replay, i2v_frames


def options(root, **extra) -> GenerateOptions:
    knobs = {k: extra.pop(k) for k in list(extra) if k in (*KNOBS, "stg", "condition_frame", "timesteps",
                                                            "image_cond_noise_scale", "multi_scale", "vae_tiling")}
    base = dict(model="ltx-video-13b-distilled", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(root / "model"),
                height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=root / "latents.npy",
                out=root / "unused.npy", dtype="float32", compile_cache=False)
    base.update(extra)
    return GenerateOptions(**base, extra={**KNOBS, **knobs})


def test_t2v_matches_ltx_pipeline(t2v, tmp_path, monkeypatch):
    root, replay, expected, _, _ = t2v
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy"))
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    assert result.settings["fps"] == 25.0  # a diffusers folder runs at its pipelines' frame rate
    assert replay.used == {(2, 0)}


def test_short_dit_runs_under_a_release_with_stg(t2v, tmp_path, monkeypatch):
    """ltx-video-2b's settings skip block 19 for its official STG; a diffusers folder runs without STG, so its
    2-block DiT (a fine-tune shorter than the release) runs with those defaults and matches LTXPipeline."""
    root, replay, expected, _, _ = t2v
    replay.install(monkeypatch)
    result = generate(options(root, model="ltx-video-2b", out=tmp_path / "v.npy"))
    assert result.settings["stg"] == 0.0
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_any_frame_count_runs_as_ltx_pipeline(t2v, tmp_path, monkeypatch):
    """12 frames: LTXPipeline takes any count, runs (12 - 1) // 8 + 1 = 2 latent frames and decodes 9."""
    from diffusers import LTXPipeline

    root, *_ = t2v
    frames = 12
    pipe = LTXPipeline.from_pretrained(root / "model")
    noise = torch.from_numpy(np.load(root / "latents.npy"))
    replay = Replay(SEED)
    replay.record(2, 0, LATENT)
    with torch.no_grad():
        expected = pipe(PROMPT, latents=pack(noise), generator=torch.Generator().manual_seed(SEED),
                        negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=frames, frame_rate=25,
                        num_inference_steps=STEPS, guidance_scale=GUIDANCE, output_type="np", **KNOBS).frames[0]
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy", frames=frames))
    assert result.frames.shape == expected.shape == (9, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_i2v_matches_image_to_video_pipeline(t2v, tmp_path, monkeypatch):
    root, _, _, replay, expected = t2v
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy", image=root / "first.png", latents=root / "i2v_latents.npy"))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    assert replay.used == {(3, 0), (2, 0)}


def test_vae_tiling_matches_the_tiled_reference(t2v, tmp_path, monkeypatch):
    """--vae-tiling: the decode in diffusers' default tiles (`enable_tiling()`, with frame-wise decoding on)
    at a size that tiles both ways: 25 frames (4 latent frames: 3 windows) of 544 pixels (17 latent columns:
    a 16-wide tile and a 3-wide one cross-faded over 64 pixels)."""
    from diffusers import LTXPipeline

    root, *_ = t2v
    width, frames, latent = 544, 25, (1, 8, 4, 2, 17)
    pipe = LTXPipeline.from_pretrained(root / "model")
    pipe.vae.enable_tiling()
    pipe.vae.use_framewise_decoding = True
    noise = torch.randn(latent, generator=torch.Generator().manual_seed(4))
    np.save(tmp_path / "latents.npy", noise.numpy())
    replay = Replay(SEED)
    replay.record(2, 0, latent)
    with torch.no_grad():
        expected = pipe(PROMPT, latents=pack(noise), generator=torch.Generator().manual_seed(SEED),
                        negative_prompt=NEGATIVE, height=HEIGHT, width=width, num_frames=frames, frame_rate=25,
                        num_inference_steps=STEPS, guidance_scale=GUIDANCE, output_type="np", **KNOBS).frames[0]
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy", width=width, frames=frames, latents=tmp_path / "latents.npy",
                              vae_tiling=True))
    assert result.frames.shape == expected.shape == (frames, HEIGHT, width, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("change, message", [
    (dict(height=100), "nearest valid: 96"),
    (dict(sampler="ddim"), "unknown sampler 'ddim'"),
    (dict(timesteps="1000,500"), "needs the condition pipeline"),
    (dict(guidance_rescale=1.5), "must be in \\[0, 1\\]"),
    (dict(model="ltx-video-2b", stg=1.0), "STG skips blocks \\[19\\], the DiT has blocks 0..1"),
])
def test_bad_requests_fail_before_work(t2v, tmp_path, change, message):
    root = t2v[0]
    with pytest.raises(PipelineError, match=message):
        generate(options(root, out=tmp_path / "v.npy", **change))


def test_shipped_dtypes_run_close_to_fp32(t2v, tmp_path, monkeypatch):
    """No --dtype: the specs' policy (bf16 DiT and T5 weights, bf16 DiT activations with an fp32 residual
    stream and fp32 modulation; T5 computed in fp32) stays near the fp32 reference."""
    root, replay, expected, _, _ = t2v
    replay.install(monkeypatch)
    result = generate(options(root, out=tmp_path / "v.npy", dtype=None))
    assert np.isfinite(result.frames).all()
    assert np.abs(result.frames - expected).mean() < 0.02  # bf16 keeps ~3 significant digits
