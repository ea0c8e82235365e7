"""Our tokenizer loader against transformers' AutoTokenizer on the same locally built folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from vidax.zoo.parts.encoders.tokenizer import TokenizerError, load_tokenizer, qwen_chat_prompt

CORPUS = ["a red kite over a grey sea", "the cat sat on the mat", "un chat gris dort sur le tapis",
          "waves crash against the rocks at dusk", "a small boat drifts on calm water"] * 20
TEXTS = ["a red kite over a grey sea", "", "waves at dusk and a cat on a boat drifting " * 4, "grüne Äpfel — 青い海"]


def t5_like_folder(path):
    """A Unigram tokenizer with T5's specials and `$A </s>` template, saved the way transformers saves it."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=80, special_tokens=["<pad>", "</s>", "<unk>"],
                                                             unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)
    return path


def qwen_like_folder(path, padding_side, chat_template=None):
    """A byte-level BPE with Qwen's chat specials; pad is <|endoftext|> as in Qwen2.5."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                                padding_side=padding_side)
    fast.chat_template = chat_template
    fast.save_pretrained(path)
    return path


def assert_same(ours, reference, texts, **kwargs):
    expected = reference(texts, return_tensors="np", **kwargs)
    got = ours(texts, **kwargs)
    np.testing.assert_array_equal(got.input_ids, expected["input_ids"])
    np.testing.assert_array_equal(got.attention_mask, expected["attention_mask"])


@pytest.mark.parametrize("max_length", [8, 24])  # 8 truncates most texts, 24 pads most
def test_t5_like_tokenizer_json(tmp_path, max_length):
    folder = t5_like_folder(tmp_path / "tokenizer")
    ours, reference = load_tokenizer(tmp_path, "tokenizer"), transformers.AutoTokenizer.from_pretrained(folder)
    assert_same(ours, reference, TEXTS, padding="max_length", max_length=max_length, truncation=True,
                add_special_tokens=True)


@pytest.mark.parametrize("side", ["left", "right"])
def test_qwen_like_padding_side_and_specials(tmp_path, side):
    folder = qwen_like_folder(tmp_path, side)
    ours, reference = load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    texts = [qwen_chat_prompt("describe the video", t) for t in TEXTS]
    assert_same(ours, reference, texts, padding="max_length", max_length=160, truncation=True)
    assert_same(ours, reference, texts, padding="longest")
    # the chat specials are single tokens, not spelled out byte by byte
    im_start = reference.convert_tokens_to_ids("<|im_start|>")
    assert (ours(texts[:1], padding="longest").input_ids == im_start).sum() == 3


@pytest.mark.parametrize("max_length", [10, 64])
def test_byt5_bytes_and_added_tokens(tmp_path, max_length):
    transformers.ByT5Tokenizer().save_pretrained(tmp_path)
    ours, reference = load_tokenizer(tmp_path), transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = TEXTS + ['Text "OPEN" . <extra_id_3>neon</s> sign']
    assert_same(ours, reference, texts, padding="max_length", max_length=max_length, truncation=True,
                add_special_tokens=True)


def test_sentencepiece_only_folder(tmp_path):
    import sentencepiece

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS))
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spiece"), vocab_size=40,
                                             pad_id=0, eos_id=1, unk_id=2, bos_id=-1, model_type="unigram", minloglevel=2)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
         "extra_ids": 0}))
    ours = load_tokenizer(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ascii_texts = TEXTS[:3]  # the reference's conversion and sentencepiece agree on plain text
    assert_same(ours, reference, ascii_texts, padding="max_length", max_length=12, truncation=True)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer folder not found"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize("tokenizer_class", ["PreTrainedTokenizerFast", "LlamaTokenizerFast"])
def test_truncation_side_and_class_name(tmp_path, tokenizer_class):
    # left truncation keeps the end of the text; the class named in the config does not change the sides
    folder = qwen_like_folder(tmp_path, "left")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class=tokenizer_class, truncation_side="left")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours, reference = load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    assert_same(ours, reference, ["a cat", TEXTS[2]], padding="max_length", max_length=10, truncation=True)


def test_byt5_added_glyph_tokens_match_transformers(tmp_path):
    # HunyuanVideo-1.5's official ByT5 tokenizer: google/byt5-small plus colour and font tokens
    names = ["<color-0>", "<color-1>", "<en-font-0>", "<zh-font-3>"]
    transformers.ByT5Tokenizer().save_pretrained(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    reference.add_tokens(names, special_tokens=True)
    ours = load_tokenizer(tmp_path).with_added_tokens(names)
    text = 'Text "SALE" <color-1><en-font-0>. Text "开业" <zh-font-3>. '
    assert_same(ours, reference, [text, "<color-0>"], padding="max_length", max_length=48, truncation=True)
