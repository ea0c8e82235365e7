"""Prompt encoding against diffusers `HunyuanVideo15Pipeline.encode_prompt`: tiny Qwen2.5-VL text tower
behind the chat template (crop 108, hidden_states[-3]) and tiny ByT5 on the quoted glyph text, with
tokenizer folders built locally; both towers converted through the shared encoder specs."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.encoders.tokenizer import load_tokenizer
from vidax.zoo.hunyuan_video15.text import PromptEncoder

from tests.oracle import perturb, to_np, unflatten

from .hunyuan_spec_fixtures import vae_reference

import transformers

PROMPTS = ['a neon sign that says "OPEN" above a door, “OPEN” again', "a red kite over a grey sea"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)  # Qwen2.5's template for plain-text system/user messages


def qwen_tokenizer(folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["describe the video in detail", "a red kite over a grey sea", "a neon sign above a door"] * 10
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    from diffusers import HunyuanVideo15Pipeline as Reference

    root = tmp_path_factory.mktemp("hv15_text")
    torch.manual_seed(0)
    qwen = perturb(transformers.Qwen2_5_VLTextModel(transformers.Qwen2_5_VLTextConfig(
        vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]})), 1)
    byt5 = perturb(transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=384, d_model=20, d_kv=8, d_ff=32, num_layers=2, num_heads=2, feed_forward_proj="gated-gelu",
        relative_attention_num_buckets=8, relative_attention_max_distance=16)), 2)
    qwen.save_pretrained(root / "text_encoder")
    byt5.save_pretrained(root / "text_encoder_2")
    tokenizer = qwen_tokenizer(root / "tokenizer")
    transformers.ByT5Tokenizer().save_pretrained(root / "tokenizer_2")
    ref = Reference(text_encoder=qwen, tokenizer=tokenizer, transformer=None, vae=vae_reference(), scheduler=None,
                    text_encoder_2=byt5, tokenizer_2=transformers.AutoTokenizer.from_pretrained(root / "tokenizer_2"),
                    guider=None)
    return ref, root


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
