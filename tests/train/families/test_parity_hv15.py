"""`vidax-train lora`'s step on HunyuanVideo-1.5 against PyTorch (issue 63, item 2): a tiny perturbed diffusers
`HunyuanVideo15Transformer3DModel` (tests/hunyuan_video15's) with a PEFT LoRA on the family's default targets (q,
k, v, o of both streams), the image-to-video inputs (condition channels, SigLIP tokens) and padded text masks;
same batch, noise and σ on both sides, compared at fp32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.hunyuan_video15.hunyuan_spec_fixtures import dit_reference
from tests.train.families.peft_oracle import ALPHA, RANK, assert_step_matches, converted, step, t, with_lora
from vidax.train.families.hunyuan_video15 import HunyuanVideo15Inputs, HunyuanVideo15TrainFamily
from vidax.train.objective import Objective
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig

LATENT = (2, 4, 3, 4, 6)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv15")
    ref = dit_reference()
    model, params = converted(ref, root, "hunyuan_video15/transformer",
                              lambda config: HunyuanVideo15Transformer(TransformerConfig.from_hf_config(config)))
    peft, lora, paths = with_lora(ref, HunyuanVideo15TrainFamily.default_targets, root, params)
    return peft, model, params, lora, paths


def batch(seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    b = LATENT[0]
    return {
        "latents": rng.standard_normal(LATENT).astype(np.float32),
        "condition": rng.standard_normal((b, 1, *LATENT[2:])).astype(np.float32),  # the tiny DiT takes 4 + 1 channels
        "image_tokens": rng.standard_normal((b, 3, 12)).astype(np.float32),
        "text": rng.standard_normal((b, 7, 24)).astype(np.float32),
        "text_mask": np.array([[1] * 5 + [0] * 2, [1] * 7], bool),
        "text_2": rng.standard_normal((b, 5, 20)).astype(np.float32),
        "text_mask_2": np.array([[1] * 2 + [0] * 3, [1] * 4 + [0]], bool),
    }


def test_loss_and_lora_gradients_match_peft(setup):
    ref, model, params, lora, paths = setup
    rows = batch()
    noise = np.random.default_rng(4).standard_normal(LATENT).astype(np.float32)
    sigmas = np.asarray([0.3, 0.85], np.float32)
    inputs = HunyuanVideo15Inputs("float32", condition_channels=1, image_tokens=3, image_embed_dim=12, i2v=True)
    loss, grads = step(model, inputs, Objective(scale=ALPHA / RANK), params, lora, rows, noise, sigmas)

    s = t(sigmas).reshape(-1, 1, 1, 1, 1)
    noisy = (1 - s) * t(rows["latents"]) + s * t(noise)
    pred = ref(hidden_states=torch.cat([noisy, t(rows["condition"])], 1), timestep=t(sigmas) * 1000,
               encoder_hidden_states=t(rows["text"]), encoder_attention_mask=torch.from_numpy(rows["text_mask"]).long(),
               encoder_hidden_states_2=t(rows["text_2"]),
               encoder_attention_mask_2=torch.from_numpy(rows["text_mask_2"]).long(),
               image_embeds=t(rows["image_tokens"])).sample
    want = torch.nn.functional.mse_loss(pred, t(noise) - t(rows["latents"]))
    ref.zero_grad()
    want.backward()
    assert_step_matches(loss, grads, want.item(), ref, paths, modules=8)


def test_the_cuts_leave_the_loss_as_it_is(setup):
    """vidax-train's two cuts of the joint sequence (`HunyuanVideo15TrainFamily.trim`, one zero SigLIP token for
    text-to-video) drop only tokens the DiT masks out: the loss is unchanged."""
    _, model, params, lora, _ = setup
    rows = batch()
    rows["text_mask"] = np.array([[1] * 5 + [0] * 2, [1] * 4 + [0] * 3], bool)
    noise = np.random.default_rng(4).standard_normal(LATENT).astype(np.float32)
    sigmas = np.asarray([0.3, 0.85], np.float32)
    objective = Objective(scale=ALPHA / RANK)
    family = HunyuanVideo15TrainFamily(None)
    cut = family.trim([{k: v[i] for k, v in rows.items()} for i in range(LATENT[0])])
    assert cut == {"text": 5, "text_mask": 5, "text_2": 4, "text_mask_2": 4}
    short = {k: v[:, :cut[k]] if k in cut else v for k, v in rows.items()}
    losses = [step(model, HunyuanVideo15Inputs("float32", 1, tokens, 12, i2v=False), objective, params, lora, r, noise,
                   sigmas)[0] for tokens, r in ((3, rows), (1, short))]
    assert abs(float(losses[1]) - float(losses[0])) < 1e-6 * abs(float(losses[0]))
