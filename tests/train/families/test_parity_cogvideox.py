"""`vidax-train lora`'s step on CogVideoX against PyTorch (issue 63, item 2): tiny perturbed diffusers
`CogVideoXTransformer3DModel`s (tests/cogvideox's 5B-shaped 1.0 with RoPE and 1.5 with `patch_size_t` 2) with a
PEFT LoRA on the family's default targets, the DDPM v-prediction loss of diffusers' `train_cogvideox_lora.py` (x0
from the velocity, weighted by 1 / (1 − ᾱ)) on CogVideoX's ᾱ table, RoPE from the pipeline's own
`_prepare_rotary_positional_embeddings`; same batch, noise and timesteps on both sides, compared at fp32."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline

from tests.cogvideox.cogvideox_spec_fixtures import SPEC_OF, TEXT_DIM, TEXT_LEN, dit_reference
from tests.train.families.peft_oracle import ALPHA, RANK, assert_step_matches, converted, step, t, with_lora
from vidax.train.families.cogvideox import CogVideoXInputs, CogVideoXTrainFamily
from vidax.train.objective import Objective, VPrediction
from vidax.zoo.cogvideox.config import CogVideoXTransformerConfig
from vidax.zoo.cogvideox.transformer import CogVideoXTransformer
from vidax.zoo.samplers import cogvideox_alphas_cumprod

SIZES = {"5b": (3, 6, 8), "15": (4, 6, 8)}


@pytest.mark.parametrize("variant", sorted(SIZES))
def test_loss_and_lora_gradients_match_peft(variant, tmp_path):
    ref = dit_reference(variant)
    model, params = converted(ref, tmp_path, SPEC_OF[variant],
                              lambda config: CogVideoXTransformer(CogVideoXTransformerConfig.from_hf_config(config)))
    ref, lora, paths = with_lora(ref, CogVideoXTrainFamily.default_targets, tmp_path, params)
    f, h, w = SIZES[variant]
    rng = np.random.default_rng(3)
    rows = {"latents": rng.standard_normal((2, 4, f, h, w)).astype(np.float32),
            "text": (rng.standard_normal((2, TEXT_LEN, TEXT_DIM)) * 3).astype(np.float32)}
    noise = rng.standard_normal(rows["latents"].shape).astype(np.float32)
    sigmas = np.asarray([0.3, 0.8517], np.float32)  # timesteps 300 and 851
    table = cogvideox_alphas_cumprod()
    objective = Objective(scale=ALPHA / RANK, sampling="uniform", loss=VPrediction(tuple(map(float, table))))
    loss, grads = step(model, CogVideoXInputs("float32"), objective, params, lora, rows, noise, sigmas)

    steps = torch.tensor([300, 851])
    a = torch.from_numpy(table[steps.numpy()].astype(np.float32)).reshape(-1, 1, 1, 1, 1)
    x0, eps = t(rows["latents"]), t(noise)
    noisy = a.sqrt() * x0 + (1 - a).sqrt() * eps
    stand_in = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=ref)
    rope = CogVideoXPipeline._prepare_rotary_positional_embeddings(stand_in, h * 8, w * 8, f, "cpu")
    v = ref(hidden_states=noisy.transpose(1, 2), encoder_hidden_states=t(rows["text"]), timestep=steps,
            image_rotary_emb=rope, return_dict=False)[0].transpose(1, 2)  # [B, F, C, H, W] -> [B, C, F, H, W]
    predicted = a.sqrt() * noisy - (1 - a).sqrt() * v
    want = ((predicted - x0) ** 2 / (1 - a)).mean()
    ref.zero_grad()
    want.backward()
    assert_step_matches(loss, grads, want.item(), ref, paths, modules=4)
