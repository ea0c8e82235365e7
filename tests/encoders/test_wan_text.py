"""Wan's text path (prompt cleaning, 512-token UMT5 features zeroed past each prompt) against diffusers'
`WanPipeline._get_t5_prompt_embeds`, with a tiny UMT5 converted through the shipped spec."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from diffusers.pipelines.wan.pipeline_wan import WanPipeline, prompt_clean

from tests.encoders.oracle import assert_close, converted_params
from tests.encoders.test_tokenizer import t5_like_folder
from tests.oracle import perturb
from vidax.zoo.wan.text import wan_prompt_clean, wan_text_features
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer

PROMPTS = ["a red kite  over a grey sea", "the cat &amp;amp; the mat\n\tat dusk " * 3]


@pytest.mark.parametrize("text", PROMPTS + ["  caf\u00c3\u00a9 &lt;b&gt;  bold  ", ""])
def test_prompt_clean_matches_reference(text):
    assert wan_prompt_clean(text) == prompt_clean(text)


def test_wan_text_features_match_pipeline(tmp_path):
    folder = t5_like_folder(tmp_path / "tokenizer")
    config = transformers.UMT5Config(vocab_size=80, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                     feed_forward_proj="gated-gelu")
    reference = perturb(transformers.UMT5EncoderModel(config))
    reference.save_pretrained(tmp_path / "text_encoder")
    pipe = SimpleNamespace(tokenizer=transformers.AutoTokenizer.from_pretrained(folder), text_encoder=reference,
                           _execution_device=torch.device("cpu"))
    with torch.no_grad():
        expected = WanPipeline._get_t5_prompt_embeds(pipe, PROMPTS, max_sequence_length=40, dtype=torch.float32)
    ours = T5EncoderModel(T5Config.from_hf_config(reference.config.to_dict()))
    example = np.zeros((1, 40), np.int32)
    params = converted_params("encoders/umt5", tmp_path, ours, example, example)
    features = wan_text_features(ours, params, load_tokenizer(tmp_path, "tokenizer"), PROMPTS, max_length=40)
    assert (expected[0, -1] == 0).all() and (expected[1, -1] != 0).any()  # one padded, one truncated prompt
    assert_close(features, expected)
