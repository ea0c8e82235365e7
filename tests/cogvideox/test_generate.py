"""`vidax-gen cogvideox1.5-5b` end to end against diffusers `CogVideoXPipeline` (saved with `save_pretrained`).

A tiny perturbed CogVideoX 1.5 pipeline (patch_size_t 2, 3D RoPE, T5, tokenizer, VAE, CogVideoXDPMScheduler)
runs once: 9 frames at 32x48 (3 latent frames padded to 4, the first dropped before decoding), 3 DPM steps
(the middle one second order) with dynamic CFG and a negative prompt, the VAE tiled (one tile). vidax
generates from the same folder, a `vidax-convert` output and a Hugging Face cache, on one device, under
tp x sp x dp on the 8 fake CPU devices and with streamed blocks; the frames must agree within 2e-5.
The reference's DPM noise reaches vidax by patching `host_noise` (tests only; see `pipelines.py`).
"""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
import torch
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate
from vidax.zoo.registry import make_pipeline

from tests.oracle import hub_cached

from . import pipelines as tiny
from .pipelines import FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, STEPS, WIDTH

MODEL = "cogvideox1.5-5b"
# fp32 on both sides at highest matmul precision; summation order differs (XLA vs torch, blockwise vs
# plain softmax, sharded reductions); observed max |diff| ~2e-6 on frames in [0, 1]
ATOL = 2e-5
LATENTS = (1, 4, 4, HEIGHT // 8, WIDTH // 8)  # reference layout [B, F', C, H', W']: 9 frames -> 3 latents + 1 pad
ODD_FRAMES = 13  # off the 8k+1 grid: an even count of decoded latents


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(folder, latents .npy in vidax's layout, DPM step noise, diffusers' frames) of one tiny 1.5 run."""
    folder = tmp_path_factory.mktemp("cogvideox15") / "model"
    ref = tiny.pipeline(folder, "15", scheduler="dpm")
    ref.vae.enable_tiling()  # as cli_demo runs it
    latents = torch.randn(LATENTS, generator=torch.Generator().manual_seed(7))
    np.save(folder.parent / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    _, noise = tiny.reference_draws(0, STEPS, LATENTS)
    common = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS,
                  guidance_scale=GUIDANCE, use_dynamic_cfg=True, output_type="np")
    with torch.no_grad():
        frames = ref(num_frames=FRAMES, latents=latents, generator=torch.Generator().manual_seed(0), **common).frames[0]
        # 13 frames: 4 latent frames, none padded or dropped (the same latent shape and step noise as 9 frames),
        # all 4 decoded: 16 frames
        odd = ref(num_frames=ODD_FRAMES, latents=latents, generator=torch.Generator().manual_seed(0), **common).frames[0]
    np.save(folder.parent / "odd.npy", odd)
    return folder, folder.parent / "latents.npy", noise, frames


def options(reference, tmp_path, **change) -> GenerateOptions:
    folder, latents, _, _ = reference
    base = dict(model=MODEL, prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder), height=HEIGHT, width=WIDTH,
                frames=FRAMES, steps=STEPS, guidance=GUIDANCE, latents=latents, out=tmp_path / "out.npy",
                dtype="float32", compile_cache=False)
    return GenerateOptions(**{**base, **change})


@pytest.fixture
def reference_noise(reference, monkeypatch):
    tiny.patch_host_noise(monkeypatch, None, reference[2])


def test_generate_matches_reference(reference, reference_noise, tmp_path):
    *_, expected = reference
    result = generate(options(reference, tmp_path, save_latents=True))
    assert result.frames.shape == expected.shape == (FRAMES, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)
    sidecar = json.loads((tmp_path / "out.json").read_text())
    # the folder's scheduler (DPM) and the registry's native settings for what the request left out
    assert sidecar["sampler"] == "dpm" and sidecar["dynamic_cfg"] is True and sidecar["vae_tiling"] is True
    assert sidecar["fps"] == 16 and sidecar["max_sequence_length"] == 226
    assert np.load(tmp_path / "out.latents.npy").shape == (1, 4, 4, HEIGHT // 8, WIDTH // 8)  # padded F'


def test_a_frame_count_that_decodes_an_even_latent_count_matches_reference(reference, reference_noise, tmp_path):
    """--frames 13 (vidax refused it: "not of the form 8k+1"): the pipeline decodes 4 latent frames into 16."""
    expected = np.load(reference[1].parent / "odd.npy")
    result = generate(options(reference, tmp_path, frames=ODD_FRAMES))
    assert result.frames.shape == expected.shape == (16, HEIGHT, WIDTH, 3)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)


def test_a_size_the_reference_fails_on_is_refused(reference, tmp_path):
    """40x48 passes the pipeline's check (multiples of 8) but not its 1.5 DiT's patchify (latents 5 x 6 in 2x2
    patches): vidax refuses it first (multiples of 16)."""
    from diffusers import CogVideoXPipeline
    from vidax.zoo.errors import PipelineError

    pipe = CogVideoXPipeline.from_pretrained(reference[0])
    with pytest.raises(RuntimeError, match="is invalid for input of size"), torch.no_grad():
        pipe(prompt=PROMPT, height=40, width=WIDTH, num_frames=FRAMES, num_inference_steps=1, output_type="np")
    with pytest.raises(PipelineError, match="--height 40 is not a multiple of 16"):
        generate(options(reference, tmp_path, height=40))


@pytest.mark.parametrize("layout", [dict(tp=2, sp=2, dp=2), dict(offload_chunk=1, sp=2)], ids=["tp2_sp2_dp2", "offload_sp2"])
def test_mesh_and_offload_match_reference(reference, reference_noise, tmp_path, layout):
    """tp and sp compose on one mesh (the heads split over tp x sp, the 226 text tokens replicated, only the
    video q/k/v through the all-to-all), CFG branches on "data"; and blocks streamed one at a time."""
    *_, expected = reference
    result = generate(options(reference, tmp_path, **layout))
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)


def test_from_a_converted_folder(reference, reference_noise, tmp_path):
    """`vidax-convert cogvideox1.5-5b --source FOLDER --out DIR` then `--weights DIR`: weights mapped from DIR,
    configs, scheduler and tokenizer from the files it copied."""
    from vidax.translator import load
    from vidax.translator.models import ConvertOptions, convert_model

    folder, *_, expected = reference
    shipped = tmp_path / "shipped"  # the default dtypes: T5 fp32 (the registry's), the DiT bf16 (its spec's)
    convert_model(ConvertOptions(MODEL, source=str(folder), out=shipped, components=("text_encoder", "transformer")))
    assert load(shipped / "text_encoder")["encoder/block/layer_0/SelfAttention/q/kernel"].dtype == np.float32
    assert load(shipped / "transformer")["blocks/attn1/to_q/kernel"].dtype.name == "bfloat16"
    out = tmp_path / "converted"
    convert_model(ConvertOptions(MODEL, source=str(folder), out=out, dtype="float32"))
    assert (out / "tokenizer" / "tokenizer_config.json").is_file() and (out / "scheduler" / "scheduler_config.json").is_file()
    result = generate(options(reference, tmp_path, weights=str(out)))
    assert result.settings["weights_source"] == str(out)
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)


def test_straight_from_the_hub(reference, reference_noise, tmp_path, monkeypatch):
    """No --weights: the registry's diffusers repo from the Hugging Face cache (offline), converted on the fly."""
    folder, *_, expected = reference
    hub_cached(monkeypatch, tmp_path / "hub", "zai-org/CogVideoX1.5-5B", folder)
    generator = make_pipeline(MODEL, options(reference, tmp_path, weights=None))
    assert generator.source.kind == "repo"
    result = generate(options(reference, tmp_path, weights=None))
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)


def test_seeded_runs_draw_their_own_noise(reference, tmp_path):
    """Without --latents or patched noise: the seed names the initial noise (`--latents` of the same values gives
    the same video: the DPM step noise comes from the seed too, on the host); another seed, another video."""
    from vidax.zoo.generator.options import seeded_noise

    base = dict(latents=None, seed=3)
    one = generate(options(reference, tmp_path, **base))
    np.save(tmp_path / "seed3.npy", seeded_noise(3, (1, 4, 4, HEIGHT // 8, WIDTH // 8)))
    again = generate(options(reference, tmp_path, **{**base, "latents": tmp_path / "seed3.npy"}))
    np.testing.assert_allclose(again.frames, one.frames, atol=ATOL, rtol=0)  # same step noise from the seed
    other = generate(options(reference, tmp_path, **{**base, "seed": 4}))
    assert np.abs(other.frames - one.frames).max() > 1e-3


@pytest.mark.parametrize("change, message", [
    (dict(frames=0), "--frames must be positive, got 0"),
    (dict(height=40), "--height 40 is not a multiple of 16 for this model; nearest valid: 32"),
    (dict(sampler="unipc"), r"unknown sampler 'unipc'.*ddim, dpm"),
    (dict(shift=3.0), "takes no --shift"),
    (dict(extra={"guidance_2": 3.0}), "takes no --guidance-2"),
    (dict(image="first.png"), "text-to-video only"),
    (dict(tp=3), "cannot be split over tp=3"),
    (dict(height=2416), "exceeds the RoPE grid"),
    (dict(extra={"max_sequence_length": 0}), "at least 1"),
])
def test_bad_requests_fail_before_work(reference, tmp_path, change, message, monkeypatch):
    """One line (a VidaxError: PipelineError, MeshError) before any stage runs."""
    from vidax.translator import VidaxError
    from vidax.zoo.cogvideox.family import CogVideoXFamily

    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(CogVideoXFamily, "encode", no_work)
    with pytest.raises(VidaxError, match=message) as raised:
        generate(options(reference, tmp_path, **change))
    assert "\n" not in str(raised.value)


def test_sampler_and_dynamic_cfg_flags(reference, tmp_path):
    """--sampler ddim swaps the class (trailing spacing, as cli_demo); dynamic CFG follows the sampler unless
    --dynamic-cfg/--no-dynamic-cfg says otherwise; the per-step scale is the reference's formula of t."""
    from vidax.zoo.cogvideox.latents import dynamic_guidance

    family = make_pipeline(MODEL, options(reference, tmp_path))
    s = family.resolve_settings(options(reference, tmp_path))
    assert (s.sampler, s.dynamic_cfg) == ("dpm", True)
    ddim = family.resolve_settings(options(reference, tmp_path, sampler="ddim"))
    assert (ddim.sampler, ddim.dynamic_cfg) == ("ddim", False)
    assert type(family.stepper(ddim, family.latent_shape(ddim))).__name__ == "DDIM"
    forced = family.resolve_settings(options(reference, tmp_path, sampler="ddim", extra={"dynamic_cfg": True}))
    assert forced.dynamic_cfg is True
    at_666 = types.SimpleNamespace(timesteps=[999.0, 666.0])  # step 1 of a schedule at timestep 666
    assert float(family.step_knobs(s, at_666, 1, 0)["scale"]) == pytest.approx(dynamic_guidance(GUIDANCE, 666.0, STEPS))
    assert float(family.step_knobs(ddim, at_666, 1, 0)["scale"]) == GUIDANCE


def test_cli_flags_and_plan(reference, tmp_path, monkeypatch):
    """The family's flags on the command line; `--plan` reads the folder's configs (no weights)."""
    from typer.testing import CliRunner
    from vidax.cli.gen import app, family_options

    assert family_options(MODEL, ["--no-dynamic-cfg", "--no-vae-tiling", "--max-sequence-length", "64"]) == (
        {"dynamic_cfg": False, "vae_tiling": False, "max_sequence_length": 64}, {})
    folder, *_ = reference
    result = CliRunner().invoke(app, [MODEL, "--weights", str(folder), "--plan", "--devices", "4", "--device-memory",
                                      "30.75", "--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)])
    assert result.exit_code == 0, result.output
    assert "choice: dp=" in result.output
    family = make_pipeline(MODEL, options(reference, tmp_path))
    job = family.memory_job(options(reference, tmp_path))
    assert job.tokens == 2 * 2 * 3 + 226 and job.batch == 2 and job.dit.depth == 2  # joint video + text sequence


def test_plan_offline_from_the_registry(tmp_path, monkeypatch):
    """`vidax-gen cogvideox1.5-5b --plan` with an empty cache and the Hub offline: the registry's config tables."""
    from typer.testing import CliRunner
    from vidax.cli.gen import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty"))
    for name in ("cogvideox-2b", "cogvideox-5b-i2v", MODEL, "cogvideox1.5-5b-i2v"):
        result = CliRunner().invoke(app, [name, "--plan", "--devices", "4", "--device-memory", "30.75"])
        assert result.exit_code == 0, f"{name}: {result.output}"
        # CogVideoX-2B's 30 heads do not split 4 ways (Ulysses): the planner offers sp=4 to the 48-head models only
        assert ("dp=1 tp=1 sp=4 resident" in result.output) == (name != "cogvideox-2b"), f"{name}: {result.output}"
        assert "choice: dp=" in result.output


def test_settings_record_every_knob(reference, tmp_path):
    family = make_pipeline(MODEL, options(reference, tmp_path))
    s = family.resolve_settings(options(reference, tmp_path, extra={"vae_tiling": False, "dynamic_cfg": False}))
    fields = {f.name for f in dataclasses.fields(s)}
    assert {"dynamic_cfg", "vae_tiling", "max_sequence_length"} <= fields
    assert (s.vae_tiling, s.dynamic_cfg) == (False, False)


def _toml(table: dict) -> str:
    """A flat TOML table body (config.json entries: scalars and lists; nulls left out)."""
    lines = []
    for key, value in table.items():
        if value is None or key.startswith("_"):
            continue
        lines.append(f"{key} = {json.dumps(value)}")  # JSON scalars and lists of them are TOML too
    return "\n".join(lines)


def test_from_a_sat_folder(reference, reference_noise, tmp_path, monkeypatch):
    """The authors' SAT layout (zai-org/CogVideoX1.5-5B-SAT: transformer_t2v/<iteration>/mp_rank_00_model_states.pt,
    vae/3d-vae.pt, t5-v1_1-xxl/ holding T5 and its tokenizer; no configs, no scheduler) as a local folder. SAT
    ships no config.json, so the registry's `config` tables describe the weights: a variant of our own (a TOML
    file of the user's, VIDAX_MODELS) describes the tiny ones, with the released repo's components and layout."""
    import shutil

    from safetensors.torch import load_file

    from . import cogvideox_spec_fixtures as fx

    folder, *_, expected = reference
    sat = tmp_path / "sat"
    fx.save_sat(load_file(folder / "transformer" / "diffusion_pytorch_model.safetensors"), sat, "t2v")
    fx.save_sat_vae(load_file(folder / "vae" / "diffusion_pytorch_model.safetensors"), sat)
    (sat / "t5-v1_1-xxl").mkdir()
    for path in [*(folder / "text_encoder").iterdir(), *(folder / "tokenizer").iterdir()]:
        shutil.copy(path, sat / "t5-v1_1-xxl" / path.name)
    configs = {name: json.loads((folder / name / file).read_text())
               for name, file in (("transformer", "config.json"), ("vae", "config.json"),
                                  ("scheduler", "scheduler_config.json"))}
    name = "cogvideox1.5-tiny-sat"
    (tmp_path / "mine.toml").write_text(f"""
[models."{name}"]
family = "cogvideox"
description = "a tiny CogVideoX1.5 in the SAT layout"
repos = {{ sat = "example/tiny-sat" }}
default_layout = "sat"
variants = ["t2v"]
components.transformer = {{ spec = "cogvideox/transformer15", subfolder = "transformer_t2v" }}
components.vae = {{ spec = "cogvideox/vae", subfolder = "vae" }}
components.text_encoder = {{ spec = "encoders/t5", subfolder = "t5-v1_1-xxl", dtype = "float32" }}
components.tokenizer = {{ subfolder = "t5-v1_1-xxl", copy = "tokenizer*" }}
settings = {{ height = {HEIGHT}, width = {WIDTH}, frames = {FRAMES}, steps = {STEPS}, guidance = {GUIDANCE}, fps = 16, sampler = "dpm" }}

[models."{name}".config.transformer]
{_toml(configs["transformer"])}

[models."{name}".config.vae]
{_toml(configs["vae"])}

[models."{name}".config.scheduler]
{_toml(configs["scheduler"])}
""")
    monkeypatch.setenv("VIDAX_MODELS", str(tmp_path / "mine.toml"))
    result = generate(options(reference, tmp_path, model=name, weights=str(sat), height=None, width=None, frames=None,
                              steps=None, guidance=None))
    assert result.settings["sampler"] == "dpm" and result.settings["dynamic_cfg"] is True  # the registry's
    np.testing.assert_allclose(result.frames, expected, atol=ATOL, rtol=0)


def test_cli_generates(reference, reference_noise, tmp_path):
    """`vidax-gen cogvideox1.5-5b ... --no-vae-tiling --dynamic-cfg` (the family's flags) writes the frames
    and the sidecar; one tile or none decodes the same frames."""
    from typer.testing import CliRunner
    from vidax.cli.gen import app

    folder, latents, _, expected = reference
    out = tmp_path / "video.npy"
    args = [MODEL, "--prompt", PROMPT, "--negative-prompt", NEGATIVE, "--weights", str(folder), "--height", str(HEIGHT),
            "--width", str(WIDTH), "--frames", str(FRAMES), "--steps", str(STEPS), "--guidance", str(GUIDANCE),
            "--latents", str(latents), "--dtype", "float32", "--out", str(out), "--no-compile-cache",
            "--no-vae-tiling", "--dynamic-cfg", "--sampler", "dpm"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(out), expected, atol=ATOL, rtol=0)
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["vae_tiling"] is False and sidecar["dynamic_cfg"] is True
