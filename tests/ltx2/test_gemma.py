"""Gemma 3 / Gemma 4 text towers against transformers, through the real spec: every hidden state at
every valid position of a left-padded batch (the LTX prompts are left-padded)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.parts.encoders.gemma import GemmaConfig, GemmaTextModel

from tests.oracle import unflatten

from tests.encoders.gemma_spec_fixtures import gemma3_reference, gemma4_reference, save_transformers

ATOL = 2e-5  # fp32 through a few layers; observed ~1e-6


@pytest.mark.parametrize("build", [gemma3_reference, gemma4_reference], ids=["gemma3", "gemma4"])
def test_every_hidden_state(build, tmp_path):
    ref = build()
    cfg = GemmaConfig.from_hf_config(ref.config.to_dict())
    params = unflatten(convert(load_spec("encoders/gemma"), save_transformers(ref, tmp_path), dtype="float32"))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 90, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :4] = 0  # left padding, as the LTX pipeline pads
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    out = jax.jit(GemmaTextModel(cfg).apply)({"params": params}, jnp.asarray(ids.numpy()), jnp.asarray(mask.numpy()))
    assert out.hidden_states.shape[0] == len(want) == cfg.num_hidden_layers + 1
    valid = mask.numpy().astype(bool)
    for layer, w in enumerate(want):
        np.testing.assert_allclose(np.asarray(out.hidden_states[layer])[valid], w.numpy()[valid], atol=ATOL, rtol=1e-5,
                                   err_msg=f"hidden state {layer}")
    np.testing.assert_allclose(np.asarray(out.last_hidden_state)[valid], want[-1].numpy()[valid], atol=ATOL, rtol=1e-5)
