"""HunyuanVideo-1.5's text paths (Qwen2.5-VL chat features, ByT5 glyph features) against diffusers' own
`HunyuanVideo15Pipeline` helpers, with tiny encoders converted through the shipped specs."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import transformers
from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import HunyuanVideo15Pipeline, extract_glyph_texts

from tests.encoders.oracle import assert_close, converted_params, perturb
from tests.encoders.test_tokenizer import qwen_like_folder
from vidax.zoo.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.encoders.prompts import glyph_features, glyph_text, mllm_text_features
from vidax.zoo.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.encoders.tokenizer import load_tokenizer

# Qwen2.5-VL's chat template reduced to its text-only branch (string contents), which is all the pipeline sends
TEXT_CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROMPTS = ['a neon sign reading "OPEN" over a door', "", "a “café” sign and a \"bar\" sign and \"bar\" again"]
SYSTEM = inspect.signature(HunyuanVideo15Pipeline._get_mllm_prompt_embeds).parameters["system_message"].default


@pytest.mark.parametrize("prompt", PROMPTS + ['""', "no quotes", '"a" "b" "a"', "“only curly”"])
def test_glyph_text_matches_reference(prompt):
    assert glyph_text(prompt) == extract_glyph_texts(prompt)


def test_mllm_features_match_pipeline(tmp_path):
    folder = qwen_like_folder(tmp_path / "tokenizer", "right", TEXT_CHAT_TEMPLATE)
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 1, 1]}
    config = transformers.Qwen2_5_VLTextConfig(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                                               num_attention_heads=4, num_key_value_heads=2, rope_parameters=rope)
    reference = perturb(transformers.Qwen2_5_VLTextModel(config))
    reference.config._attn_implementation = "eager"
    reference.save_pretrained(tmp_path / "text_encoder")
    with torch.no_grad():
        expected, expected_mask = HunyuanVideo15Pipeline._get_mllm_prompt_embeds(
            reference, transformers.AutoTokenizer.from_pretrained(folder), PROMPTS, "cpu", tokenizer_max_length=24)
    assert expected_mask.sum() > 0  # the crop must leave real prompt tokens
    ours = DecoderTextModel(DecoderConfig.from_hf_config(reference.config.to_dict()))
    example = np.zeros((1, 132), np.int32)
    params = converted_params("encoders/decoder", tmp_path, ours, example, example)
    features, mask = mllm_text_features(ours, params, load_tokenizer(folder), PROMPTS, SYSTEM, max_length=24)
    np.testing.assert_array_equal(np.asarray(mask), expected_mask.numpy())
    valid = expected_mask.numpy().astype(bool)
    assert_close(np.asarray(features)[valid], expected.numpy()[valid], what="hidden_states[-3] after the crop")


def test_glyph_features_match_pipeline(tmp_path):
    transformers.ByT5Tokenizer().save_pretrained(tmp_path / "tokenizer_2")
    config = transformers.T5Config(vocab_size=384, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                   feed_forward_proj="gated-gelu")
    reference = perturb(transformers.T5EncoderModel(config))
    reference.save_pretrained(tmp_path / "text_encoder_2")
    with torch.no_grad():
        expected, expected_mask = HunyuanVideo15Pipeline._get_byt5_prompt_embeds(
            transformers.AutoTokenizer.from_pretrained(tmp_path / "tokenizer_2"), reference, PROMPTS, "cpu",
            tokenizer_max_length=40)
    ours = T5EncoderModel(T5Config.from_hf_config(reference.config.to_dict()))
    example = np.zeros((1, 40), np.int32)
    params = converted_params("encoders/t5", tmp_path, ours, example, example, subfolder="text_encoder_2")
    features, mask = glyph_features(ours, params, load_tokenizer(tmp_path, "tokenizer_2"), PROMPTS, max_length=40)
    np.testing.assert_array_equal(np.asarray(mask), expected_mask.numpy())
    assert_close(features, expected, what="ByT5 glyph features (zeros for the prompt without quotes)")
