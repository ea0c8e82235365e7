"""Cosmos-Predict2.5's Reason1 text features against `Cosmos2_5_PredictBasePipeline`'s own
`_get_prompt_embeds` / `encode_prompt`, on a tiny perturbed `Qwen2_5_VLForConditionalGeneration` saved
as the diffusers repo's `text_encoder/` and converted through the shipped `encoders/decoder` spec,
with a Qwen-like tokenizer carrying Qwen2-VL's chat template (list-of-parts contents, vision ids)."""

from __future__ import annotations

import functools
import types

import jax
import numpy as np
import pytest
import torch
import transformers
from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import (
    DEFAULT_NEGATIVE_PROMPT,
    Cosmos2_5_PredictBasePipeline,
)
from vidax.zoo.cosmos import text as cosmos_text
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel

from tests.encoders.oracle import converted_params
from tests.encoders.test_tokenizer import qwen_like_folder
from tests.tiny_references import QWEN2_VL_TEMPLATE
from tests.oracle import perturb

# Qwen2-VL / Qwen2.5-VL's chat template (tokenizer_config.json of Qwen/Qwen2.5-VL-7B-Instruct)
PROMPTS = ["a red kite over a grey sea", "waves crash against the rocks at dusk " * 40, ""]  # 2nd truncates
MAX_LENGTH = 192  # byte-level toy BPE: the chat alone is ~100 tokens
ATOL = 1e-5  # standardised features are O(1); observed max error 1.2e-6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos_text")
    folder = qwen_like_folder(root / "tokenizer", "right", QWEN2_VL_TEMPLATE)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=2,
                  spatial_merge_size=1, temporal_patch_size=1, window_size=4, fullatt_block_indexes=[0])
    text = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, rms_norm_eps=1e-6,
                rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 1, 1]})
    torch.manual_seed(0)
    reference = perturb(transformers.Qwen2_5_VLForConditionalGeneration(
        transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision)))
    reference.config._attn_implementation = "eager"
    reference.save_pretrained(root / "text_encoder")
    ours = DecoderTextModel(DecoderConfig.from_hf_config(reference.config.to_dict()))
    example = np.zeros((1, MAX_LENGTH), np.int32)
    params = converted_params("encoders/decoder", root, ours, example, example)
    pipe = types.SimpleNamespace(tokenizer=transformers.AutoTokenizer.from_pretrained(folder), text_encoder=reference)
    pipe._get_prompt_embeds = functools.partial(Cosmos2_5_PredictBasePipeline._get_prompt_embeds, pipe)
    return pipe, ours, params, cosmos_text.PromptTokenizer(folder)


def test_prompt_ids_match_the_pipeline_chat(setup):
    pipe, _, _, tokenizer = setup
    for prompt in PROMPTS:
        conversation = [{"role": "system", "content": [{"type": "text", "text": cosmos_text.SYSTEM_PROMPT}]},
                        {"role": "user", "content": [{"type": "text", "text": prompt}]}]
        expected = pipe.tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=False,
                                                      add_vision_id=False, max_length=MAX_LENGTH, truncation=True,
                                                      padding="max_length")
        expected = expected["input_ids"] if not isinstance(expected, list) else expected
        np.testing.assert_array_equal(tokenizer([prompt], MAX_LENGTH)[0], np.asarray(expected))


def test_features_match_get_prompt_embeds(setup):
    pipe, ours, params, tokenizer = setup
    with torch.no_grad():
        expected = Cosmos2_5_PredictBasePipeline._get_prompt_embeds(
            pipe, PROMPTS, max_sequence_length=MAX_LENGTH, device="cpu", dtype=torch.float32)
    ids = tokenizer(PROMPTS, MAX_LENGTH)
    assert (ids == pipe.tokenizer.pad_token_id).any()  # padding rows are kept and fed unmasked, as in the reference
    got = jax.jit(cosmos_text.reason1_features, static_argnums=0)(ours, params, ids)
    assert got.shape == (3, MAX_LENGTH, 4 * 32)
    np.testing.assert_allclose(np.asarray(got), expected.numpy(), atol=ATOL, rtol=1e-5)


def test_encode_prompt_with_default_negative(setup):
    pipe, ours, params, tokenizer = setup
    with torch.no_grad():
        cond, uncond = Cosmos2_5_PredictBasePipeline.encode_prompt(
            pipe, PROMPTS[:1], None, do_classifier_free_guidance=True, max_sequence_length=MAX_LENGTH, device="cpu",
            dtype=torch.float32)
    assert cosmos_text.DEFAULT_NEGATIVE_PROMPT == DEFAULT_NEGATIVE_PROMPT
    ours_cond, ours_uncond = cosmos_text.encode_prompts(ours, params, tokenizer, PROMPTS[:1], max_length=MAX_LENGTH)
    np.testing.assert_allclose(np.asarray(ours_cond), cond.numpy(), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ours_uncond), uncond.numpy(), atol=ATOL, rtol=1e-5)
    assert cosmos_text.encode_prompts(ours, params, tokenizer, PROMPTS[:1], guidance=False,
                                      max_length=MAX_LENGTH)[1] is None
