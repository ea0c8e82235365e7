"""The Cosmos3 DiT under tensor, sequence and data parallel on 8 fake CPU devices, and with its layers
streamed from host memory, gives the one-device result (Edge backbone, 4 heads / 2 key-value heads,
CFG's two padded prompts, 18 video tokens padded under sp = 4)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax.traverse_util import unflatten_dict
from vidax.translator import convert, load_spec
from vidax.zoo.cosmos3 import Cosmos3Transformer, Cosmos3TransformerConfig
from vidax.zoo.cosmos3.sharding import DIT_RULES
from vidax.zoo.mesh import make_mesh
from vidax.zoo.offload import stream_blocks
from vidax.zoo.runtime import use_mesh
from vidax.zoo.sharding import place_model

from tests.oracle import save_diffusers

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
    params = unflatten_dict({k: np.asarray(v) for k, v in tree.items()}, sep="/")
    single = np.asarray(jax.jit(model.__call__)(params, *inputs))
    return model, tree, inputs, single


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 2, 1), (2, 2, 2)], ids=["sp4", "tp2", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    model, tree, inputs, single = setup
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place_model(model, tree, DIT_RULES, mesh)
    assert params["blocks"]["self_attn"]["add_q_proj"]["kernel"].sharding.spec[2] == "tensor"
    with use_mesh(mesh, DIT_RULES):
        out = np.asarray(jax.jit(model.__call__)(params, *inputs))
    np.testing.assert_allclose(out, single, atol=2e-5, rtol=1e-5)  # reduction order differs across shards


@pytest.mark.parametrize("mesh_shape", [None, (2, 1, 2)], ids=["one_device", "dp2_sp2"])
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
