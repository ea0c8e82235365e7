"""The Cosmos3 DiT under tensor, sequence and data parallel on 8 fake CPU devices, and with its layers
streamed from host memory, gives the one-device result (Edge backbone, 4 heads / 2 key-value heads,
CFG's two padded prompts, 18 video tokens padded under sp = 4)."""

from __future__ import annotations

import pytest
from vidax.translator import convert, load_spec
from vidax.zoo.cosmos3 import Cosmos3Transformer, Cosmos3TransformerConfig
from vidax.zoo.cosmos3.sharding import DIT_RULES

from tests.oracle import save_diffusers
from tests.parallel_checks import assert_mesh_equals_one_device, assert_streamed_equals_resident, one_device

from .cosmos3_spec_fixtures import dit_reference
from .test_transformer import make_inputs, our_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = dit_reference("edge")
    root = save_diffusers(ref, tmp_path_factory.mktemp("cosmos3_parallel") / "transformer").parent
    model = Cosmos3Transformer(Cosmos3TransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert(load_spec("cosmos3/transformer"), root, model.param_shapes(), dtype="float32")
    case = type("Case", (), {"model": model})()
    inputs = our_inputs(case, *make_inputs())
    return model, tree, inputs, one_device(model, tree, inputs)


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 2, 1), (2, 2, 2)], ids=["sp4", "tp2", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    assert_mesh_equals_one_device(*setup, DIT_RULES, (dp, tp, sp), {"blocks/self_attn/add_q_proj/kernel": 2})


@pytest.mark.parametrize("mesh_shape", [None, (2, 1, 2)], ids=["one_device", "dp2_sp2"])
def test_streamed_offload_equals_resident(setup, mesh_shape):
    assert_streamed_equals_resident(*setup, DIT_RULES, mesh_shape)
