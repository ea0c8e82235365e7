"""The CogVideoX DiT under tensor parallel, sequence parallel and both composed on one mesh (8 fake
CPU devices), and with its blocks streamed from host memory, equals the one-device result.

The tiny 1.5 I2V reference (RoPE, ofs) has 8 heads so that tp x sp up to 8 splits them; its 24 video
tokens split evenly up to sp 8, and the 7 text tokens stay whole on every device.
"""

from __future__ import annotations

import pytest
from vidax.translator import convert, load_spec
from vidax.zoo.cogvideox.config import CogVideoXTransformerConfig
from vidax.zoo.cogvideox.sharding import DIT_RULES
from vidax.zoo.cogvideox.transformer import CogVideoXTransformer

from tests.oracle import save_diffusers
from tests.parallel_checks import assert_mesh_equals_one_device, assert_streamed_equals_resident, one_device

from . import cogvideox_spec_fixtures as fx
from .test_transformer import make_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = fx.dit_reference("15_i2v", seed=5, num_attention_heads=8)
    root = tmp_path_factory.mktemp("parallel")
    save_diffusers(ref, root / "transformer")
    model = CogVideoXTransformer(CogVideoXTransformerConfig.from_hf_config(fx.config_json(ref)))
    tree = convert(load_spec("cogvideox/transformer15"), root, model.param_shapes(), dtype="float32")
    _, inputs = make_inputs(ref, (4, 8, 6), seed=5)
    return model, tree, inputs, one_device(model, tree, inputs)


@pytest.mark.parametrize("dp, tp, sp", [(1, 1, 4), (1, 4, 1), (1, 2, 4), (2, 2, 2)],
                         ids=["sp4", "tp4", "tp2_sp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    assert_mesh_equals_one_device(*setup, DIT_RULES, (dp, tp, sp),
                                  {"blocks/attn1/to_q/kernel": -1})  # column-parallel (size-1 axis at tp=1)


@pytest.mark.parametrize("mesh_degrees", [None, (1, 2, 2)], ids=["one_device", "tp2_sp2"])
def test_streamed_offload_equals_resident(setup, mesh_degrees):
    """`vidax.zoo.weights.offload` streams the blocks one per chunk (2 chunks) through the same embed/block/head."""
    host = assert_streamed_equals_resident(*setup, DIT_RULES, mesh_degrees)
    assert host["blocks"].sizes == (1, 1)
