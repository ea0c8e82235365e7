"""The Cosmos-Predict2.5 DiT under tensor, sequence and data parallel on 8 fake CPU devices, and with
its blocks streamed from host memory, gives the one-device result (converted from a tiny diffusers
reference with 4 heads, so tp * sp = 4 splits them; 18 video tokens, padded under sp = 4)."""

from __future__ import annotations

import pytest
from vidax.translator import convert, load_spec
from vidax.zoo.cosmos import CosmosTransformer, CosmosTransformerConfig
from vidax.zoo.cosmos.sharding import DIT_RULES

from tests.oracle import save_diffusers
from tests.parallel_checks import assert_mesh_equals_one_device, assert_streamed_equals_resident, one_device

from .cosmos_spec_fixtures import dit_reference
from .test_transformer import make_inputs, our_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = dit_reference(num_attention_heads=4)
    root = save_diffusers(ref, tmp_path_factory.mktemp("cosmos_parallel") / "transformer").parent
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert(load_spec("cosmos/transformer"), root, model.param_shapes(), dtype="float32")
    inputs = our_inputs(make_inputs(per_frame=True))
    return model, tree, inputs, one_device(model, tree, inputs)


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 4, 1), (2, 2, 2)], ids=["sp4", "tp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    assert_mesh_equals_one_device(*setup, DIT_RULES, (dp, tp, sp),
                                  {"blocks/attn1/to_q/kernel": 2})  # column-parallel q (no-op at tp=1)


@pytest.mark.parametrize("mesh_shape", [None, (1, 2, 2)], ids=["one_device", "tp2_sp2"])
def test_streamed_offload_equals_resident(setup, mesh_shape):
    assert_streamed_equals_resident(*setup, DIT_RULES, mesh_shape)
