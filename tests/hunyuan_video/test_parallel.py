"""The HunyuanVideo 1.0 DiT (I2V token_replace, the model with every code path) under tensor, sequence
and data parallel meshes of 8 fake CPU devices, and streamed from host memory with its two block
kinds as two chunk pools, gives the one-device resident result."""

from __future__ import annotations

import jax
import pytest

from vidax.translator import convert
from vidax.zoo.hunyuan_video.config import TransformerConfig
from vidax.zoo.hunyuan_video.transformer import HunyuanVideoTransformer
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.sharding import TRANSFORMER_RULES

from tests.oracle import save_state
from tests.parallel_checks import assert_mesh_equals_one_device, assert_streamed_equals_resident, one_device

from .hunyuan_video_spec_fixtures import dit_reference
from .test_transformer import make_inputs, our_inputs

# column-parallel q in both block kinds, the single blocks' MLP chunks too
TENSOR_AXES = {"blocks/attn/to_q/kernel": 2, "single_blocks/proj_mlp/chunk_0/kernel": 2,
               "single_blocks/proj_out/chunk_0/kernel": 1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    # 4 heads: tp * sp = 4 splits them; 18 video tokens (sp = 4 pads them), 7 text tokens, batch 2
    ref = dit_reference(num_attention_heads=4, image_condition_type="token_replace")
    root = save_state(ref.state_dict(), tmp_path_factory.mktemp("hv_parallel") / "transformer").parent
    model = HunyuanVideoTransformer(TransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert("hunyuan_video/transformer", root, model.param_shapes(), dtype="float32")
    inputs = our_inputs(make_inputs())
    return model, tree, inputs, one_device(model, tree, inputs)


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (2, 2, 2)], ids=["sp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    assert_mesh_equals_one_device(*setup, TRANSFORMER_RULES, (dp, tp, sp), TENSOR_AXES if tp > 1 else {})


def test_streamed_offload_equals_resident(setup):
    """Chunks of one block from two pools, each arriving with its tp shardings, hidden state sp-split."""
    mesh = make_mesh(1, 2, 2, devices=jax.devices()[:4])
    host = assert_streamed_equals_resident(*setup, TRANSFORMER_RULES, mesh)
    assert sorted(host) == ["blocks", "single_blocks"]  # one chunk pool per block kind
    assert host["blocks"].sizes == (1, 1) and host["single_blocks"].sizes == (1, 1)
