"""The HunyuanVideo 1.0 DiT (I2V token_replace, the model with every code path) under tensor, sequence
and data parallel meshes of 8 fake CPU devices, and streamed from host memory with its two block
kinds as two chunk pools, gives the one-device resident result."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from vidax.translator import convert
from vidax.zoo.hunyuan_video.config import TransformerConfig
from vidax.zoo.hunyuan_video.transformer import HunyuanVideoTransformer
from vidax.zoo.mesh import make_mesh
from vidax.zoo.offload import stream_blocks
from vidax.zoo.runtime import use_mesh
from vidax.zoo.sharding import TRANSFORMER_RULES, place

from tests.oracle import save_state, unflatten

from .hunyuan_video_spec_fixtures import dit_reference
from .test_transformer import make_inputs, our_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    # 4 heads: tp * sp = 4 splits them; 18 video tokens (sp = 4 pads them), 7 text tokens, batch 2
    ref = dit_reference(num_attention_heads=4, image_condition_type="token_replace")
    root = save_state(ref.state_dict(), tmp_path_factory.mktemp("hv_parallel") / "transformer").parent
    model = HunyuanVideoTransformer(TransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert("hunyuan_video/transformer", root, model.param_shapes(), dtype="float32")
    inputs = our_inputs(make_inputs())
    single = np.asarray(jax.jit(model.__call__)(unflatten(tree), *inputs))
    return model, tree, inputs, single


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (2, 2, 2)], ids=["sp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    model, tree, inputs, single = setup
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place(tree, model.logical_specs(), TRANSFORMER_RULES, mesh)
    if tp > 1:  # column-parallel q in both block kinds, the single blocks' MLP chunks too
        assert params["blocks"]["attn"]["to_q"]["kernel"].sharding.spec[2] == "tensor"
        assert params["single_blocks"]["proj_mlp"]["chunk_0"]["kernel"].sharding.spec[2] == "tensor"
        assert params["single_blocks"]["proj_out"]["chunk_0"]["kernel"].sharding.spec[1] == "tensor"
    with use_mesh(mesh, TRANSFORMER_RULES):
        out = np.asarray(jax.jit(model.__call__)(params, *inputs))
    np.testing.assert_allclose(out, single, atol=2e-5, rtol=1e-5)  # reduction order differs across shards


def test_streamed_offload_equals_resident(setup):
    """Chunks of one block from two pools, each arriving with its tp shardings, hidden state sp-split."""
    model, tree, inputs, single = setup
    mesh = make_mesh(1, 2, 2, devices=jax.devices()[:4])
    params, streamed, host = stream_blocks(model, tree, 1, TRANSFORMER_RULES, mesh)
    assert sorted(host) == ["blocks", "single_blocks"]  # one chunk pool per block kind
    assert host["blocks"].sizes == (1, 1) and host["single_blocks"].sizes == (1, 1)
    with use_mesh(mesh, TRANSFORMER_RULES):
        out = streamed(params, host, *inputs)
    np.testing.assert_allclose(np.asarray(out), single, atol=2e-5, rtol=1e-5)
