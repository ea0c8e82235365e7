"""The generator behind `vidax-gen hunyuanvideo`, end to end, against diffusers `HunyuanVideoPipeline`.

A tiny pipeline (Llama and CLIP-L stand-ins with locally built tokenizers, DiT, VAE, FlowMatchEuler shift 7)
saved with `save_pretrained` is the weights folder; both sides start from the same initial latents and the
frames must agree. One module-scoped reference run per setting: embedded guidance alone (the released
model's way) and with true CFG (a negative prompt, `true_cfg_scale` 3, 64 text tokens).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidax.zoo.generator.generation import generate_video
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.registry import make_pipeline

from tests.oracle import hub_cached

from . import pipelines as tiny

# fp32 on both sides at highest matmul precision; what remains is summation order (XLA vs torch kernels,
# blockwise vs plain softmax) through 2 steps of 4 DiT blocks and the VAE: measured max 5.4e-6 (T2V), 5.8e-6 (I2V).
FRAME_ATOL = 2e-5
ODD_FRAMES = 8  # off the VAE's 4k+1 grid: 2 latent frames, 5 frames out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv_generate")
    parts = tiny.towers(root)
    pipe = tiny.t2v_pipeline(root, parts)
    noise = root / "noise.npy"
    np.save(noise, tiny.latents(0))
    common = dict(prompt=tiny.PROMPT, height=tiny.HEIGHT, width=tiny.WIDTH, num_frames=tiny.FRAMES,
                  num_inference_steps=tiny.STEPS, output_type="np")
    with torch.no_grad():
        embedded = pipe(latents=torch.from_numpy(np.load(noise)), **common).frames[0]
        true_cfg = pipe(latents=torch.from_numpy(np.load(noise)), negative_prompt=tiny.NEGATIVE, true_cfg_scale=3.0,
                        max_sequence_length=64, **common).frames[0]
        odd = pipe(latents=torch.from_numpy(np.load(noise)), **{**common, "num_frames": ODD_FRAMES}).frames[0]
    return root, pipe, noise, {"embedded": embedded, "true_cfg": true_cfg, "odd": odd}


def options(weights, noise, tmp_path, **extra) -> GenerateOptions:
    family = {k: extra.pop(k) for k in ("true_cfg", "max_sequence_length", "prompt_2", "negative_prompt_2",
                                        "vae_tiling", "image_embed_interleave") if k in extra}
    base = dict(model="hunyuanvideo", prompt=tiny.PROMPT, weights=None if weights is None else str(weights),
                height=tiny.HEIGHT, width=tiny.WIDTH, frames=tiny.FRAMES, steps=tiny.STEPS, latents=noise,
                out=tmp_path / "out.npy", compile_cache=False, dtype="float32")
    return GenerateOptions(**{**base, **extra}, extra=family)


def run(opts: GenerateOptions):
    return generate_video(make_pipeline(opts.model, opts), opts)


def test_generate_matches_reference(saved, tmp_path):
    """Embedded guidance 6 (the registry's), shift 7 from the folder's scheduler, 256 text tokens."""
    root, _, noise, expected = saved
    result = run(options(root / "model", noise, tmp_path))
    assert result.frames.shape == expected["embedded"].shape == (5, 32, 48, 3)
    np.testing.assert_allclose(result.frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)
    s = result.settings
    assert (s["guidance"], s["shift"], s["true_cfg"]) == (6.0, 7.0, 1.0)
    assert (s["max_sequence_length"], s["vae_tiling"]) == (256, True)


def test_a_frame_count_off_the_vae_grid_matches_reference(saved, tmp_path):
    """--frames 8 (vidax refused it: "not of the form 4k+1"): the pipeline makes the 5 frames its VAE decodes."""
    root, _, noise, expected = saved
    result = run(options(root / "model", noise, tmp_path, frames=ODD_FRAMES))
    assert result.frames.shape == expected["odd"].shape == (5, 32, 48, 3)
    np.testing.assert_allclose(result.frames, expected["odd"], atol=FRAME_ATOL, rtol=0)


def test_true_cfg_on_the_data_and_tensor_axes(saved, tmp_path):
    """`--true-cfg 3 --negative-prompt N --max-sequence-length 64` with `--dp 2 --tp 2`: the two branches
    side by side on "data", each DiT split over "tensor"; diffusers' true_cfg_scale frames."""
    root, _, noise, expected = saved
    assert np.abs(expected["true_cfg"] - expected["embedded"]).max() > 1e-2
    opts = options(root / "model", noise, tmp_path, negative_prompt=tiny.NEGATIVE, true_cfg=3.0,
                   max_sequence_length=64, dp=2, tp=2)
    np.testing.assert_allclose(run(opts).frames, expected["true_cfg"], atol=FRAME_ATOL, rtol=0)


def test_sequence_parallel_and_streamed_offload(saved, tmp_path, monkeypatch):
    """`--sp 2 --offload-chunk 1`: the joint text+video attention under Ulysses, both block kinds streamed
    from host memory one block at a time (two chunk pools); the reference's frames."""
    from vidax.zoo.weights.offload import StreamedDiT

    streamed = []
    run_group = StreamedDiT.run_group
    monkeypatch.setattr(StreamedDiT, "run_group",
                        lambda self, name, host, *a: streamed.append((name, host.sizes))
                        or run_group(self, name, host, *a))
    root, _, noise, expected = saved
    result = run(options(root / "model", noise, tmp_path, sp=2, offload_chunk=1))
    np.testing.assert_allclose(result.frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)
    assert streamed == [("blocks", (1, 1)), ("single_blocks", (1, 1))] * tiny.STEPS


def test_unipc_sampler(saved, tmp_path):
    """`--sampler unipc` over a folder whose scheduler is FlowMatchEuler: the pipeline with UniPC (flow mode,
    the folder's shift) swapped in, on the pipeline's own grid linspace(1, 0, n + 1)[:-1]."""
    from diffusers import UniPCMultistepScheduler

    root, pipe, noise, _ = saved
    unipc = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=7.0)
    reference = type(pipe)(**{**pipe.components, "scheduler": unipc})
    with torch.no_grad():
        expected = reference(prompt=tiny.PROMPT, latents=torch.from_numpy(np.load(noise)), height=tiny.HEIGHT,
                             width=tiny.WIDTH, num_frames=tiny.FRAMES, num_inference_steps=tiny.STEPS,
                             output_type="np").frames[0]
    result = run(options(root / "model", noise, tmp_path, sampler="unipc"))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    # dpm++: diffusers' DPMSolverMultistepScheduler takes no custom sigmas, so HunyuanVideoPipeline cannot
    # run it at all (no reference); vidax runs it in flow mode at the folder's shift on its own grid
    dpm = run(options(root / "model", noise, tmp_path, sampler="dpm++"))
    assert dpm.settings["sampler"] == "dpm++" and np.isfinite(dpm.frames).all()


def test_prompt_2_is_clips_prompt(saved, tmp_path):
    """`--prompt-2 P2`: CLIP pools P2, Llama reads the prompt. diffusers 0.42 takes `prompt_2` but hands CLIP
    `prompt`; the reference here is its pipeline with P2's pooled embedding given (what the keyword documents)."""
    root, pipe, noise, runs = saved
    other = "a lighthouse at night"
    with torch.no_grad():
        pooled = pipe._get_clip_prompt_embeds(other, device=torch.device("cpu"))
        expected = pipe(prompt=tiny.PROMPT, pooled_prompt_embeds=pooled, latents=torch.from_numpy(np.load(noise)),
                        height=tiny.HEIGHT, width=tiny.WIDTH, num_frames=tiny.FRAMES, num_inference_steps=tiny.STEPS,
                        output_type="np").frames[0]
    assert np.abs(expected - runs["embedded"]).max() > 1e-2  # the pooled prompt shows in the frames
    result = run(options(root / "model", noise, tmp_path, prompt_2=other))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_generate_straight_from_the_hub(saved, tmp_path, monkeypatch):
    """No --weights: the diffusers mirror hunyuanvideo-community/HunyuanVideo from the Hugging Face cache
    (offline), converted on the fly; through `vidax.zoo.api.generate`, which writes the output."""
    root, _, noise, expected = saved
    hub_cached(monkeypatch, tmp_path / "hub", "hunyuanvideo-community/HunyuanVideo", root / "model")
    opts = options(None, noise, tmp_path, tp=1)
    result = generate(opts)
    assert result.settings["weights_source"] == f"hunyuanvideo-community/HunyuanVideo@{'0' * 40}"
    np.testing.assert_allclose(np.load(opts.out), expected["embedded"], atol=FRAME_ATOL, rtol=0)


def test_official_folder_and_its_conversion(saved, tmp_path):
    """tencent/HunyuanVideo's ckpts/ layout (the DiT a DeepSpeed .pt with no config: sizes from its shapes,
    RoPE from the registry), and `vidax-convert hunyuanvideo --source CKPTS --out DIR` of it: both generate
    the reference's frames."""
    import json

    from vidax.translator.models import MODEL_FILE, ConvertOptions, convert_model

    root, pipe, noise, expected = saved
    ckpts = tiny.official_t2v_folder(tmp_path / "ckpts", pipe)
    result = run(options(ckpts, noise, tmp_path))
    np.testing.assert_allclose(result.frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)

    out = tmp_path / "converted"
    convert_model(ConvertOptions(model="hunyuanvideo", source=str(ckpts), out=out, dtype="float32"))
    assert {p.name for p in out.iterdir()} == {"transformer", "vae", "text_encoder", "tokenizer", "text_encoder_2",
                                              "tokenizer_2", MODEL_FILE}
    assert json.loads((out / MODEL_FILE).read_text())["component_layouts"]["transformer"] == "official"
    np.testing.assert_allclose(run(options(out, noise, tmp_path)).frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("change, message", [
    (dict(frames=0), "--frames must be positive, got 0"),
    (dict(height=40), "--height 40 is not a multiple of 16"),
    (dict(sampler="ddim"), "unknown sampler 'ddim'"),
    (dict(extra={"guidance_2": 3.0}), "takes no --guidance-2"),
    (dict(image="first.png"), "hunyuanvideo takes no image-to-video conditioning"),
    (dict(extra={"image_embed_interleave": 2}), "--image-embed-interleave is for image-to-video"),
    (dict(extra={"negative_prompt_2": "x"}), "--negative-prompt-2 .* give --true-cfg > 1"),
    (dict(extra={"max_sequence_length": 0}), "--max-sequence-length must be at least 1"),
])
def test_bad_requests_fail_before_work(saved, tmp_path, monkeypatch, change, message):
    """One-line PipelineErrors before any weights are read (reading one would fail the test)."""
    from vidax.zoo.weights.source import WeightsSource

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were read before the request was checked")

    monkeypatch.setattr(WeightsSource, "load", no_weights)
    root, _, noise, _ = saved
    if "image" in change:
        from PIL import Image

        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "first.png")
        change = {"image": tmp_path / "first.png"}
    opts = options(root / "model", noise, tmp_path)
    opts = GenerateOptions(**{**{f: getattr(opts, f) for f in opts.__dataclass_fields__}, **change})
    with pytest.raises(PipelineError, match=message) as err:
        run(opts)
    assert "\n" not in str(err.value)


def test_plan_offline_from_the_registry(tmp_path, monkeypatch):
    """`vidax-gen hunyuanvideo --plan` with HF_HUB_OFFLINE=1 and an empty cache: every size from the
    registry's `config` tables; and the paper's setting (720p x 129 frames, 4 x 30.75 GB, TP=4 + offload)."""
    import huggingface_hub.constants
    from typer.testing import CliRunner

    from vidax.cli.gen import app
    from vidax.zoo.compute.planner import Layout, predict

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    for model, flags in (("hunyuanvideo", ["--true-cfg", "3", "--max-sequence-length", "128", "--no-vae-tiling"]),
                         ("hunyuanvideo-i2v", ["--image-embed-interleave", "2"])):  # the family's flags parse
        result = CliRunner().invoke(app, [model, "--plan", "--devices", "4", "--device-memory", "30.75", *flags])
        assert result.exit_code == 0, result.output
        assert "GiB per device on 4 x 30.8 GiB" in result.output and "choice: " in result.output

    opts = GenerateOptions(model="hunyuanvideo", prompt="", out=tmp_path / "v.mp4")
    family = make_pipeline(opts.model, opts)
    assert family.source_or_none is None  # nothing cached, nothing fetched
    job = family.memory_job(opts)
    assert job.tokens == 33 * 45 * 80 + 256 and job.batch == 1 and job.dit.depth == 60
    paper = predict(job, Layout(tp=4, offload_chunk=1))
    assert paper.total <= 30.75e9
    assert abs(paper.total - 18.4e9) <= 0.2 * 18.4e9  # the vidax paper measured 18.4 GB per chip


@pytest.mark.parametrize("scale", [1.0, 3.5, 6.0, 7.25])
def test_embedded_guidance_as_the_references_build_it(scale):
    """`torch.tensor([g], dtype=transformer_dtype) * 1000`: bf16 rounds 6000 to 6016; fp32 keeps it."""
    from vidax.zoo.hunyuan_video.family import embedded_guidance

    for dtype, torch_dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        assert embedded_guidance(scale, dtype) == float((torch.tensor([scale], dtype=torch_dtype) * 1000.0).float())
    assert embedded_guidance(6.0, "bfloat16") == 6016.0
