"""`vidax-gen hunyuanvideo --lora` end to end against diffusers' HunyuanVideoPipeline with the same LoRAs.

The tiny pipeline of tests/hunyuan_video (Llama and CLIP stand-ins, DiT, VAE) saved with `save_pretrained`;
an original-key LoRA (`diffusion_model.double_blocks.N.img_attn_qkv.lora_A/B`, as musubi-tuner and
diffusion-pipe name them) on the fused q/k/v of both streams, the image MLP, the modulation and the single
blocks' output at 0.9, and a PEFT LoRA of diffusers' split `to_q`/`add_v_proj` at -0.4; the reference loads
both with `load_lora_weights` + `set_adapters`, and both sides start from the same latents.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.hunyuan_video import pipelines as tiny
from tests.lora.formats import low_rank_factors
from tests.lora.test_hunyuan_video_merge import _official_shapes
from tests.oracle import state_of
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

FRAME_ATOL = 2e-5  # tests/hunyuan_video/test_generate.py: measured max 5.4e-6 without LoRAs
FUSED = [f"double_blocks.{i}.{m}" for i in range(2) for m in ("img_attn_qkv", "txt_attn_qkv", "img_mlp.fc1", "img_mod.linear")] \
    + ["single_blocks.0.linear2", "single_blocks.1.linear2"]
SPLIT = ["transformer_blocks.0.attn.to_q", "transformer_blocks.1.attn.add_v_proj"]


def _lora(path, factors: dict, prefix: str):
    save_file({f"{prefix}{m}.lora_{n}.weight": t for m, (a, b) in factors.items() for n, t in (("A", a), ("B", b))}, path)
    return path


@pytest.fixture(scope="module")
def hunyuan_lora(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv_lora")
    pipe = tiny.t2v_pipeline(root, tiny.towers(root))
    state = state_of(pipe.transformer)
    shapes = {k: v for k, v in _official_shapes(state).items()}
    original = _lora(root / "original.safetensors",
                     low_rank_factors({m + ".weight": shapes[m] for m in FUSED}, FUSED, 4, 51, std=0.1), "diffusion_model.")
    peft = _lora(root / "peft.safetensors", low_rank_factors(state, SPLIT, 2, 52, std=0.1), "transformer.")
    noise = root / "noise.npy"
    np.save(noise, tiny.latents(0))
    common = dict(prompt=tiny.PROMPT, height=tiny.HEIGHT, width=tiny.WIDTH, num_frames=tiny.FRAMES,
                  num_inference_steps=tiny.STEPS, output_type="np")
    with torch.no_grad():
        plain = pipe(latents=torch.from_numpy(np.load(noise)), **common).frames[0]
        pipe.load_lora_weights(str(original), adapter_name="original")
        pipe.load_lora_weights(str(peft), adapter_name="peft")
        pipe.set_adapters(["original", "peft"], [0.9, -0.4])
        frames = pipe(latents=torch.from_numpy(np.load(noise)), **common).frames[0]
    return root, noise, original, peft, frames, plain


def test_loras_match_diffusers(hunyuan_lora, tmp_path):
    root, noise, original, peft, expected, plain = hunyuan_lora
    assert np.abs(expected - plain).max() > 50 * FRAME_ATOL  # the LoRAs change the video
    options = GenerateOptions(model="hunyuanvideo", prompt=tiny.PROMPT, weights=str(root / "model"), height=tiny.HEIGHT,
                              width=tiny.WIDTH, frames=tiny.FRAMES, steps=tiny.STEPS, latents=noise,
                              out=tmp_path / "v.npy", compile_cache=False, dtype="float32",
                              lora=(f"{original}=0.9", f"{peft}=-0.4"))
    result = generate(options)
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
