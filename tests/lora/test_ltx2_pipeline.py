"""`vidax-gen ltx-2 --lora` end to end against diffusers' `LTX2Pipeline` with `load_lora_weights` + `set_adapters`.

The tiny LTX-2.0 pipeline of tests/ltx2 saved with `save_pretrained`; two LoRAs at once, each of video and
audio modules (self/cross attention, a2v/v2a attention, both feed-forwards, the renamed top-level linears): a
PEFT one (diffusers names, alpha in its metadata) at 0.8 and an original one (`diffusion_model.` + ltx_core
names, lora_A/B) at -0.5. Frames and waveform within 2e-5 at fp32, from the same initial noise; the LoRAs must
change both far more than that. The same LoRAs baked by `vidax-convert --lora` give the same run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.lora.formats import low_rank_factors, write_peft
from tests.lora.ltx2_formats import ltx2_modules, write_ltx2_original
from tests.ltx2.references.pipelines import FPS, GUIDANCE, NEGATIVE, PROMPT, SIZE, components, initial_noise
from tests.oracle import state_of, to_np
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

ATOL = 2e-5
STEPS = 2
STRENGTHS = {"peft": 0.8, "original": -0.5}


@pytest.fixture(scope="module")
def ltx2_lora(tmp_path_factory):
    """(folder, noise files, LoRA files, (frames, waveform) with the LoRAs, (frames, waveform) without)."""
    from diffusers import LTX2Pipeline

    root = tmp_path_factory.mktemp("ltx2_lora_pipeline")
    pipe = LTX2Pipeline(**components(root))
    pipe.save_pretrained(root / "model")
    state = state_of(pipe.transformer)
    modules = ltx2_modules(state)
    files = {"peft": write_peft(root / "peft.safetensors", low_rank_factors(state, modules, 4, 71, std=0.15), alpha=6.0),
             "original": write_ltx2_original(root / "original.safetensors",
                                             low_rank_factors(state, modules[::2], 2, 72, std=0.15))}
    video, audio = initial_noise(pipe, 0, **SIZE)
    np.save(root / "noise.npy", video)
    np.save(root / "audio_noise.npy", audio)

    def run():
        out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=SIZE["frames"], height=SIZE["height"],
                   width=SIZE["width"], frame_rate=FPS, num_inference_steps=STEPS,
                   generator=torch.Generator().manual_seed(0), output_type="np", **GUIDANCE)
        return out.frames[0], to_np(out.audio[0])

    with torch.no_grad():
        plain = run()
        for name, path in files.items():
            pipe.load_lora_weights(str(path), adapter_name=name)
        pipe.set_adapters(list(STRENGTHS), list(STRENGTHS.values()))
        expected = run()
    return root, files, expected, plain


def _options(root, weights, out, **extra) -> GenerateOptions:
    return GenerateOptions(model="ltx-2", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(weights), steps=STEPS,
                           fps=FPS, latents=root / "noise.npy", out=out, compile_cache=False, dtype="float32",
                           extra={"stg_blocks": "1", "audio_latents": root / "audio_noise.npy"}, **SIZE, **extra)


def _check(result, expected, plain) -> None:
    for ours, theirs, without in zip((result.frames, result.audio), expected, plain):
        assert np.abs(theirs - without).max() > 50 * ATOL  # the LoRAs change frames and soundtrack
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, atol=ATOL, rtol=0)


def test_two_ltx2_loras_match_diffusers(ltx2_lora, tmp_path):
    root, files, expected, plain = ltx2_lora
    lora = tuple(f"{files[name]}={strength}" for name, strength in STRENGTHS.items())
    result = generate(_options(root, root / "model", tmp_path / "v.npy", lora=lora))
    _check(result, expected, plain)
    recorded = json.loads((tmp_path / "v.json").read_text())["loras"]["transformer"]
    assert [(r["file"], r["strength"]) for r in recorded] == [("peft.safetensors", 0.8), ("original.safetensors", -0.5)]


def test_vidax_convert_bakes_ltx2_loras_in(ltx2_lora, tmp_path):
    from vidax.cli.convert import app as convert_app

    root, files, expected, plain = ltx2_lora
    out = tmp_path / "baked"
    args = ["ltx-2", "--source", str(root / "model"), "--out", str(out), "--dtype", "float32",
            *[arg for name, s in STRENGTHS.items() for arg in ("--lora", f"{files[name]}={s}")]]
    done = CliRunner().invoke(convert_app, args)
    assert done.exit_code == 0, done.output
    record = json.loads((out / "vidax_model.json").read_text())
    assert [r["strength"] for r in record["loras"]["transformer"]] == [0.8, -0.5]
    _check(generate(_options(root, out, tmp_path / "b.npy")), expected, plain)
