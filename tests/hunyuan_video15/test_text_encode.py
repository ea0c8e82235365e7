"""Prompt encoding against diffusers `HunyuanVideo15Pipeline.encode_prompt`: tiny Qwen2.5-VL text tower
behind the chat template (crop 108, hidden_states[-3]) and tiny ByT5 on the quoted glyph text, with
tokenizer folders built locally; both towers converted through the shared encoder specs."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.hunyuan_video15.text import PromptEncoder

from tests.oracle import to_np, unflatten

from .pipelines import towers  # noqa: F401  (module fixture: tiny text towers and tokenizers)


PROMPTS = ['a neon sign that says "OPEN" above a door, “OPEN” again', "a red kite over a grey sea"]
def test_prompt_features_match_reference(towers):
    ref, root = towers
    with torch.no_grad():
        text, mask, text_2, mask_2 = ref.encode_prompt(PROMPTS, device="cpu", dtype=torch.float32, batch_size=2)

    decoder = DecoderTextModel(DecoderConfig.from_hf_config(ref.text_encoder.config.to_dict()))
    byt5 = T5EncoderModel(T5Config.from_hf_config(ref.text_encoder_2.config.to_dict()))
    encoder = PromptEncoder(
        load_tokenizer(root / "tokenizer"), decoder, unflatten(convert(load_spec("encoders/decoder"), root / "text_encoder", dtype="float32")),
        load_tokenizer(root / "tokenizer_2"), byt5, unflatten(convert(load_spec("encoders/t5"), root / "text_encoder_2", dtype="float32")),
    )
    ours = encoder(PROMPTS)

    np.testing.assert_array_equal(np.asarray(ours.text_mask), to_np(mask).astype(bool))
    np.testing.assert_array_equal(np.asarray(ours.text_mask_2), to_np(mask_2).astype(bool))
    assert np.asarray(ours.text_mask_2)[1].sum() == 0  # no quotes: no glyph tokens
    valid = to_np(mask).astype(bool)  # padded rows carry no meaning in either implementation
    np.testing.assert_allclose(np.asarray(ours.text)[valid], to_np(text)[valid], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ours.text_2), to_np(text_2), atol=2e-5, rtol=1e-5)
    assert jnp.asarray(ours.text).shape == (2, 1000, 32)


@pytest.mark.parametrize("prompt", PROMPTS + ["", '""', "no quotes", '"a" "b" "a"', "“only curly”",
                                              "a “café” sign and a \"bar\" sign and \"bar\" again"])
def test_glyph_text_matches_reference(prompt):
    from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import extract_glyph_texts

    from vidax.zoo.hunyuan_video15.text import glyph_text

    assert glyph_text(prompt) == extract_glyph_texts(prompt)
