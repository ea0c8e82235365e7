"""`vidax-gen cosmos3-*` end to end against diffusers' `Cosmos3OmniPipeline`.

Two tiny perturbed pipelines saved with `save_pretrained` (a Qwen-like tokenizer with Qwen2-VL's chat
template built locally, a Wan2.2-style VAE, UniPC flow shift 10): "nano" (SwiGLU, q/k norms on both
pathways, system prompt on) and "edge" (relu2, `k_norm_und_for_gen`, no system prompt,
`use_native_flow_schedule`). The reference runs once per case from a seeded generator; vidax generates
from the same folder with that generator's noise as `--latents`, through `vidax.zoo.api.generate`.

Tolerance: frames in [0, 1] within 2e-5, both sides in fp32 at highest matmul precision; what remains is
summation order (XLA vs torch kernels, blockwise vs plain softmax) through three guided UniPC steps
(guidance 6 weighs the DiT outputs 6x and 5x) and the VAE decode.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
    Cosmos3OmniPipeline,
    _preprocess_conditioning_image,
)
from diffusers.utils.torch_utils import randn_tensor
from PIL import Image
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.registry import make_pipeline

from tests.oracle import hub_cached, perturb

from .cosmos3_spec_fixtures import dit_reference
from .test_pipeline import SCHEDULER, TINY_VAE22, tokenizer_folder

FRAME_ATOL = 2e-5
PROMPT, NEGATIVE = "A robot arm folds a towel.", "blurry"
HEIGHT, WIDTH, FRAMES, STEPS, FPS = 64, 64, 9, 3, 16.0  # 3 latent frames of 2 x 2 patches
LATENT_SHAPE = (1, 4, 3, 4, 4)
# a size the reference pads: latents 3 x 4 (zero-padded to 4 x 4 for the 2x2 patches, cropped back), and 6
# frames: the prompt says 6, the VAE encodes the first 5 (2 latent frames), 5 frames come out
ODD = dict(height=48, width=64, frames=6)
ODD_LATENT_SHAPE, ODD_OUT = (1, 4, 2, 3, 4), (5, 48, 64, 3)
DIT = dict(attention_bias=False, latent_channel=4, patch_latent_dim=16, vocab_size=400, sound_gen=False,
           action_gen=False)
FAMILY_FLAGS = ("video", "condition_frame_indexes_vision", "condition_video_keep", "use_system_prompt",
                "add_resolution_template", "add_duration_template")


def build(root, variant: str):
    torch.manual_seed(0)
    vae = perturb(AutoencoderKLWan(**TINY_VAE22), seed=1)
    dit = dit_reference(variant, seed=2, **DIT)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_folder(root / "tokenizer_source"))
    edge = variant == "edge"
    pipe = Cosmos3OmniPipeline(transformer=dit, text_tokenizer=tokenizer, vae=vae,
                               scheduler=UniPCMultistepScheduler(**SCHEDULER), enable_safety_checker=False,
                               default_use_system_prompt=not edge, use_native_flow_schedule=edge)
    pipe.save_pretrained(root / "model")
    return pipe


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    roots = {v: tmp_path_factory.mktemp(f"cosmos3_{v}") for v in ("nano", "edge")}
    return {v: (build(root, v), root) for v, root in roots.items()}


def _noise(seed: int, shape=LATENT_SHAPE) -> np.ndarray:
    return randn_tensor(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).numpy()


@pytest.fixture(scope="module")
def runs(saved):
    """The reference's frames per case (and the noise, image and clip files vidax gets)."""
    out = {}
    rng = np.random.default_rng(7)
    for case, variant, seed in (("t2v", "nano", 13), ("i2v", "nano", 14), ("v2v", "nano", 15), ("edge", "edge", 16),
                                ("odd", "nano", 17)):
        pipe, root = saved[variant]
        np.save(root / f"noise_{case}.npy", _noise(seed, ODD_LATENT_SHAPE if case == "odd" else LATENT_SHAPE))
        kw = dict(num_frames=FRAMES, height=HEIGHT, width=WIDTH)
        if case == "i2v":  # at the generation size: the cover-resize is exact (tested on its own below)
            Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)).save(root / "first.png")
            kw["image"] = Image.open(root / "first.png")
        if case == "odd":  # image-to-video: the image resized and the 6-frame video encoded at the odd size
            kw = dict(num_frames=ODD["frames"], height=ODD["height"], width=ODD["width"],
                      image=Image.open(root / "first.png"))
        if case == "v2v":
            clip = rng.integers(0, 256, (7, 48, 80, 3), dtype=np.uint8)  # resized (PIL bilinear), last 5 frames kept
            np.save(root / "clip.npy", clip)
            kw.update(video=[Image.fromarray(f) for f in clip], condition_video_keep="last")
        with torch.no_grad():
            out[case] = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, fps=FPS, num_inference_steps=STEPS,
                             generator=torch.Generator().manual_seed(seed), output_type="np",
                             enable_safety_check=False, **kw)[0]
    return out


def options(model: str, weights, noise, tmp_path, **extra) -> GenerateOptions:
    family = {k: extra.pop(k) for k in FAMILY_FLAGS if k in extra}
    base = dict(model=model, prompt=PROMPT, negative_prompt=NEGATIVE, weights=None if weights is None else str(weights),
                height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, fps=FPS, latents=noise, out=tmp_path / "v.npy",
                dtype="float32", compile_cache=False)
    return GenerateOptions(**{**base, **extra}, extra=family)


@pytest.mark.parametrize("case", ["t2v", "i2v", "v2v", "edge"])
def test_frames_match_the_pipeline(saved, runs, tmp_path, case):
    variant = "edge" if case == "edge" else "nano"
    _, root = saved[variant]
    extra = {"i2v": dict(image=root / "first.png"),
             "v2v": dict(video=root / "clip.npy", condition_video_keep="last")}.get(case, {})
    result = generate(options(f"cosmos3-{variant}", root / "model", root / f"noise_{case}.npy", tmp_path, **extra))
    assert result.frames.shape == runs[case].shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, runs[case], atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    assert sidecar["use_system_prompt"] is (variant == "nano")  # model_index.json's flags
    assert sidecar["native_flow_schedule"] is (variant == "edge")
    assert sidecar["shift"] == 10.0 and sidecar["fps"] == FPS


def test_a_size_the_reference_pads_matches_it(saved, runs, tmp_path):
    """48x64 with 6 frames, image-to-video (vidax refused it: "--height 48 is not a multiple of 32")."""
    _, root = saved["nano"]
    result = generate(options("cosmos3-nano", root / "model", root / "noise_odd.npy", tmp_path, image=root / "first.png",
                              **ODD))
    assert result.frames.shape == runs["odd"].shape == ODD_OUT
    np.testing.assert_allclose(result.frames, runs["odd"], atol=FRAME_ATOL, rtol=0)
    assert result.settings["frames"] == ODD["frames"]  # the prompt's duration sentence says 6 frames


def test_converted_folder_on_the_mesh_and_streamed(saved, runs, tmp_path, monkeypatch):
    """`vidax-convert cosmos3-nano` of the folder, then generate from it with the DiT on all 8 fake devices
    (tp 2 x sp 2 x dp 2) and again with its blocks streamed one at a time (`--offload-chunk 1`)."""
    from vidax.translator import convert_model
    from vidax.zoo.weights.offload import StreamedDiT

    _, root = saved["nano"]
    out = tmp_path / "converted"
    convert_model("cosmos3-nano", source=str(root / "model"), out=out, dtype="float32")
    noise = root / "noise_t2v.npy"
    assert make_pipeline("cosmos3-nano", options("cosmos3-nano", out, noise, tmp_path)).source.kind == "converted"
    result = generate(options("cosmos3-nano", out, noise, tmp_path, tp=2, sp=2, dp=2))
    np.testing.assert_allclose(result.frames, runs["t2v"], atol=FRAME_ATOL, rtol=0)
    assert result.settings["use_system_prompt"] is True  # model_index.json, recorded beside the converted weights

    chunks = []
    run_group = StreamedDiT.run_group
    monkeypatch.setattr(StreamedDiT, "run_group",
                        lambda self, name, host, *a: chunks.append(host.sizes) or run_group(self, name, host, *a))
    result = generate(options("cosmos3-nano", out, noise, tmp_path, offload_chunk=1))
    np.testing.assert_allclose(result.frames, runs["t2v"], atol=FRAME_ATOL, rtol=0)
    assert chunks == [(1, 1)] * STEPS


def test_generate_straight_from_the_hub(saved, runs, tmp_path, monkeypatch):
    """No --weights: the registry's repo (nvidia/Cosmos3-Edge), read from the Hugging Face cache offline."""
    _, root = saved["edge"]
    hub_cached(monkeypatch, tmp_path / "hub", "nvidia/Cosmos3-Edge", root / "model")
    opts = options("cosmos3-edge", None, root / "noise_edge.npy", tmp_path)
    assert make_pipeline(opts.model, opts).source.kind == "repo"
    np.testing.assert_allclose(generate(opts).frames, runs["edge"], atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("change, message", [
    (dict(height=40), "--height 40 is not a multiple of 16"),
    (dict(height=0), "--height must be positive, got 0"),
    (dict(frames=0), "--frames must be positive, got 0"),
    (dict(sampler="ddim"), "unknown sampler 'ddim'"),
    (dict(guidance_2=3.0), "takes no --guidance-2"),
    (dict(condition_video_keep="middle"), "first or last"),
    (dict(video="clip.npy", condition_frame_indexes_vision=(0, 5)), "reaches past the 3 latent frames"),
    (dict(condition_frame_indexes_vision=(-1,)), "non-negative"),
    (dict(image="first.png", frames=1), "--frames 1"),
    (dict(image="first.png", video="clip.npy"), "not both"),
    (dict(video="missing.mp4"), "conditioning video not found"),
])
def test_bad_requests_fail_before_any_work(saved, runs, tmp_path, change, message, monkeypatch):
    from vidax.zoo.cosmos3.family import Cosmos3Family

    _, root = saved["nano"]
    for key in ("video", "image"):
        if key in change:
            change[key] = root / change[key]
    extra = {"guidance_2": change.pop("guidance_2")} if "guidance_2" in change else None
    monkeypatch.setattr(Cosmos3Family, "encode", lambda *a: pytest.fail("work started"))
    opts = options("cosmos3-nano", root / "model", root / "noise_t2v.npy", tmp_path, **change)
    if extra:
        opts = GenerateOptions(**{**opts.__dict__, "extra": extra})
    with pytest.raises(PipelineError, match=message) as err:
        generate(opts)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("size", [(50, 90), (120, 40), (30, 30)], ids=["down", "tall", "up"])
def test_conditioning_image_preprocessing(size):
    """The cover-resize (antialiased bilinear), centre crop and 8-bit rounding of `_preprocess_conditioning_image`;
    float32 filter sums may round a pixel the other way at .5, one 8-bit level (2/255 in [-1, 1])."""
    from vidax.zoo.parts.conditioning_media import cosmos3_image

    pixels = np.random.default_rng(sum(size)).integers(0, 256, (*size, 3), dtype=np.uint8)
    expected = _preprocess_conditioning_image(Image.fromarray(pixels), HEIGHT, WIDTH)[0].numpy()
    ours = cosmos3_image(pixels, HEIGHT, WIDTH)
    assert ours.shape == expected.shape == (3, HEIGHT, WIDTH)
    diff = np.abs(ours - expected)
    assert diff.max() <= 2 / 255 + 1e-6 and (diff > 1e-6).mean() < 1e-3


def test_plan_offline_and_the_nano_tp4_figure(tmp_path, monkeypatch):
    """`vidax-gen cosmos3-nano --plan` from the registry alone (offline, empty cache); the job at 704x1280x93
    (the bench prints the TP=4 figure beside the paper's 29.5 GB)."""
    import huggingface_hub.constants
    from typer.testing import CliRunner
    from vidax.cli.gen import app

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("cosmos3-nano", "cosmos3-edge"):
        result = CliRunner().invoke(app, [name, "--plan", "--devices", "4", "--device-memory", "30.75"])
        assert result.exit_code == 0, result.output
        assert "GiB per device on 4 x 30.8 GiB" in result.output and "choice:" in result.output
    opts = GenerateOptions(model="cosmos3-nano", prompt="", out=tmp_path / "v.mp4")
    job = make_pipeline(opts.model, opts).memory_job(opts)
    assert job.dit.depth == 36 and job.tokens == 24 * 22 * 40 + 256 and job.text_encoder_params == 0
