"""The generator behind `vidax-gen hunyuanvideo-1.5`, end to end, against diffusers `HunyuanVideo15Pipeline`.

A tiny pipeline (Qwen2.5-VL and ByT5 towers, tokenizers, DiT, VAE, scheduler, CFG guider) saved with
`save_pretrained` is the weights folder; both sides start from the same initial latents and the
frames must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.generator.generation import generate_video
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.registry import make_pipeline

from tests.oracle import hub_cached

from .hunyuan_spec_fixtures import dit_reference, vae_reference
from .pipelines import saved, towers  # noqa: F401  (module fixtures: the tiny pipeline and its text towers)

PROMPT = 'a neon sign that says "OPEN" above a door'
ODD = dict(height=40, width=56, num_frames=8)


@pytest.fixture(scope="module")
def reference_run(saved, tmp_path_factory):
    """(initial latents .npy, diffusers' frames) of one seeded run: 2 steps, 5 frames at 32x48."""
    ref, _ = saved
    latents = torch.randn(1, 4, 2, 2, 3, generator=torch.Generator().manual_seed(0))
    noise = tmp_path_factory.mktemp("hv15_reference_run") / "noise.npy"
    np.save(noise, latents.numpy())
    with torch.no_grad():
        expected = ref(prompt=PROMPT, latents=latents, height=32, width=48, num_frames=5, num_inference_steps=2,
                       output_type="np").frames[0]
        # a size the reference floors: 40x56 with 8 frames makes the same 2 x 2 x 3 latents, 5 frames of 32x48
        odd = ref(prompt=PROMPT, latents=latents, num_inference_steps=2, output_type="np", **ODD).frames[0]
    np.save(noise.parent / "odd.npy", odd)
    return noise, expected


def _options(weights, noise, tmp_path, **extra) -> GenerateOptions:
    # the encoder specs default to bf16; the reference runs fp32
    base = dict(model="hunyuanvideo-1.5", prompt=PROMPT, weights=weights, height=32, width=48, frames=5, steps=2,
                latents=noise, out=tmp_path / "out.npy", compile_cache=False, dtype="float32")
    return GenerateOptions(**{**base, **extra})


def test_generate_matches_reference(saved, reference_run, tmp_path):
    _, root = saved
    noise, expected = reference_run
    options = _options(str(root), noise, tmp_path)
    result = generate_video(make_pipeline(options.model, options), options)
    assert result.frames.shape == expected.shape == (5, 32, 48, 3)
    np.testing.assert_allclose(result.frames, expected, atol=1e-5, rtol=0)
    assert result.settings["shift"] == 5.0 and result.settings["guidance"] == 6.0


def test_a_size_the_reference_floors_matches_it(saved, reference_run, tmp_path):
    """40x56 with 8 frames (vidax refused it: "--height 40 is not a multiple of 16"): 5 frames of 32x48, as the
    pipeline makes them; the settings record the size that ran."""
    _, root = saved
    noise, _ = reference_run
    expected = np.load(noise.parent / "odd.npy")
    options = _options(str(root), noise, tmp_path, height=ODD["height"], width=ODD["width"], frames=ODD["num_frames"])
    result = generate_video(make_pipeline(options.model, options), options)
    assert result.frames.shape == expected.shape == (5, 32, 48, 3)
    np.testing.assert_allclose(result.frames, expected, atol=1e-5, rtol=0)
    assert (result.settings["height"], result.settings["width"], result.settings["frames"]) == (32, 48, 8)


def test_a_size_the_reference_fails_on_is_refused(saved, tmp_path):
    """Under 16 pixels the reference's latents are empty and it fails; vidax refuses the request first."""
    from vidax.zoo.errors import PipelineError

    ref, root = saved
    with pytest.raises(RuntimeError, match="Kernel size can't be greater"), torch.no_grad():
        ref(prompt=PROMPT, height=8, width=48, num_frames=5, num_inference_steps=1, output_type="np")
    options = _options(str(root), None, tmp_path, height=8)
    with pytest.raises(PipelineError, match="--height 8 is below 16"):
        make_pipeline(options.model, options).resolve_settings(options)


@pytest.mark.parametrize("layout", [dict(offload_chunk=1), dict(offload_chunk=2, tp=2), dict(offload_chunk=1, sp=2, dp=2)])
def test_offloaded_blocks_match_reference(saved, reference_run, tmp_path, layout, monkeypatch):
    """`--offload-chunk N`: the blocks stream from host memory N at a time (also under a mesh); same frames."""
    from vidax.zoo.weights.offload import StreamedDiT

    streamed_chunks = []
    run_group = StreamedDiT.run_group
    monkeypatch.setattr(StreamedDiT, "run_group",
                        lambda self, name, host, *a: streamed_chunks.append(host.sizes) or run_group(self, name, host, *a))
    _, root = saved
    noise, expected = reference_run
    options = _options(str(root), noise, tmp_path, **layout)
    result = generate_video(make_pipeline(options.model, options), options)
    np.testing.assert_allclose(result.frames, expected, atol=1e-5, rtol=0)
    chunk = layout["offload_chunk"]
    assert streamed_chunks == [(chunk,) * (2 // chunk)] * 2  # 2 blocks in chunks of N, once per step


@pytest.mark.parametrize("change, message", [(dict(sampler="ddim"), "unknown sampler 'ddim'"),
                                             (dict(offload_chunk=0), "--offload-chunk must be"),
                                             (dict(steps=0), "at least 1"),
                                             (dict(extra={"guidance_2": 3.0}), "takes no --guidance-2")])
def test_bad_requests_fail_before_work(saved, reference_run, tmp_path, change, message):
    from vidax.zoo.errors import PipelineError

    _, root = saved
    with pytest.raises(PipelineError, match=message):  # some when the options are read, the rest before work
        options = _options(str(root), reference_run[0], tmp_path, **change)
        generate_video(make_pipeline(options.model, options), options)


def test_memory_job_plan_and_automatic_layout(saved, tmp_path):
    """`vidax-gen hunyuanvideo-1.5 --plan` and the automatic layout: sizes from the folder's configs (no
    weights read); every video sequence carries the 1985 joint image + ByT5 + Qwen tokens."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app
    from vidax.zoo.generator.contract import Settings
    from vidax.zoo.hunyuan_video15.config import TransformerConfig, VAEConfig
    from vidax.zoo.hunyuan_video15.family import memory_job
    from vidax.zoo.plan.layouts import choose_layout
    from vidax.zoo.compute.planner import Layout, predict

    _, root = saved
    options = GenerateOptions(model="hunyuanvideo-1.5", prompt=PROMPT, weights=str(root), height=32, width=48, frames=5,
                              out=tmp_path / "out.npy", compile_cache=False)
    generator = make_pipeline(options.model, options)
    job = generator.memory_job(options)
    assert job.tokens == 2 * 2 * 3 + 729 + 256 + 1000 and job.batch == 2 and job.dit.depth == 2
    chosen, why = choose_layout(generator, options)
    assert (chosen.tp, chosen.sp, chosen.dp) == (1, 1, 1) and "memory planner" in why  # CPU: one device when it fits
    result = CliRunner().invoke(app, ["hunyuanvideo-1.5", "--weights", str(root), "--plan", "--devices", "4",
                                      "--device-memory", "30.75"])
    assert result.exit_code == 0, result.output
    assert "GiB per device on 4 x 30.8 GiB" in result.output and "choice: dp=" in result.output

    # the shipped sizes at 720p / 121 frames: the reference measured 30.3 GB per chip at TP=4 (docs/MODELS.md)
    settings = Settings(height=720, width=1280, frames=121, guidance=6.0, shift=9.0)
    full = predict(memory_job(TransformerConfig(), VAEConfig(), settings), Layout(tp=4))
    assert abs(full.total - 30.3e9) <= 0.2 * 30.3e9  # bytes; predicted 29.0 GiB = 31.1 GB


def test_generate_straight_from_the_hub(saved, reference_run, tmp_path, monkeypatch):
    """No --weights: the variant's diffusers mirror, read from the Hugging Face cache (offline), converted on
    the fly; the frames are diffusers'."""
    _, root = saved
    noise, expected = reference_run
    hub_cached(monkeypatch, tmp_path / "hub", "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v", root)
    options = _options(None, noise, tmp_path)
    generator = make_pipeline(options.model, options)
    assert generator.source.kind == "repo"
    np.testing.assert_allclose(generate_video(generator, options).frames, expected, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def saved_i2v(towers, tmp_path_factory):  # noqa: F811
    from diffusers import ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler
    from diffusers import HunyuanVideo15ImageToVideoPipeline as Reference

    from tests.oracle import perturb

    import transformers
    text_ref, _ = towers
    siglip = perturb(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(
        hidden_size=12, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)), 4)
    dit = dit_reference(in_channels=9, out_channels=4, text_embed_dim=32, target_size=32, task_type="i2v")
    ref = Reference(text_encoder=text_ref.text_encoder, tokenizer=text_ref.tokenizer, transformer=dit, vae=vae_reference(),
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=text_ref.text_encoder_2,
                    tokenizer_2=text_ref.tokenizer_2, guider=ClassifierFreeGuidance(guidance_scale=6.0),
                    image_encoder=siglip, feature_extractor=transformers.SiglipImageProcessor(size={"height": 32, "width": 32}))
    root = tmp_path_factory.mktemp("hv15_generate_i2v")
    ref.save_pretrained(root)
    return ref, root


def test_generate_i2v_matches_reference(saved_i2v, tmp_path):
    """`--image`: the size comes from the image's aspect bucket; meanflow timestep_r; SigLIP and first-frame latents."""
    from PIL import Image

    ref, root = saved_i2v
    image = np.random.default_rng(1).integers(0, 256, (30, 52, 3), dtype=np.uint8)
    Image.fromarray(image).save(tmp_path / "first.png")
    height, width = ref.video_processor.calculate_default_height_width(30, 52, 32)
    latents = torch.randn(1, 4, 2, height // 16, width // 16, generator=torch.Generator().manual_seed(2))
    np.save(tmp_path / "noise.npy", latents.numpy())
    with torch.no_grad():
        expected = ref(image=Image.fromarray(image), prompt=PROMPT, latents=latents, num_frames=5, num_inference_steps=2,
                       output_type="np").frames[0]
    options = GenerateOptions(model="hunyuanvideo-1.5-480p-i2v", prompt=PROMPT, image=tmp_path / "first.png",
                              weights=str(root), frames=5, steps=2, shift=7.0, latents=tmp_path / "noise.npy",
                              out=tmp_path / "out.npy", compile_cache=False, dtype="float32")
    result = generate_video(make_pipeline(options.model, options), options)
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=1e-5, rtol=0)


def test_generate_sequence_and_data_parallel_equals_one_device(saved, tmp_path):
    """`--sp 2 --dp 2` (Ulysses on the joint attention, CFG branches on "data") on fake CPU devices."""
    ref, root = saved
    np.save(tmp_path / "noise.npy", torch.randn(1, 4, 2, 2, 3, generator=torch.Generator().manual_seed(0)).numpy())
    base = dict(model="hunyuanvideo-1.5", prompt=PROMPT, weights=str(root), height=32, width=48, frames=5, steps=2,
                latents=tmp_path / "noise.npy", out=tmp_path / "out.npy", compile_cache=False, dtype="float32")
    single = GenerateOptions(**base)
    sharded = GenerateOptions(**base, sp=2, dp=2)
    one = generate_video(make_pipeline(single.model, single), single).frames
    many = generate_video(make_pipeline(sharded.model, sharded), sharded).frames
    np.testing.assert_allclose(many, one, atol=1e-5, rtol=0)  # reduction order differs across shards
