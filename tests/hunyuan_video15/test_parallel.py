"""Sequence parallel (Ulysses on the joint text+video attention) and tensor parallel on 8 fake CPU
devices give the one-device result, for the DiT converted from a tiny diffusers reference."""

from __future__ import annotations

import pytest
from vidax.translator import convert, load_spec
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig
from vidax.zoo.hunyuan_video15.sharding import DIT_RULES

from tests.oracle import save_diffusers
from tests.parallel_checks import assert_mesh_equals_one_device, one_device

from .hunyuan_spec_fixtures import dit_reference
from .test_transformer import make_inputs, our_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = dit_reference(num_attention_heads=4)  # tp * sp = 4 splits the heads; 72 video tokens
    root = save_diffusers(ref, tmp_path_factory.mktemp("hv15_parallel") / "transformer").parent
    model = HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert(load_spec("hunyuan_video15/transformer"), root, model.param_shapes())
    inputs = our_inputs(make_inputs(image=True))
    return model, tree, inputs, one_device(model, tree, inputs)


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 4, 1), (2, 2, 2)], ids=["sp4", "tp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    assert_mesh_equals_one_device(*setup, DIT_RULES, (dp, tp, sp),
                                  {"blocks/attn/to_q/kernel": 2})  # column-parallel q projection (a no-op axis at tp=1)
