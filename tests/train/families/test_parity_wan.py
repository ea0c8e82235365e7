"""`vidax-train lora`'s step on the Wan variants beyond text-to-video against PyTorch (issue 63, item 2): tiny
perturbed diffusers `WanTransformer3DModel`s with a PEFT LoRA on the default targets, same batch, noise and σ on
both sides, compared at fp32.

- Wan2.1 I2V: the condition (mask + encoded frames) concatenated on the channels and CLIP tokens through the image
  branch (diffusers' I2V attention splits text from image at 512 text tokens: 512 are fed);
- Wan2.1 FLF2V: two frames' CLIP tokens a row (diffusers folds consecutive rows of its image input together);
- Wan2.2 TI2V-5B: per-token timesteps, one row with its first latent frame clean (its tokens at t = 0, out of the
  loss)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.oracle import build_perturbed
from tests.train.families.peft_oracle import ALPHA, RANK, assert_step_matches, converted, step, t, with_lora
from vidax.train.families.wan import WanInputs, WanTrainFamily
from vidax.train.objective import Objective
from vidax.zoo.wan.config import WanTransformerConfig
from vidax.zoo.wan.transformer import WanTransformer

BASE = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
            text_dim=24, freq_dim=12, ffn_dim=40, num_layers=2, cross_attn_norm=True)
CONFIGS = {"i2v": dict(BASE, in_channels=12, image_dim=20, added_kv_proj_dim=16), "ti2v": BASE,
           "flf2v": dict(BASE, in_channels=12, image_dim=20, added_kv_proj_dim=16, pos_embed_seq_len=10)}
LATENT = (2, 4, 3, 4, 6)


def build(variant, root):
    from diffusers import WanTransformer3DModel

    ref = build_perturbed(WanTransformer3DModel, CONFIGS[variant], seed=0)
    model, params = converted(ref, root, "wan/transformer",
                              lambda config: WanTransformer(WanTransformerConfig.from_hf_config(config)))
    ref, lora, paths = with_lora(ref, WanTrainFamily.default_targets, root, params, block_list="blocks")
    return ref, model, params, lora, paths


@pytest.mark.parametrize("variant", sorted(CONFIGS))
def test_loss_and_lora_gradients_match_peft(variant, tmp_path):
    ref, model, params, lora, paths = build(variant, tmp_path)
    rng = np.random.default_rng(3)
    b, c, f, h, w = LATENT
    i2v = variant in ("i2v", "flf2v")
    frames = 2 if variant == "flf2v" else 1
    rows = {"latents": rng.standard_normal(LATENT).astype(np.float32),
            "text": rng.standard_normal((b, 512 if i2v else 9, 24)).astype(np.float32)}
    if i2v:
        rows["condition"] = rng.standard_normal((b, 8, f, h, w)).astype(np.float32)
        rows["clip"] = rng.standard_normal((b, frames, 5, 20)).astype(np.float32)
    else:
        rows["first_frame"] = np.array([1.0, 0.0], np.float32)
    noise = rng.standard_normal(LATENT).astype(np.float32)
    sigmas = np.asarray([0.3, 0.85], np.float32)
    inputs = WanInputs("float32", (2, 2), per_token=not i2v, condition=i2v, image=i2v)
    loss, grads = step(model, inputs, Objective(scale=ALPHA / RANK), params, lora, rows, noise, sigmas)

    x0, eps, s = t(rows["latents"]), t(noise), t(sigmas).reshape(-1, 1, 1, 1, 1)
    noisy = (1 - s) * x0 + s * eps
    weight = torch.ones(b, 1, f, 1, 1)
    if i2v:
        out = ref(hidden_states=torch.cat([noisy, t(rows["condition"])], 1), timestep=t(sigmas) * 1000,
                  encoder_hidden_states=t(rows["text"]), encoder_hidden_states_image=t(rows["clip"]).flatten(0, 1),
                  return_dict=False)[0]
    else:
        weight[0, :, 0] = 0.0  # row 0's first latent frame is given clean
        noisy = (1 - weight) * x0 + weight * noisy
        per_token = (t(sigmas)[:, None] * 1000 * weight[:, 0, :, 0, 0]).repeat_interleave((h // 2) * (w // 2), dim=1)
        out = ref(hidden_states=noisy, timestep=per_token, encoder_hidden_states=t(rows["text"]), return_dict=False)[0]
    weight = weight.expand(b, c, f, h, w)
    want = ((out - (eps - x0)) ** 2 * weight).sum() / weight.sum()
    ref.zero_grad()
    want.backward()
    assert_step_matches(loss, grads, want.item(), ref, paths, modules=10)
