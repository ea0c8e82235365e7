"""LTX-2 prompt path against diffusers: the connectors (through the real spec) and the whole chain
tokens -> Gemma 3 tower -> stacked states -> connectors against `LTX2Pipeline`'s own
`_get_gemma_prompt_embeds` and `connectors`; and the `<bos>` handling of both conventions."""

from __future__ import annotations

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.parts.encoders.gemma import GemmaConfig, GemmaTextModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.ltx2.config import ConnectorsConfig
from vidax.zoo.ltx2.connectors import TextConnectors
from vidax.zoo.ltx2.text import prompt_tokens, stack_hidden_states

from tests.oracle import unflatten

from tests.encoders.gemma_spec_fixtures import gemma3_reference, save_transformers
from .references.ltx2_spec_fixtures import TINY_CONNECTORS, connectors_reference, save_diffusers

ATOL = 2e-5  # fp32; observed ~1e-6
WORDS = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"w{i}" for i in range(60)]


def make_tokenizer(folder, with_bos: bool):
    """A tiny word-level tokenizer.json: Gemma 3-like (template adds <bos>) or Gemma 4-like (it does not)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if with_bos:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
         "padding_side": "left", "tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


@pytest.mark.parametrize("variant", sorted(TINY_CONNECTORS))
def test_connectors(variant, tmp_path):
    ref = connectors_reference(variant)
    save_diffusers(ref, tmp_path / "connectors")
    cfg = ConnectorsConfig.from_hf_config(dict(ref.config))
    params = unflatten(convert(load_spec("ltx2/connectors"), tmp_path, dtype="float32"))
    g = torch.Generator().manual_seed(0)
    features = torch.randn(2, 8, cfg.text_dim, generator=g) * 3
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :5] = 0  # left padding
    with torch.no_grad():
        want = ref(features, mask, padding_side="left")
    got = jax.jit(TextConnectors(cfg).apply)({"params": params}, jnp.asarray(features.numpy()),
                                              jnp.asarray(mask.numpy()))
    np.testing.assert_array_equal(np.asarray(got[2]), want[2].numpy())
    for g_, w in zip(got[:2], want[:2]):
        np.testing.assert_allclose(np.asarray(g_), w.numpy(), atol=ATOL, rtol=1e-5)


def test_prompt_chain_equals_pipeline(tmp_path):
    """diffusers-convention tokens -> Gemma 3 -> stacked states -> connectors, each stage equal to the
    pipeline's (its `_get_gemma_prompt_embeds` on the same tower, then its connectors)."""
    from diffusers import LTX2Pipeline
    from transformers import PreTrainedTokenizerFast

    tok_dir = make_tokenizer(tmp_path / "tokenizer", with_bos=True)
    gemma = gemma3_reference()
    connectors = connectors_reference_for(gemma)
    prompts = ["w1 w2 w3", "  w4 w5 w6 w7 w8 w9 w10  "]
    fake = types.SimpleNamespace(tokenizer=PreTrainedTokenizerFast.from_pretrained(tok_dir), text_encoder=gemma)
    with torch.no_grad():
        embeds, mask = LTX2Pipeline._get_gemma_prompt_embeds(fake, prompts, max_sequence_length=12, device="cpu",
                                                              dtype=torch.float32)
        want_video, want_audio, want_mask = connectors(embeds, mask, padding_side="left")

    batch = prompt_tokens(load_tokenizer(tok_dir), prompts, bos_id=2, bos="diffusers", max_length=12)
    np.testing.assert_array_equal(batch.attention_mask, mask.numpy())
    gcfg = GemmaConfig.from_hf_config(gemma.config.to_dict())
    gparams = unflatten(convert(load_spec("encoders/gemma"), save_transformers(gemma, tmp_path / "gemma"),
                                dtype="float32"))
    out = GemmaTextModel(gcfg).apply({"params": gparams}, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask))
    features = stack_hidden_states(out.hidden_states)
    valid = batch.attention_mask.astype(bool)
    np.testing.assert_allclose(np.asarray(features)[valid], embeds.numpy()[valid], atol=ATOL, rtol=1e-5)

    save_diffusers(connectors, tmp_path / "c" / "connectors")
    cparams = unflatten(convert(load_spec("ltx2/connectors"), tmp_path / "c", dtype="float32"))
    video, audio, out_mask = TextConnectors(ConnectorsConfig.from_hf_config(dict(connectors.config))).apply(
        {"params": cparams}, features, jnp.asarray(batch.attention_mask))
    np.testing.assert_array_equal(np.asarray(out_mask), want_mask.numpy())
    np.testing.assert_allclose(np.asarray(video), want_video.numpy(), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(audio), want_audio.numpy(), atol=ATOL, rtol=1e-5)


def connectors_reference_for(gemma):
    """Tiny LTX-2.0 connectors sized for the tiny Gemma 3 (16 wide, 3 layers + embeddings)."""
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    from .references.ltx2_spec_fixtures import perturbed

    text = gemma.config.text_config
    cfg = dict(TINY_CONNECTORS["2.0"], caption_channels=text.hidden_size, text_proj_in_factor=text.num_hidden_layers + 1,
               video_connector_num_learnable_registers=4, audio_connector_num_learnable_registers=4)
    torch.manual_seed(3)
    return perturbed(LTX2TextConnectors(**cfg), 4)


def test_bos_conventions(tmp_path):
    """Gemma 4-like tokenizer (no <bos> in its template): diffusers feeds none, Lightricks prepends one;
    Gemma 3-like: both agree."""
    g4 = load_tokenizer(make_tokenizer(tmp_path / "g4", with_bos=False))
    g3 = load_tokenizer(make_tokenizer(tmp_path / "g3", with_bos=True))
    prompts = ["w1 w2", "w3 w4 w5 w6 w7 w8 w9"]
    plain = prompt_tokens(g4, prompts, bos_id=2, bos="diffusers", max_length=6)
    official = prompt_tokens(g4, prompts, bos_id=2, bos="official", max_length=6)
    np.testing.assert_array_equal(plain.input_ids[0], [0, 0, 0, 0, 5, 6])  # w1 w2
    np.testing.assert_array_equal(official.input_ids[0], [0, 0, 0, 2, 5, 6])
    np.testing.assert_array_equal(official.attention_mask[0], [0, 0, 0, 1, 1, 1])
    # truncated first, then <bos> prepended and cut again (ltx_core's order): the last word goes
    np.testing.assert_array_equal(official.input_ids[1], [2, 7, 8, 9, 10, 11])
    for mode in ("diffusers", "official"):
        np.testing.assert_array_equal(prompt_tokens(g3, prompts, bos_id=2, bos=mode, max_length=6).input_ids,
                                      prompt_tokens(g3, prompts, bos_id=2, bos="official", max_length=6).input_ids)
