"""`vidax-gen --lora` end to end on CogVideoX, LTX-Video and Cosmos-Predict2.5 against diffusers' pipelines.

Each family's tiny perturbed pipeline (tests/cogvideox, tests/ltx_video, tests/cosmos) saved with
`save_pretrained`, one PEFT LoRA of its DiT's attention, feed-forward and modulation linears; the reference
runs once per family with `load_lora_weights` + `set_adapters` from the same initial latents as vidax. Frames
within 2e-5 at fp32 (the families' own tolerance without LoRAs), and the LoRA must change the video far more
than that, so the test could fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.lora.formats import low_rank_factors
from tests.oracle import state_of
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

FRAME_ATOL = 2e-5
BLOCK = ("attn1.to_q", "attn1.to_v", "attn1.to_out.0", "attn2.to_k", "ff.net.0.proj", "ff.net.2")


def _peft_lora(path, model, extra: tuple[str, ...], seed: int):
    """A PEFT LoRA (`transformer.<module>.lora_A/B.weight`) of every block's BLOCK linears present, plus `extra`."""
    state = state_of(model)
    modules = [k[: -len(".weight")] for k in state if k.endswith(".weight") and k.startswith("transformer_blocks.")
               and k[: -len(".weight")].split(".", 2)[2] in BLOCK] + list(extra)
    factors = low_rank_factors(state, modules, 4, seed, std=0.1)
    save_file({f"transformer.{m}.lora_{n}.weight": t for m, (a, b) in factors.items() for n, t in (("A", a), ("B", b))},
              path)
    return path


def _with_and_without(pipe, lora, strength: float, run) -> tuple[np.ndarray, np.ndarray]:
    """(frames with the LoRA at `strength`, frames without) of `run(pipe)`."""
    with torch.no_grad():
        plain = run(pipe)
        pipe.load_lora_weights(str(lora), adapter_name="x")
        pipe.set_adapters(["x"], [strength])
        frames = run(pipe)
    return frames, plain


def _assert_matches(options: GenerateOptions, expected: np.ndarray, plain: np.ndarray) -> None:
    assert np.abs(expected - plain).max() > 50 * FRAME_ATOL  # the LoRA changes the video
    result = generate(options)
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


@pytest.fixture(scope="module")
def cogvideox(tmp_path_factory):
    """CogVideoX 1.0 5B-style, DDIM (no noise after the initial latents), CFG with a negative prompt."""
    from tests.cogvideox import pipelines as tiny

    root = tmp_path_factory.mktemp("cog_lora")
    pipe = tiny.pipeline(root / "model", "5b", scheduler="ddim", seed=40)
    lora = _peft_lora(root / "cog.safetensors", pipe.transformer, ("proj_out", "transformer_blocks.1.norm1.linear"), 61)
    latents = torch.randn(1, 3, 4, tiny.HEIGHT // 8, tiny.WIDTH // 8, generator=torch.Generator().manual_seed(12))
    np.save(root / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    common = dict(prompt=tiny.PROMPT, negative_prompt=tiny.NEGATIVE, height=tiny.HEIGHT, width=tiny.WIDTH,
                  num_frames=tiny.FRAMES, num_inference_steps=tiny.STEPS, guidance_scale=tiny.GUIDANCE,
                  output_type="np")
    expected, plain = _with_and_without(pipe, lora, 0.8, lambda p: p(latents=latents.clone(), **common).frames[0])
    options = GenerateOptions(model="cogvideox-5b", prompt=tiny.PROMPT, negative_prompt=tiny.NEGATIVE,
                              weights=str(root / "model"), height=tiny.HEIGHT, width=tiny.WIDTH, frames=tiny.FRAMES,
                              steps=tiny.STEPS, latents=root / "latents.npy", out=root / "out.npy", dtype="float32",
                              compile_cache=False, lora=(f"{lora}=0.8",))
    return options, expected, plain


def test_cogvideox_lora_matches_diffusers(cogvideox):
    _assert_matches(*cogvideox)


@pytest.fixture(scope="module")
def ltx_video(tmp_path_factory):
    """LTX-Video 0.9.x, the dynamically shifted scheduler, decode noise replayed from the reference's generator."""
    from diffusers import LTXPipeline

    from tests.ltx_video import test_pipeline as base
    from tests.ltx_video.references.pipelines import Replay, components, dynamic_scheduler, pack

    root = tmp_path_factory.mktemp("ltx_lora")
    pipe = LTXPipeline(scheduler=dynamic_scheduler(), **components(11, root))
    pipe.save_pretrained(root / "model")
    lora = _peft_lora(root / "ltx.safetensors", pipe.transformer, ("proj_in", "time_embed.linear"), 62)
    noise = torch.randn(base.LATENT, generator=torch.Generator().manual_seed(1))
    np.save(root / "latents.npy", noise.numpy())
    replay = Replay(base.SEED)
    replay.record(2, 0, base.LATENT)  # the decode noise
    common = dict(negative_prompt=base.NEGATIVE, height=base.HEIGHT, width=base.WIDTH, num_frames=base.FRAMES,
                  frame_rate=25, num_inference_steps=base.STEPS, guidance_scale=base.GUIDANCE, output_type="np",
                  **base.KNOBS)
    expected, plain = _with_and_without(pipe, lora, -0.7, lambda p: p(
        base.PROMPT, latents=pack(noise), generator=torch.Generator().manual_seed(base.SEED), **common).frames[0])
    return base.options(root, out=root / "v.npy", lora=(f"{lora}=-0.7",)), replay, expected, plain


def test_ltx_video_lora_matches_diffusers(ltx_video, monkeypatch):
    options, replay, expected, plain = ltx_video
    replay.install(monkeypatch)
    _assert_matches(options, expected, plain)


@pytest.fixture(scope="module")
def cosmos(tmp_path_factory):
    """Cosmos-Predict2.5 text-to-world, two guided UniPC steps."""
    from tests.cosmos import reference as ref
    from tests.cosmos.helpers import randn

    root = tmp_path_factory.mktemp("cosmos_lora")
    pipe = ref.build(root)
    lora = _peft_lora(root / "cosmos.safetensors", pipe.transformer, ("proj_out", "time_embed.t_embedder.linear_1"), 63)
    noise = randn(*ref.LATENT_SHAPE, seed=11)
    np.save(root / "noise.npy", noise.numpy())
    common = dict(prompt=ref.PROMPT, height=ref.HEIGHT, width=ref.WIDTH, num_frames=ref.FRAMES,
                  num_inference_steps=ref.STEPS, output_type="np")
    expected, plain = _with_and_without(pipe, lora, 0.6, lambda p: p(latents=noise.clone(), **common).frames[0])
    options = GenerateOptions(model="cosmos-predict2.5-2b", prompt=ref.PROMPT, weights=str(root / "diffusers"),
                              height=ref.HEIGHT, width=ref.WIDTH, frames=ref.FRAMES, steps=ref.STEPS,
                              latents=root / "noise.npy", out=root / "v.npy", dtype="float32", compile_cache=False,
                              lora=(f"{lora}=0.6",))
    return options, expected, plain


def test_cosmos_lora_matches_diffusers(cosmos):
    _assert_matches(*cosmos)
