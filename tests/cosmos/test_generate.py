"""`vidax-gen cosmos-predict2.5-*` end to end against diffusers' `Cosmos2_5_PredictBasePipeline`.

One tiny perturbed pipeline (reference.py) saved with `save_pretrained` is the weights folder; the
reference runs once per mode (text-, image- and video-to-world) from fixed initial latents, and vidax
generates from the same folder (and from the official layout, a converted folder and a Hub cache of it)
with the same latents, through `vidax.zoo.api.generate`.

Tolerance: frames in [0, 1] within 2e-5, both sides in fp32 at highest matmul precision; what remains is
summation order (XLA vs torch kernels, blockwise vs plain softmax) through two guided UniPC steps (guidance 7
weighs the DiT outputs 8x and 7x) and the VAE decode.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.registry import make_pipeline

from tests.oracle import hub_cached

from . import reference as ref
from .helpers import randn

FRAME_ATOL = 2e-5
MODEL = "cosmos-predict2.5-2b"
# 6 frames: the VAE encodes the first 5 (2 latent frames); the pipeline repeats the last decoded frame to give 6
ODD = dict(height=48, width=32, frames=6)
ODD_LATENT_SHAPE = (1, 16, 2, 6, 4)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos_generate")
    return ref.build(root), root


@pytest.fixture(scope="module")
def runs(saved):
    """The reference's frames per mode, from one noise `.npy` (and the image / clip it conditions on)."""
    pipe, root = saved
    noise = randn(*ref.LATENT_SHAPE, seed=11)
    np.save(root / "noise.npy", noise.numpy())
    rng = np.random.default_rng(5)
    Image.fromarray(rng.integers(0, 256, (40, 24, 3), dtype=np.uint8)).save(root / "first.png")  # resized (nearest)
    clip = rng.integers(0, 256, (7, 32, 32, 3), dtype=np.uint8)
    np.save(root / "clip.npy", clip)
    common = dict(prompt=ref.PROMPT, height=ref.HEIGHT, width=ref.WIDTH, num_frames=ref.FRAMES,
                  num_inference_steps=ref.STEPS, output_type="np")
    out = {}
    with torch.no_grad():
        out["t2v"] = pipe(latents=noise.clone(), **common).frames[0]
        out["i2v"] = pipe(image=Image.open(root / "first.png"), latents=noise.clone(), **common).frames[0]
        out["v2v"] = pipe(video=[Image.fromarray(f) for f in clip], latents=noise.clone(), **common).frames[0]
        odd = randn(*ODD_LATENT_SHAPE, seed=12)
        np.save(root / "noise_odd.npy", odd.numpy())
        out["odd"] = pipe(image=Image.open(root / "first.png"), latents=odd, prompt=ref.PROMPT, height=ODD["height"],
                          width=ODD["width"], num_frames=ODD["frames"], num_inference_steps=ref.STEPS,
                          output_type="np").frames[0]
    return out


def options(weights, root, tmp_path, **extra) -> GenerateOptions:
    family = {k: extra.pop(k) for k in ("video", "num_latent_conditional_frames", "conditional_frame_timestep",
                                        "max_sequence_length") if k in extra}
    base = dict(model=MODEL, prompt=ref.PROMPT, weights=None if weights is None else str(weights), height=ref.HEIGHT,
                width=ref.WIDTH, frames=ref.FRAMES, steps=ref.STEPS, latents=root / "noise.npy", out=tmp_path / "v.npy",
                dtype="float32", compile_cache=False)
    return GenerateOptions(**{**base, **extra}, extra=family)


@pytest.mark.parametrize("mode", ["t2v", "i2v", "v2v"])
def test_frames_match_the_pipeline(saved, runs, tmp_path, mode):
    _, root = saved
    extra = {"i2v": dict(image=root / "first.png"), "v2v": dict(video=root / "clip.npy")}.get(mode, {})
    result = generate(options(root / "diffusers", root, tmp_path, **extra))
    assert result.frames.shape == runs[mode].shape == (ref.FRAMES, ref.HEIGHT, ref.WIDTH, 3)
    np.testing.assert_allclose(result.frames, runs[mode], atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    assert sidecar["guidance"] == 7.0 and sidecar["fps"] == 16 and sidecar["negative_prompt"].startswith("The video")


def test_a_frame_count_off_the_vae_grid_matches_the_pipeline(saved, runs, tmp_path):
    """Image-to-world at 6 frames (vidax refused it: "not of the form 4k+1"): 6 frames out, as the pipeline's."""
    _, root = saved
    result = generate(options(root / "diffusers", root, tmp_path, image=root / "first.png",
                              latents=root / "noise_odd.npy", **ODD))
    assert result.frames.shape == runs["odd"].shape == (6, 48, 32, 3)
    np.testing.assert_allclose(result.frames, runs["odd"], atol=FRAME_ATOL, rtol=0)


def test_official_layout_folder(saved, runs, tmp_path, monkeypatch):
    """The official files (DiT `.pt`, `tokenizer.pth`, the Reason1 repo) of a model registered in a user's
    registry file, whose `config` tables size the VAE and scheduler the official files do not describe; then
    `vidax-convert` of that folder."""
    from vidax.translator import convert_model

    pipe, root = saved
    monkeypatch.setenv("VIDAX_MODELS", str(ref.user_registry(tmp_path / "mine.toml", pipe)))
    result = generate(options(root / "official", root, tmp_path, model="cosmos-tiny-official"))
    np.testing.assert_allclose(result.frames, runs["t2v"], atol=FRAME_ATOL, rtol=0)
    # converted from the official files: the DiT's sizes come from the converted tree (no config.json)
    out = tmp_path / "converted"
    convert_model("cosmos-tiny-official", source=str(root / "official"), out=out, dtype="float32")
    assert not (out / "transformer" / "config.json").exists()
    result = generate(options(out, root, tmp_path, model="cosmos-tiny-official"))
    np.testing.assert_allclose(result.frames, runs["t2v"], atol=FRAME_ATOL, rtol=0)


def test_converted_folder_and_layouts(saved, runs, tmp_path):
    """`vidax-convert` of the diffusers folder (its configs and tokenizer copied), then generate from it."""
    from vidax.translator import convert_model

    _, root = saved
    out = tmp_path / "converted"
    convert_model(MODEL, source=str(root / "diffusers"), out=out, dtype="float32")
    generator = make_pipeline(MODEL, options(out, root, tmp_path))
    assert generator.source.kind == "converted"
    result = generate(options(out, root, tmp_path, tp=2, sp=2, dp=2))  # and the DiT on all 8 devices
    np.testing.assert_allclose(result.frames, runs["t2v"], atol=FRAME_ATOL, rtol=0)


def test_offload_equals_one_device(saved, runs, tmp_path, monkeypatch):
    """`--offload-chunk 1`: the DiT's blocks stream from host memory one at a time; same frames."""
    from vidax.zoo.weights.offload import StreamedDiT

    chunks = []
    run_group = StreamedDiT.run_group
    monkeypatch.setattr(StreamedDiT, "run_group",
                        lambda self, name, host, *a: chunks.append(host.sizes) or run_group(self, name, host, *a))
    _, root = saved
    result = generate(options(root / "diffusers", root, tmp_path, offload_chunk=1, image=root / "first.png"))
    np.testing.assert_allclose(result.frames, runs["i2v"], atol=FRAME_ATOL, rtol=0)
    assert chunks == [(1, 1)] * ref.STEPS


def test_generate_straight_from_the_hub(saved, runs, tmp_path, monkeypatch):
    """No --weights: the registry's diffusers layout, on its branch (`revision = { diffusers = ... }`), read from
    the Hugging Face cache offline and converted on the fly."""
    from vidax.translator.registry import load_registry

    _, root = saved
    entry = load_registry()[MODEL]
    snapshot = hub_cached(monkeypatch, tmp_path / "hub", entry.repo("diffusers"), root / "diffusers", commit="1" * 40)
    ref_file = snapshot.parents[1] / "refs" / entry.revision_of("diffusers")
    ref_file.parent.mkdir(parents=True, exist_ok=True)
    ref_file.write_text("1" * 40)
    (snapshot.parents[1] / "refs" / "main").unlink()  # main holds the official layout, not this
    generator = make_pipeline(MODEL, options(None, root, tmp_path))
    assert generator.source.kind == "repo" and generator.source.revision == "diffusers/base/post-trained"
    result = generate(options(None, root, tmp_path))
    np.testing.assert_allclose(result.frames, runs["t2v"], atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("change, message", [
    (dict(height=40), "not a multiple of 16"),
    (dict(frames=0), "--frames must be positive, got 0"),
    (dict(width=-16), "--width must be positive, got -16"),
    (dict(sampler="ddim"), "unknown sampler 'ddim'"),
    (dict(shift=5.0), "no effect on the Karras sigmas"),
    (dict(num_latent_conditional_frames=3), "must be 1 or 2"),
    (dict(max_sequence_length=0), "at least 1"),
    (dict(extra={"guidance_2": 3.0}), "takes no --guidance-2"),
    (dict(frames=4 * 16 + 1), "exceed the DiT's position tables"),
    (dict(video="clip3.npy"), "needs 5"),
    (dict(video="clip3.npy", image="first.png"), "not both"),
    (dict(video="missing.mp4"), "conditioning video not found"),
    (dict(image="missing.png"), "image not found"),
])
def test_bad_requests_fail_before_any_work(saved, tmp_path, change, message, monkeypatch):
    from vidax.zoo.cosmos.family import CosmosFamily

    _, root = saved
    np.save(root / "clip3.npy", np.zeros((3, 8, 8, 3), np.uint8))
    for key in ("video", "image"):
        if key in change:
            change[key] = root / change[key]
    monkeypatch.setattr(CosmosFamily, "encode", lambda *a: pytest.fail("work started"))
    extra = change.pop("extra", None)
    opts = options(root / "diffusers", root, tmp_path, **change)
    if extra:
        opts = GenerateOptions(**{**opts.__dict__, "extra": extra})
    with pytest.raises(Exception, match=message) as err:
        generate(opts)
    assert isinstance(err.value, PipelineError) or type(err.value).__name__ == "VideoIOError"
    assert "\n" not in str(err.value)


def test_plan_offline_and_the_14b_offload_figure(tmp_path, monkeypatch):
    """`vidax-gen cosmos-predict2.5-14b --plan` from the registry alone (offline, empty cache), and the planner's
    figure for the 14B at 93 frames with its blocks streamed (the bench prints it beside the paper's)."""
    import huggingface_hub.constants
    from typer.testing import CliRunner
    from vidax.cli.gen import app
    from vidax.zoo.compute.planner import Layout, predict

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["cosmos-predict2.5-14b", "--plan", "--devices", "4", "--device-memory", "30.75"])
    assert result.exit_code == 0, result.output
    assert "GiB per device on 4 x 30.8 GiB" in result.output and "choice:" in result.output
    opts = GenerateOptions(model="cosmos-predict2.5-14b", prompt="", out=tmp_path / "v.mp4")
    job = make_pipeline(opts.model, opts).memory_job(opts)
    assert job.dit.depth == 36 and job.tokens == 24 * 44 * 80 and job.text_tokens == 512
    resident, streamed = predict(job, Layout()), predict(job, Layout(offload_chunk=1))
    assert streamed.weights < 0.1 * resident.weights  # two 1-block chunks on device instead of 36 blocks
