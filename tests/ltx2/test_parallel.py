"""The LTX-2 DiT under tensor, sequence and data parallel on 8 fake CPU devices, and with its blocks
streamed from host memory, gives the one-device result (tiny LTX-2.3-shaped reference, 4 heads per
stream so tp * sp = 4 splits them; 24 video tokens, 7 audio tokens padded by the attention)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.translator import convert, load_spec
from vidax.zoo.ltx2.config import TransformerConfig
from vidax.zoo.ltx2.sharding import DIT_RULES, place_transformer
from vidax.zoo.ltx2.transformer import LTX2Transformer
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.weights.offload import stream_blocks
from vidax.zoo.compute.runtime import use_mesh

from .references.ltx2_spec_fixtures import dit_reference, save_diffusers
from .test_transformer import make_inputs, our_inputs, tables, unflatten

TOL = dict(atol=2e-5, rtol=1e-5)  # reduction order differs across shards


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = dit_reference("2.3", num_attention_heads=4, attention_head_dim=4, audio_num_attention_heads=4,
                        audio_attention_head_dim=2)
    root = save_diffusers(ref, tmp_path_factory.mktemp("ltx2_parallel") / "transformer").parent
    model = LTX2Transformer(TransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert(load_spec("ltx2/transformer"), root, model.param_shapes(), dtype="float32")
    inputs = our_inputs(model.cfg, make_inputs(model.cfg))
    stg = np.ones((2, model.cfg.num_layers), np.float32)
    stg[1, 0] = 0.0  # one STG row: the perturbation path is sharded too
    inputs = inputs.replace(stg_keep=jnp.asarray(stg))
    single = jax.jit(model.__call__)(unflatten(tree), inputs, tables(model.cfg))
    return model, tree, inputs, [np.asarray(x) for x in single]


@pytest.mark.parametrize("dp,tp,sp", [(1, 1, 4), (1, 4, 1), (2, 2, 2)], ids=["sp4", "tp4", "dp2_tp2_sp2"])
def test_mesh_equals_one_device(setup, dp, tp, sp):
    model, tree, inputs, single = setup
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place_transformer(model, tree, mesh)
    assert params["blocks"]["attn1"]["to_q"]["kernel"].sharding.spec[2] == "tensor"
    assert params["blocks"]["audio_to_video_attn"]["to_out_0"]["kernel"].sharding.spec[1] == "tensor"
    with use_mesh(mesh, DIT_RULES):
        out = jax.jit(model.__call__)(params, inputs, tables(model.cfg))
    for got, want in zip(out, single):
        np.testing.assert_allclose(np.asarray(got), want, **TOL)


def test_streamed_offload_equals_resident(setup):
    """Blocks streamed one per chunk from host memory; the layer counter crosses chunk borders
    (the STG row perturbs block 0 only)."""
    model, tree, inputs, single = setup
    params, streamed, host = stream_blocks(model, tree, chunk=1, rules=DIT_RULES)
    out = streamed(params, host, inputs, tables(model.cfg))
    for got, want in zip(out, single):
        np.testing.assert_allclose(np.asarray(got), want, **TOL)
