"""The Cosmos-Predict2.5 DiT under tensor, sequence and data parallel on 8 fake CPU devices, and with
its blocks streamed from host memory, gives the one-device result (converted from a tiny diffusers
reference with 4 heads, so tp * sp = 4 splits them; 18 video tokens, padded under sp = 4)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from vidax.translator import convert, load_spec
from vidax.zoo.cosmos import CosmosTransformer, CosmosTransformerConfig
from vidax.zoo.cosmos.sharding import DIT_RULES
from vidax.zoo.mesh import make_mesh
from vidax.zoo.offload import stream_blocks
from vidax.zoo.runtime import use_mesh
from vidax.zoo.sharding import place_model

from tests.oracle import save_diffusers, unflatten

from .cosmos_spec_fixtures import dit_reference
from .test_transformer import make_inputs, our_inputs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = dit_reference(num_attention_heads=4)
    root = save_diffusers(ref, tmp_path_factory.mktemp("cosmos_parallel") / "transformer").parent
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert(load_spec("cosmos/transformer"), root, model.param_shapes(), dtype="float32")
    inputs = our_inputs(make_inputs(per_frame=True))
    single = np.asarray(jax.jit(model.__call__)(unflatten(tree), *inputs))
    return model, tree, inputs, single


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 4, 1), (2, 2, 2)], ids=["sp4", "tp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    model, tree, inputs, single = setup
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place_model(model, tree, DIT_RULES, mesh)
    assert params["blocks"]["attn1"]["to_q"]["kernel"].sharding.spec[2] == "tensor"  # column-parallel q (no-op at tp=1)
    with use_mesh(mesh, DIT_RULES):
        out = np.asarray(jax.jit(model.__call__)(params, *inputs))
    np.testing.assert_allclose(out, single, atol=2e-5, rtol=1e-5)  # reduction order differs across shards


@pytest.mark.parametrize("mesh_shape", [None, (1, 2, 2)], ids=["one_device", "tp2_sp2"])
def test_streamed_offload_equals_resident(setup, mesh_shape):
    model, tree, inputs, single = setup
    mesh = None if mesh_shape is None else make_mesh(*mesh_shape)
    params, streamed, host = stream_blocks(model, tree, chunk=1, rules=DIT_RULES, mesh=mesh)
    if mesh is None:
        out = streamed(params, host, *inputs)
    else:
        with use_mesh(mesh, DIT_RULES):
            out = streamed(params, host, *inputs)
    np.testing.assert_allclose(np.asarray(out), single, atol=2e-5, rtol=1e-5)
