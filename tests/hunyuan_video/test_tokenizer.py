"""`load_tokenizer` on a CLIP tokenizer folder holding only `vocab.json` + `merges.txt` (+ configs), as
transformers' slow `CLIPTokenizer` saved it and HunyuanVideo's diffusers mirror ships `tokenizer_2/`:
the ids and masks of transformers' `CLIPTokenizer` on the same folder."""

from __future__ import annotations

import numpy as np
import transformers

from vidax.zoo.parts.encoders.tokenizer import FastTokenizer, load_tokenizer

from .pipelines import clip_tokenizer_files, corpus

TEXTS = ["A red kite over a GREY sea", "waves  breaking\ton the rocks!!", "it's 2024: 3 kites, 12 gulls",
         "naïve café — ünïcödé", "<|endoftext|> inside", "", "x" * 300]


def test_clip_vocab_and_merges_match_transformers(tmp_path):
    clip_tokenizer_files(tmp_path, corpus() + TEXTS)
    assert not (tmp_path / "tokenizer.json").exists()
    reference = transformers.CLIPTokenizer.from_pretrained(tmp_path)
    ours = load_tokenizer(tmp_path)
    assert isinstance(ours, FastTokenizer)
    expected = reference(TEXTS, padding="max_length", max_length=77, truncation=True, return_tensors="np")
    batch = ours(TEXTS, max_length=77)
    np.testing.assert_array_equal(batch.input_ids, expected.input_ids)
    np.testing.assert_array_equal(batch.attention_mask, expected.attention_mask)
    assert batch.input_ids[0, 0] == reference.bos_token_id and batch.input_ids[-1, -1] == reference.eos_token_id
