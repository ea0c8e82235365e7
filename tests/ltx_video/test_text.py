"""Prompt encoding against diffusers `LTXPipeline.encode_prompt` (T5 unmasked) and
`LTXConditionPipeline.encode_prompt` (T5 masked), with a tiny T5 v1.1 converted through the shared spec and a
T5-like tokenizer folder built locally; and the official pipeline's (stripped, masked)."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from diffusers.pipelines.ltx.pipeline_ltx import LTXPipeline
from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXConditionPipeline

from tests.encoders.oracle import converted_params
from tests.oracle import perturb
from tests.encoders.test_tokenizer import t5_like_folder
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.ltx_video.text import PRESETS, encode_prompts

PROMPTS = ["  a red kite over a grey sea ", "waves crash against the rocks at dusk " * 8]  # one padded, one truncated
NEGATIVE = ["", "a cat"]


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx_text")
    t5_like_folder(root / "tokenizer")
    config = transformers.T5Config(vocab_size=80, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                   feed_forward_proj="gated-gelu")
    reference = perturb(transformers.T5EncoderModel(config))
    reference.save_pretrained(root / "text_encoder")
    ours = T5EncoderModel(T5Config.from_hf_config(reference.config.to_dict()))
    example = np.zeros((1, 8), np.int32)
    params = converted_params("encoders/t5", root, ours, example, example)
    return reference, ours, params, load_tokenizer(root, "tokenizer"), transformers.AutoTokenizer.from_pretrained(root / "tokenizer")


@pytest.mark.parametrize("pipeline, max_length, mask_encoder", [(LTXPipeline, 40, False), (LTXConditionPipeline, 64, True)],
                         ids=["ltx", "condition"])
def test_prompt_features_match_pipeline(towers, pipeline, max_length, mask_encoder):
    reference, ours, params, tokenizer, hf_tokenizer = towers
    pipe = SimpleNamespace(tokenizer=hf_tokenizer, text_encoder=reference, _execution_device=torch.device("cpu"))
    pipe._get_t5_prompt_embeds = partial(pipeline._get_t5_prompt_embeds, pipe)
    with torch.no_grad():
        embeds, mask, neg_embeds, neg_mask = pipeline.encode_prompt(
            pipe, PROMPTS, NEGATIVE, do_classifier_free_guidance=True, max_sequence_length=max_length, device="cpu",
            dtype=torch.float32)
    features, our_mask = encode_prompts(ours, params, tokenizer, PROMPTS + NEGATIVE, max_length=max_length,
                                        mask_encoder=mask_encoder)
    assert mask[0].sum() < max_length and mask[1].all()  # the inputs do pad and truncate
    np.testing.assert_array_equal(our_mask, torch.cat([mask, neg_mask]).numpy())
    np.testing.assert_allclose(np.asarray(features), torch.cat([embeds, neg_embeds]).numpy(), atol=2e-5, rtol=1e-5)
    assert PRESETS["ltx_pipeline" if pipeline is LTXPipeline else "condition_pipeline"][1] == mask_encoder


def test_official_encoding_masks_the_encoder(towers):
    """Lightricks' pipeline strips the prompt and passes the mask to T5: features of real tokens ignore padding."""
    reference, ours, params, tokenizer, hf_tokenizer = towers
    batch = hf_tokenizer([p.strip() for p in PROMPTS], padding="max_length", max_length=48, truncation=True,
                         return_tensors="pt")
    with torch.no_grad():
        want = reference(batch.input_ids, attention_mask=batch.attention_mask)[0]
    features, mask = encode_prompts(ours, params, tokenizer, PROMPTS, max_length=48, mask_encoder=True, strip=True)
    np.testing.assert_array_equal(mask, batch.attention_mask.numpy())
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(features)[real], want.numpy()[real], atol=2e-5, rtol=1e-5)
    unmasked, _ = encode_prompts(ours, params, tokenizer, PROMPTS, max_length=48)
    assert np.abs(np.asarray(unmasked)[real] - np.asarray(features)[real]).max() > 1e-3  # the two references differ
