"""Wan VACE end to end against diffusers' `WanVACEPipeline`, and `--extend` against the pipeline called by hand.

A tiny perturbed VACE pipeline (the tiny Wan pipelines' UMT5, VAE, tokenizer and UniPC flow scheduler,
`tests/tiny_references.py`; their DiT sizes with two VACE layers) is saved with `save_pretrained`; vidax
generates from that folder through the real specs with the same prompt, initial latents (`--latents`, the
reference slots included) and steps. Cases: a control video (a folder of PNG frames), an inpainting mask (a
`.npy` clip), outpainting (the frame padded, the border white in the mask), a reference image alone, two
reference images with a control video (an MP4), and the conditioning scale as one value and one per layer.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import diffusers
import torch
import transformers

from tests.oracle import perturb
from tests.tiny_references import WAN_PIPELINE_DIT, umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.api import generate
from vidax.zoo.video_io import read_video, write_mp4
from vidax.zoo.wan.tiny import build_tokenizer
from vidax.zoo.wan.vace_family import WanVACEFamily

PROMPT = "a red kite over a grey sea"
NEGATIVE = "blurry, low quality"
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 32, 48, 5, 2, 4.0
MODEL = "wan2.1-vace-1.3b"
# Frames in [0, 1] after 2 UniPC steps with CFG, a 2-block DiT plus 2 VACE blocks and VAE encodes and a
# decode, fp32 at highest matmul precision on both sides: what remains is summation-order rounding
# (~1e-6). The bound; a wrong mask, reference order or scale moves frames by > 1e-2.
FRAME_ATOL = 2e-5


def _reference(folder: Path):
    torch.manual_seed(7)
    build_tokenizer(folder.parent / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder.parent / "tokenizer_source")
    transformer = diffusers.WanVACETransformer3DModel(**WAN_PIPELINE_DIT, vace_layers=[0, 1], vace_in_channels=96)
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), transformer=transformer.eval(), vae=wan_pipeline_vae())
    for seed, module in enumerate(parts.values()):
        perturb(module, 70 + seed)
    pipe = diffusers.WanVACEPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), **parts)
    pipe.save_pretrained(folder)
    return pipe


def _clip(seed: int, frames: int = FRAMES, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """A smooth moving pattern with noise (uint8 `[F, H, W, 3]`): the VAE sees structure, not only noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = [127 + 100 * np.sin((x + 3 * t) / 5.0 + c) * np.cos(y / 7.0 - c) for t in range(frames) for c in range(3)]
    video = np.stack(base).reshape(frames, 3, height, width).transpose(0, 2, 3, 1)
    return np.clip(video + rng.normal(0, 12, video.shape), 0, 255).astype(np.uint8)


def _pil(frames: np.ndarray) -> list:
    from PIL import Image

    return [Image.fromarray(f) for f in frames]


def _save_folder(frames: np.ndarray, folder: Path) -> Path:
    from PIL import Image

    folder.mkdir(parents=True)
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(folder / f"frame_{i:03d}.png")
    return folder


def _box_mask(inner: bool) -> np.ndarray:
    """White (generate) inside a centre box (`inner`), or on the border around it (outpainting)."""
    mask = np.zeros((FRAMES, HEIGHT, WIDTH, 3), np.uint8)
    inside = (slice(None), slice(8, 24), slice(12, 36))
    if inner:
        mask[inside] = 255
    else:
        mask[:] = 255
        mask[inside] = 0
    return mask


def _latents(folder: Path, name: str, references: int, seed: int) -> Path:
    latents = torch.randn((1, 16, (FRAMES - 1) // 4 + 1 + references, HEIGHT // 8, WIDTH // 8),
                          generator=torch.Generator().manual_seed(seed))
    np.save(folder / f"{name}.npy", latents.numpy())
    return folder / f"{name}.npy"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(folder, pipe, inputs): the saved pipeline and the conditioning files every case reads."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("wan_vace")
    pipe = _reference(folder / "model")
    clip = _clip(0)
    outpaint = np.full_like(clip, 0)  # the frame padded: its centre box kept, the border to generate
    outpaint[:, 8:24, 12:36] = clip[:, 8:24, 12:36]
    np.save(folder / "inpaint_mask.npy", _box_mask(inner=True))
    np.save(folder / "outpaint_mask.npy", _box_mask(inner=False))
    np.save(folder / "outpaint.npy", outpaint)
    write_mp4(folder / "control.mp4", _clip(1), fps=16)
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(folder / "ref_tall.png")
    Image.fromarray(_clip(3, frames=1, height=20, width=60)[0]).save(folder / "ref_wide.png")
    inputs = {"video": _save_folder(clip, folder / "control_frames"), "inpaint_mask": folder / "inpaint_mask.npy",
              "outpaint": folder / "outpaint.npy", "outpaint_mask": folder / "outpaint_mask.npy",
              "control_mp4": folder / "control.mp4", "ref_tall": folder / "ref_tall.png",
              "ref_wide": folder / "ref_wide.png"}
    return folder, pipe, inputs


def _frames_of(path: Path) -> np.ndarray:
    if path.is_dir():
        from PIL import Image

        return np.stack([np.asarray(Image.open(p).convert("RGB")) for p in sorted(path.iterdir())])
    return np.load(path) if path.suffix == ".npy" else read_video(path)


# name -> (flags, the pipeline's keyword arguments built from the same files, reference images)
CASES = {
    "control video": (dict(video="video"), dict(video="video"), ()),
    "control video at 0.5": (dict(video="video", conditioning_scale="0.5"), dict(video="video", scale=0.5), ()),
    "inpainting, a scale per layer": (dict(video="video", mask="inpaint_mask", conditioning_scale="1.5,-0.25"),
                                      dict(video="video", mask="inpaint_mask", scale=[1.5, -0.25]), ()),
    "outpainting": (dict(video="outpaint", mask="outpaint_mask"), dict(video="outpaint", mask="outpaint_mask"), ()),
    "reference image": ({}, {}, ("ref_tall",)),
    "references and a control video": (dict(video="control_mp4"), dict(video="control_mp4"), ("ref_tall", "ref_wide")),
}


def _diffusers_run(pipe, inputs: dict, call: dict, refs: tuple, latents: Path) -> np.ndarray:
    from PIL import Image

    kwargs = {}
    if "video" in call:
        kwargs["video"] = _pil(_frames_of(inputs[call["video"]]))
    if "mask" in call:
        kwargs["mask"] = _pil(_frames_of(inputs[call["mask"]]))
    if refs:
        kwargs["reference_images"] = [Image.open(inputs[r]).convert("RGB") for r in refs]
    with torch.no_grad():
        return pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                    num_inference_steps=STEPS, guidance_scale=GUIDANCE, conditioning_scale=call.get("scale", 1.0),
                    latents=torch.from_numpy(np.load(latents)), output_type="np", **kwargs).frames[0]


def _options(folder: Path, out: Path, latents: Path | None, **extra) -> GenerateOptions:
    base = dict(model=MODEL, prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder / "model"), height=HEIGHT,
                width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=latents, out=out,
                dtype="float32", compile_cache=False)
    fields = {f.name for f in dataclasses.fields(GenerateOptions)}
    own = {k: extra.pop(k) for k in list(extra) if k not in fields}  # the family's flags
    return GenerateOptions(**{**base, **extra}, extra=own)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_diffusers(reference, tmp_path, name):
    folder, pipe, inputs = reference
    flags, call, refs = CASES[name]
    latents = _latents(tmp_path, "latents", len(refs), seed=len(name))
    expected = _diffusers_run(pipe, inputs, call, refs, latents)
    extra = {k: (inputs[v] if k in ("video", "mask") else v) for k, v in flags.items()}
    if refs:
        extra["reference_images"] = tuple(inputs[r] for r in refs)
    result = generate(_options(folder, tmp_path / "v.npy", latents, **extra))
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "v.json").read_text())
    assert sidecar["latent_shape"] == [1, 16, 2 + len(refs), HEIGHT // 8, WIDTH // 8]


def test_the_control_changes_the_video(reference, tmp_path):
    """The conditioning reaches the frames: scale 0 on every layer is not the control video's output."""
    folder, _, inputs = reference
    latents = _latents(tmp_path, "latents", 0, seed=1)
    runs = [generate(_options(folder, tmp_path / f"{s}.npy", latents, video=inputs["video"], conditioning_scale=s))
            for s in ("0", "1")]
    assert np.abs(runs[0].frames - runs[1].frames).max() > 1e-2


# --- extension -----------------------------------------------------------------------------------------------


def test_extend_equals_the_pipeline_with_the_mask_built_by_hand(reference, tmp_path):
    """`--extend CLIP --extend-overlap 2 --frames 5`: the pipeline on the clip's last 2 frames then 3 grey ones,
    under a mask black on those 2 and white after; the output is the clip, the 2 overlapping frames crossfaded
    into the generated ones, then the 3 new frames. The size comes from the clip."""
    folder, pipe, _ = reference
    clip = _clip(5, frames=7)
    write_dir = _save_folder(clip, tmp_path / "clip")
    latents = _latents(tmp_path, "latents", 0, seed=9)
    grey = np.full((3, HEIGHT, WIDTH, 3), 128, np.uint8)
    video = np.concatenate([clip[-2:], grey])
    mask = np.concatenate([np.zeros((2, HEIGHT, WIDTH, 3), np.uint8), np.full((3, HEIGHT, WIDTH, 3), 255, np.uint8)])
    with torch.no_grad():
        by_hand = pipe(PROMPT, negative_prompt=NEGATIVE, video=_pil(video), mask=_pil(mask), height=HEIGHT, width=WIDTH,
                       num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                       latents=torch.from_numpy(np.load(latents)), output_type="np").frames[0]
    options = dataclasses.replace(_options(folder, tmp_path / "long.npy", latents, extend=write_dir, extend_overlap=2),
                                  height=None, width=None)
    result = generate(options)  # no --height/--width: the clip's size
    assert result.frames.shape == (7 - 2 + FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_array_equal(result.frames[:5], clip[:5].astype(np.float32) / np.float32(255))
    weight = np.array([1 / 3, 2 / 3], np.float32)[:, None, None, None]
    overlap = (1 - weight) * clip[5:].astype(np.float32) / 255 + weight * by_hand[:2]
    np.testing.assert_allclose(result.frames[5:7], overlap, atol=FRAME_ATOL, rtol=0)
    np.testing.assert_allclose(result.frames[7:], by_hand[2:], atol=FRAME_ATOL, rtol=0)


# --- requests refused before any work ----------------------------------------------------------------------


def test_bad_requests_are_one_line_errors(reference, tmp_path):
    folder, _, inputs = reference
    bad = {
        "--mask needs --video": dict(mask=inputs["inpaint_mask"]),
        "--video has 5 frames; --frames is 9": dict(video=inputs["video"], frames=9),
        "3 values; this model has 2 VACE layers": dict(video=inputs["video"], conditioning_scale="1,2,3"),
        "without --video and --mask": dict(extend=inputs["video"], video=inputs["video"]),
        "--extend-overlap must be from 1 to": dict(extend=inputs["video"], extend_overlap=5),
        "sized 48x32 as WanVACEPipeline sizes it": dict(video=inputs["video"], height=64, width=96),
        "no PNG or JPEG frames": dict(video=tmp_path),
    }
    for message, extra in bad.items():
        with pytest.raises(PipelineError, match=message):
            generate(_options(folder, tmp_path / "x.npy", None, **extra))
    with pytest.raises(PipelineError, match=r"takes no --video \(the VACE models do"):
        generate(GenerateOptions(model="wan-tiny", prompt=PROMPT, out=tmp_path / "y.npy",
                                 extra={"video": inputs["video"]}))
    assert not (tmp_path / "x.npy").exists()


def test_vace_models_get_the_vace_family():
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model=MODEL, prompt=PROMPT)
    assert isinstance(make_pipeline(MODEL, options), WanVACEFamily)
    assert not isinstance(make_pipeline("wan2.1-t2v-1.3b", options), WanVACEFamily)


# --- the shared runtime: mesh layouts, offload, plan, dry run ----------------------------------------------


@pytest.mark.parametrize("layout", [dict(dp=2, sp=2), dict(tp=2, offload_chunk=1)])
def test_sharded_and_offloaded_runs_match_diffusers(reference, tmp_path, layout):
    """The inpainting case on 4 fake devices (CFG branches on data, tokens split) and tensor parallel with the
    blocks of both groups streamed one at a time."""
    folder, pipe, inputs = reference
    flags, call, refs = CASES["inpainting, a scale per layer"]
    latents = _latents(tmp_path, "latents", 0, seed=3)
    expected = _diffusers_run(pipe, inputs, call, refs, latents)
    extra = {k: (inputs[v] if k in ("video", "mask") else v) for k, v in flags.items()}
    result = generate(_options(folder, tmp_path / "v.npy", latents, **extra, **layout))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_plan_and_dry_run():
    """`--plan` from the registry's configs alone; the dry run compiles a shallow VACE DiT step on a 2 x 2 mesh
    (both block groups, the control latents and a scale per layer in the abstract condition)."""
    from vidax.zoo.plan.dry_run import dry_run
    from vidax.zoo.plan.layouts import plan_layouts
    from vidax.zoo.compute.planner import Layout
    from vidax.zoo.registry import make_pipeline

    for model in (MODEL, "wan2.1-vace-14b", "wan2.2-vace-fun-a14b"):
        options = GenerateOptions(model=model, prompt="", tp=2, sp=2)
        planned = plan_layouts(make_pipeline(model, options), options, devices=4, device_bytes=80 << 30)
        assert planned.chosen is not None and planned.rows[0][1].weights > 0
    options = GenerateOptions(model=MODEL, prompt="", height=64, width=64, frames=5,
                              extra={"reference_images": (Path("unused.png"),)})
    family = make_pipeline(MODEL, options)
    s = family.resolve_settings(options)
    assert family.latent_shape(s) == (1, 16, 3, 8, 8)  # one reference slot in front of the 2 latent frames
    report = dry_run(family, options, Layout(1, 2, 2), 4, 30 << 30, depth=3, stages=("dit",))
    (stage,) = report.stages
    assert stage.stage == "dit step" and stage.argument > 0 and stage.temp > 0


def test_step_caches_are_refused_before_any_work(reference, tmp_path):
    folder, _, inputs = reference
    with pytest.raises(PipelineError, match="--cache is not supported for wan2.1-vace-1.3b"):
        generate(_options(folder, tmp_path / "x.npy", None, video=inputs["video"], cache="first-block"))
