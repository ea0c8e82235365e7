"""CogVideoX prompt encoding against diffusers `CogVideoXPipeline.encode_prompt`: a tiny T5 v1.1
encoder converted through the shared spec `encoders/t5`, a sentencepiece tokenizer folder laid out as
the repos' `tokenizer/` (spiece.model + T5Tokenizer config), 226 tokens, no attention mask, and the
default empty negative prompt. Every one of the 226 rows is compared: the padding is not masked in
the reference, so the padded rows carry the prompt's information too and reach the DiT.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax.traverse_util import unflatten_dict
from vidax.translator import convert, load_spec
from vidax.zoo.cogvideox.text import MAX_SEQUENCE_LENGTH, encode_prompt
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer

from tests.oracle import perturb

CORPUS = ["a red kite over a grey sea", "the cat sat on the mat", "waves crash against the rocks at dusk",
          "a small boat drifts on calm water", "a girl rides a bike through the park"] * 20
# plain ascii (where sentencepiece and transformers' conversion agree); the last one is truncated
PROMPTS = ["a small boat drifts on calm water", "a cat sat on a red kite " * 60]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import sentencepiece
    from diffusers import CogVideoXPipeline

    root = tmp_path_factory.mktemp("cogvideox_text")
    folder = root / "tokenizer"
    folder.mkdir()
    (root / "corpus.txt").write_text("\n".join(CORPUS))
    sentencepiece.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(folder / "spiece"),
                                             vocab_size=40, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                             model_type="unigram", minloglevel=2)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
         "extra_ids": 0, "model_max_length": MAX_SEQUENCE_LENGTH}))
    torch.manual_seed(0)
    t5 = perturb(transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=40, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu",
        relative_attention_num_buckets=8, relative_attention_max_distance=32)), 1)
    t5.save_pretrained(root / "text_encoder")
    reference = CogVideoXPipeline(tokenizer=transformers.AutoTokenizer.from_pretrained(folder), text_encoder=t5,
                                  vae=None, transformer=None, scheduler=None)
    model = T5EncoderModel(T5Config.from_hf_config(t5.config.to_dict()))
    params = unflatten_dict(dict(convert(load_spec("encoders/t5"), root, dtype="float32")), sep="/")
    return reference, model, params, load_tokenizer(root, "tokenizer")


def test_prompt_and_default_negative_match_reference(setup):
    reference, model, params, tokenizer = setup
    with torch.no_grad():
        want, want_negative = reference.encode_prompt(PROMPTS, device="cpu", dtype=torch.float32)
    got, got_negative = encode_prompt(model, params, tokenizer, PROMPTS)
    assert got.shape == (2, MAX_SEQUENCE_LENGTH, 32)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(got_negative), want_negative.numpy(), rtol=1e-5, atol=2e-5)
    # the padded rows differ from one prompt to another: the padding attends to the prompt
    assert np.abs(np.asarray(got)[0, -1] - np.asarray(got_negative)[0, -1]).max() > 1e-3


def test_negative_prompt_and_no_guidance(setup):
    reference, model, params, tokenizer = setup
    with torch.no_grad():
        _, want_negative = reference.encode_prompt(PROMPTS[:1], "the cat sat", device="cpu", dtype=torch.float32)
    cond, negative = encode_prompt(model, params, tokenizer, PROMPTS[0], "the cat sat")
    np.testing.assert_allclose(np.asarray(negative), want_negative.numpy(), rtol=1e-5, atol=2e-5)
    alone, none = encode_prompt(model, params, tokenizer, PROMPTS[0], guidance=False)
    assert none is None
    np.testing.assert_array_equal(np.asarray(alone), np.asarray(cond))
    with pytest.raises(ValueError, match="2 entries for 1 prompts"):
        encode_prompt(model, params, tokenizer, PROMPTS[0], ["a", "b"])
    assert jnp.asarray(cond).dtype == jnp.float32
