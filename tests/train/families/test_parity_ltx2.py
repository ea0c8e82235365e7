"""`vidax-train lora`'s step on LTX-2 against PyTorch (issue 63, item 2): a tiny perturbed diffusers
`LTX2VideoTransformer3DModel` (tests/ltx2's LTX-2.3 shape: gated attention, cross-attention modulation) with a PEFT
LoRA on the family's default targets (q, k, v, o of the video self- and cross-attention), one row given its first
latent frame clean (per-token timesteps, out of the loss), the frozen audio stream on standard normal latents at
timestep 1000, a padded prompt; same batch, noise and σ on both sides, compared at fp32."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.ltx2.references.ltx2_spec_fixtures import dit_reference
from tests.train.families.peft_oracle import ALPHA, RANK, assert_step_matches, converted, step, t, with_lora
from vidax.train.families.ltx2 import AUDIO_TIMESTEP, LTX2Inputs, LTX2TrainFamily
from vidax.train.objective import Objective
from vidax.zoo.ltx2.config import TransformerConfig
from vidax.zoo.ltx2.transformer import LTX2Transformer

LATENT, AUDIO, TEXT, FPS = (2, 6, 3, 2, 4), 7, 5, 24.0


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx2")
    ref = dit_reference("2.3")

    def build(config):  # as LTX2Family.build_dit: STG's perturbation always honoured
        return LTX2Transformer(dataclasses.replace(TransformerConfig.from_hf_config(config), perturbed_attn=True))

    model, params = converted(ref, root, "ltx2/transformer", build)
    peft, lora, paths = with_lora(ref, LTX2TrainFamily.default_targets, root, params)
    return peft, model, params, lora, paths


def batch(cfg, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    b = LATENT[0]
    return {
        "latents": rng.standard_normal(LATENT).astype(np.float32),
        "text": rng.standard_normal((b, TEXT, cfg.inner_dim)).astype(np.float32),
        "audio_text": rng.standard_normal((b, TEXT, cfg.audio_inner_dim)).astype(np.float32),
        "text_mask": np.array([[1, 1, 1, 0, 0], [1] * TEXT], bool),
        "audio_noise": rng.standard_normal((b, AUDIO, 5)).astype(np.float32),
        "first_frame": np.array([1.0, 0.0], np.float32),  # row 0: the image-to-video task
    }


def test_loss_and_lora_gradients_match_peft(setup):
    ref, model, params, lora, paths = setup
    rows = batch(model.cfg)
    noise = np.random.default_rng(4).standard_normal(LATENT).astype(np.float32)
    sigmas = np.asarray([0.3, 0.85], np.float32)
    loss, grads = step(model, LTX2Inputs("float32", model.cfg, FPS), Objective(scale=ALPHA / RANK), params, lora,
                       rows, noise, sigmas)

    b, c, f, h, w = LATENT
    x0, eps = t(rows["latents"]), t(noise)
    s = t(sigmas).reshape(-1, 1, 1, 1, 1)
    keep = torch.zeros(b, 1, f, 1, 1)
    keep[0, :, 0] = 1.0
    noisy = keep * x0 + (1 - keep) * ((1 - s) * x0 + s * eps)
    pack = lambda v: v.reshape(b, c, -1).transpose(1, 2)  # noqa: E731  [B, F*H*W, C]
    tokens_keep = keep[:, 0, :, 0, 0].repeat_interleave(h * w, dim=1)
    timestep = t(sigmas)[:, None] * 1000 * (1 - tokens_keep)
    audio_t = torch.full((b,), AUDIO_TIMESTEP)
    mask = torch.from_numpy(rows["text_mask"]).long()
    video, _ = ref(hidden_states=pack(noisy), audio_hidden_states=t(rows["audio_noise"]),
                   encoder_hidden_states=t(rows["text"]), audio_encoder_hidden_states=t(rows["audio_text"]),
                   timestep=timestep, audio_timestep=audio_t, sigma=t(sigmas) * 1000, audio_sigma=audio_t,
                   encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
                   video_coords=ref.rope.prepare_video_coords(b, f, h, w, "cpu", fps=FPS),
                   audio_coords=ref.audio_rope.prepare_audio_coords(b, AUDIO, "cpu"), use_cross_timestep=True,
                   return_dict=False)
    weight = (1 - tokens_keep)[..., None]  # the clean frame's tokens are out of the loss
    want = ((video - pack(eps - x0)) ** 2 * weight).sum() / (weight.sum() * c)
    ref.zero_grad()
    want.backward()
    assert_step_matches(loss, grads, want.item(), ref, paths, modules=8)
