"""The generator behind `vidax-gen ltx-2`, end to end, against diffusers `LTX2Pipeline`.

A tiny LTX-2.0-shaped pipeline (tests/ltx2/references/pipelines.py) saved with `save_pretrained` is the weights
folder. diffusers runs once per module from its generator's first two draws (video noise, then audio
noise); vidax gets the same draws as --latents `[1, C, F', H', W']` and --audio-latents `[1, Ca, L, M']`
(both in the sampler's normalised space) and must give the same frames and waveform. Every guidance
term is on (CFG, STG on block 1, modality isolation, rescale; the audio scales their own).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.generator.generation import generate_video
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.registry import make_pipeline

from tests.oracle import to_np

from .references.pipelines import FPS, GUIDANCE, NEGATIVE, PROMPT, SIZE, components, initial_noise

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
    result = generate_video(make_pipeline(opts.model, opts), opts)
    check(result, reference_run)
    s = result.settings
    assert (s["guidance"], s["audio_guidance"], s["stg_blocks"], s["use_cross_timestep"]) == (3.0, 7.0, (1,), False)


def test_from_a_converted_folder_writes_the_soundtrack(saved, reference_run, tmp_path):
    """`vidax-convert ltx-2 --source FOLDER --out DIR` then `--weights DIR` through the library call: the
    frames as `out.npy`, the waveform as `out.audio.npy`, both named in the sidecar."""
    import json

    from vidax.translator.models import ConvertOptions, convert_model
    from vidax.zoo.api import generate

    _, root = saved
    out = tmp_path / "converted"
    convert_model(ConvertOptions("ltx-2", source=str(root), out=out, dtype="float32"))
    assert (out / "tokenizer" / "tokenizer.json").is_file() and (out / "scheduler" / "scheduler_config.json").is_file()
    opts = options(out, reference_run, tmp_path)
    result = generate(opts)
    check(result, reference_run)
    assert result.settings["weights_source"] == str(out)
    np.testing.assert_array_equal(np.load(tmp_path / "out.audio.npy"), result.audio)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), result.frames)
    sidecar = json.loads((tmp_path / "out.json").read_text())
    assert sidecar["outputs"]["audio"] == str(tmp_path / "out.audio.npy") and sidecar["sample_rate"] == 24000
    assert sidecar["audio_latent_shape"] == [1, 2, 9, 4] and sidecar["latent_shape"] == [1, 8, 2, 2, 4]
    assert result.latents.shape == (1, 8, 2, 2, 4)  # the final video latents, in the --latents layout


def test_straight_from_the_hub(saved, reference_run, tmp_path, monkeypatch):
    """No --weights: the registry's diffusers repo from the Hugging Face cache (offline), converted on the fly."""
    import huggingface_hub.constants

    from vidax.translator.testing import make_hub_cache

    _, root = saved
    files = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}
    make_hub_cache(tmp_path / "hub", "Lightricks/LTX-2", files)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    opts = options(None, reference_run, tmp_path)
    generator = make_pipeline(opts.model, opts)
    assert generator.source.kind == "repo"
    check(generate_video(generator, opts), reference_run)


def test_any_frame_count_matches_reference(saved, tmp_path):
    """12 frames: LTX2Pipeline takes any count: 2 latent frames (decoded: 9) and the audio of 12 frames at
    the frame rate (12 latents here, 9 at 9 frames)."""
    pipe, root = saved
    size = dict(SIZE, frames=12)
    video, audio = initial_noise(pipe, 0, **size)
    assert video.shape[2] == 2 and audio.shape[2] == 12
    np.save(tmp_path / "noise.npy", video)
    np.save(tmp_path / "audio_noise.npy", audio)
    with torch.no_grad():
        out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=12, height=SIZE["height"], width=SIZE["width"],
                   frame_rate=FPS, num_inference_steps=STEPS, generator=torch.Generator().manual_seed(0),
                   output_type="np", **GUIDANCE)
    opts = options(root, (tmp_path / "noise.npy", tmp_path / "audio_noise.npy"), tmp_path, frames=12)
    result = generate_video(make_pipeline(opts.model, opts), opts)
    check(result, (None, None, out.frames[0], to_np(out.audio[0])))


@pytest.mark.parametrize("layout", [dict(dp=2, tp=2, sp=2), dict(offload_chunk=1, tp=2)], ids=["dp2_tp2_sp2", "offload1_tp2"])
def test_mesh_and_offload_match_reference(saved, reference_run, tmp_path, layout, monkeypatch):
    """The four guidance rows split over "data", heads over "tensor", video tokens over "sequence"; or the
    blocks streamed from host memory one at a time (the STG row's layer counter crosses chunks)."""
    from vidax.zoo.weights.offload import StreamedDiT

    chunks = []
    run_group = StreamedDiT.run_group
    monkeypatch.setattr(StreamedDiT, "run_group", lambda self, name, host, *a: chunks.append(host.sizes) or
                        run_group(self, name, host, *a))
    _, root = saved
    opts = options(root, reference_run, tmp_path, **layout)
    check(generate_video(make_pipeline(opts.model, opts), opts), reference_run)
    assert chunks == ([(1, 1)] * STEPS if "offload_chunk" in layout else [])


@pytest.mark.parametrize("change, message", [
    (dict(sampler="ddim"), "unknown sampler 'ddim'"),
    (dict(height=40), "--height 40 is not a multiple of 16"),
    (dict(extra={"guidance_2": 3.0}), "takes no --guidance-2"),
    (dict(extra={"stg_blocks": "5"}), "--stg-blocks 5 outside the DiT's 2 blocks"),
    (dict(extra={"stg_blocks": "a,b"}), "comma-separated block indices"),
    (dict(extra={"sigmas": "1.0,0.5"}, steps=3), "2 sigmas for 3 steps"),
    (dict(extra={"max_sequence_length": 100}), "multiple of the connectors' 8 registers"),
    (dict(extra={"prompt_bos": "none"}), "--prompt-bos must be one of"),
    (dict(extra={"diffusion_decoder": True}), "has no diffusion decoder"),
    (dict(images={"last_image": "x.png"}), "takes no --last-image"),
    (dict(extra={"audio_latents": "missing.npy"}), "audio latents file not found"),
    (dict(frames=17), "latents have shape"),  # --latents of 9 frames for 17
])
def test_bad_requests_fail_before_work(saved, reference_run, tmp_path, change, message, monkeypatch):
    from vidax.zoo.ltx2 import family

    monkeypatch.setattr(family.LTX2Family, "encode", lambda *a: pytest.fail("work started"))
    _, root = saved
    extra = {**FLAGS, "audio_latents": reference_run[1], **change.pop("extra", {})}
    opts = options(root, reference_run, tmp_path, extra=extra, **change)
    with pytest.raises(PipelineError, match=message):
        generate_video(make_pipeline(opts.model, opts), opts)


def test_audio_latents_of_the_wrong_shape_fail_before_work(saved, reference_run, tmp_path):
    _, root = saved
    np.save(tmp_path / "short.npy", np.zeros((1, 2, 5, 4), np.float32))
    opts = options(root, reference_run, tmp_path, extra={"audio_latents": tmp_path / "short.npy"})
    with pytest.raises(PipelineError, match=r"latents have shape \(1, 2, 5, 4\), these settings need \(1, 2, 9, 4\)"):
        generate_video(make_pipeline(opts.model, opts), opts)


def test_cli_writes_video_and_soundtrack(saved, reference_run, tmp_path):
    """`vidax-gen ltx-2 ... --out x.mp4` with the family's flags: one H.264 and one AAC stream of the clip's
    duration; the AAC samples are the waveform (within AAC's loss), the sidecar records both."""
    import json

    from typer.testing import CliRunner

    from vidax.cli.gen import app, family_options
    from vidax.zoo.video_io import read_audio, read_video

    assert family_options("ltx-2", ["--stg-blocks", "1", "--no-audio", "--audio-guidance", "5", "--sigmas", "1,0.5"]) \
        == ({"stg_blocks": "1", "audio": False, "audio_guidance": 5.0, "sigmas": "1,0.5"}, {})
    _, root = saved
    noise, audio_noise, frames, wave = reference_run
    out = tmp_path / "clip.mp4"
    args = ["ltx-2", "--prompt", PROMPT, "--negative-prompt", NEGATIVE, "--weights", str(root), "--height", "32",
            "--width", "64", "--frames", "9", "--steps", str(STEPS), "--fps", str(FPS), "--latents", str(noise),
            "--audio-latents", str(audio_noise), "--stg-blocks", "1", "--dtype", "float32", "--out", str(out),
            "--no-compile-cache"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    import av

    with av.open(str(out)) as container:
        kinds = sorted(s.type for s in container.streams)
        video, audio = container.streams.video[0], container.streams.audio[0]
        assert kinds == ["audio", "video"] and audio.rate == 24000 and audio.codec_context.name == "aac"
        assert float(video.duration * video.time_base) == pytest.approx(9 / FPS)
    decoded, rate = read_audio(out)
    priming = 1024  # the AAC encoder's leading silence (ffmpeg's initial_padding)
    assert rate == 24000 and decoded.shape[0] == 2 and decoded.shape[1] >= priming + wave.shape[1]
    got = decoded[:, priming:priming + wave.shape[1]]
    # AAC at 256 kb/s on a 132-sample noise-like clip: within a tenth of the signal's RMS
    assert np.sqrt(np.mean((got - wave) ** 2)) < 0.1 * np.sqrt(np.mean(wave ** 2))
    assert read_video(out).shape == (9, 32, 64, 3)
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["outputs"]["audio"] == str(out) and sidecar["audio_seconds"] == pytest.approx(wave.shape[1] / 24000)


def test_no_audio_skips_the_soundtrack(saved, reference_run, tmp_path, monkeypatch):
    """`--no-audio`: the audio stream still rides in the DiT (the model is joint) but nothing decodes it."""
    from vidax.zoo.ltx2 import family
    from vidax.zoo.api import generate

    monkeypatch.setattr(family, "_audio_decode", lambda *a: pytest.fail("audio decoded"))
    _, root = saved
    opts = options(root, reference_run, tmp_path, extra={"audio": False})
    result = generate(opts)
    np.testing.assert_allclose(result.frames, reference_run[2], atol=ATOL, rtol=0)
    assert result.audio is None and not (tmp_path / "out.audio.npy").exists()
    assert "audio" not in result.settings["outputs"]


def test_plan_and_memory_job(saved, tmp_path, monkeypatch):
    """`--plan` from the folder's configs; offline from the registry's tables with an empty cache."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    _, root = saved
    opts = GenerateOptions(model="ltx-2", prompt=PROMPT, weights=str(root), out=tmp_path / "x.npy",
                           extra=FLAGS, **SIZE)
    job = make_pipeline("ltx-2", opts).memory_job(opts)
    assert job.tokens == 2 * 2 * 4 and job.batch == 4 and job.dit.depth == 2 and job.text_tokens == 1024
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty"))
    for name in ("ltx-2", "ltx-2.5", "ltx-2.5-distilled"):
        result = CliRunner().invoke(app, [name, "--plan", "--devices", "4", "--device-memory", "30.75"])
        assert result.exit_code == 0, result.output
        assert "GiB per device on 4 x 30.8 GiB" in result.output and "choice: " in result.output


@pytest.fixture(scope="module")
def i2v_run(saved, tmp_path_factory):
    """diffusers `LTX2ImageToVideoPipeline` on the same modules: (image path, --latents, --audio-latents,
    frames, waveform). It encodes the image with the distribution's mode (no draw), so its generator's
    first two draws are again the video and the audio noise."""
    from diffusers import LTX2ImageToVideoPipeline
    from PIL import Image

    pipe, _ = saved
    i2v = LTX2ImageToVideoPipeline(**pipe.components)
    folder = tmp_path_factory.mktemp("ltx2_i2v_run")
    rng = np.random.default_rng(11)
    image = Image.fromarray(rng.integers(0, 256, (SIZE["height"], SIZE["width"], 3), dtype=np.uint8))
    image.save(folder / "first.png")
    video, audio = initial_noise(pipe, 0, **SIZE)
    np.save(folder / "noise.npy", video)
    np.save(folder / "audio_noise.npy", audio)
    with torch.no_grad():
        out = i2v(image=image, image_crf=0, prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=SIZE["frames"],
                  height=SIZE["height"], width=SIZE["width"], frame_rate=FPS, num_inference_steps=STEPS,
                  generator=torch.Generator().manual_seed(0), output_type="np", **GUIDANCE)
    return folder / "first.png", (folder / "noise.npy", folder / "audio_noise.npy", out.frames[0], to_np(out.audio[0]))


def test_image_to_video_matches_reference(saved, i2v_run, tmp_path):
    """`--image` with `--image-crf 0` (diffusers does not re-compress the image; the official code does, CRF 18)."""
    _, root = saved
    image, run = i2v_run
    opts = options(root, run, tmp_path, image=image, extra={"image_crf": 0})
    result = generate_video(make_pipeline(opts.model, opts), opts)
    check(result, run)
    assert not np.allclose(result.frames, saved_frames_t2v(saved, run, tmp_path), atol=1e-3)


def saved_frames_t2v(saved, run, tmp_path):
    """The same noise without the image: the image must change the clip."""
    _, root = saved
    opts = options(root, run, tmp_path / "t2v")
    return generate_video(make_pipeline(opts.model, opts), opts).frames


def test_diffusion_decoder_matches_reference(saved, reference_run, tmp_path, monkeypatch):
    """`--diffusion-decoder` on a folder with LTX-2.5's `diffusion_decoder/`: the final latents through diffusers'
    `LTX2VideoDiffusionDecodePipeline` (denormalised with the video VAE's statistics), its x_t noise the one vidax
    draws from the run's seed on the host (decode stream 2)."""
    import shutil

    import diffusers.models.autoencoders.ltx2_diffusion_decoder as reference_decoder
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.ltx2.pipeline_ltx2_diffusion_decode import LTX2VideoDiffusionDecodePipeline

    from .references.ltx2_spec_fixtures import diffusion_decoder_reference, save_diffusers

    pipe, root = saved
    folder = tmp_path / "with_decoder"
    shutil.copytree(root, folder)
    # kernels that fit the 2 x 2 x 4 latent grid of the 32x64 clip (height 2 < the tiny decoder's 3)
    decoder = diffusion_decoder_reference(decoder_stage_kernels=((3, 1, 3), (3, 3, 3), (3, 3, 3), (3, 3, 5)),
                                          decoder_stage5_kernel=(3, 3, 5))
    save_diffusers(decoder, folder / "diffusion_decoder")
    # the registry's ltx-2.5 lists the decoder; the folder's configs (the tiny LTX-2.0-shaped model) win
    opts = options(folder, reference_run, tmp_path, model="ltx-2.5", extra={"diffusion_decoder": True, "audio": False})
    result = generate_video(make_pipeline(opts.model, opts), opts)

    drawn = []

    def host_noise(shape, generator=None, device=None, dtype=None):
        drawn.append(tuple(shape))
        return torch.from_numpy(np.random.default_rng([opts.seed, 2, 0]).standard_normal(tuple(shape), dtype=np.float32))

    monkeypatch.setattr(reference_decoder, "randn_tensor", host_noise)
    decode = LTX2VideoDiffusionDecodePipeline(diffusion_decoder=decoder, scheduler=FlowMatchEulerDiscreteScheduler(),
                                              vae=pipe.vae)
    with torch.no_grad():
        want = decode(torch.from_numpy(np.asarray(result.latents)), output_type="np").frames[0]
    assert len(drawn) == 1 and result.frames.shape == want.shape
    np.testing.assert_allclose(result.frames, want, atol=ATOL, rtol=0)
    with pytest.raises(PipelineError, match="ltx-2 has no diffusion decoder"):
        bad = options(folder, reference_run, tmp_path, extra={"diffusion_decoder": True})
        generate_video(make_pipeline(bad.model, bad), bad)
