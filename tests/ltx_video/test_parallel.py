"""The LTX DiT sharded over 8 fake CPU devices (dp, tp, sp and their products) equals one device, and the
streamed-offload runner under a mesh equals it too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from vidax.translator import convert
from vidax.zoo.ltx_video import rope
from vidax.zoo.ltx_video.config import TransformerConfig
from vidax.zoo.ltx_video.sharding import DIT_RULES, place_transformer
from vidax.zoo.ltx_video.transformer import LTXVideoTransformer
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.weights.offload import stream_blocks
from vidax.zoo.compute.runtime import use_mesh

from .references.ltx_spec_fixtures import dit_reference, diffusers_config, save

GRID = (2, 3, 5)  # 30 tokens: not a multiple of sp = 4 (the entry point pads and masks)
_forward = jax.jit(lambda model, params, *inputs: model(params, *inputs), static_argnums=0)


@pytest.fixture(scope="module")
def sharded_case(tmp_path_factory):
    """8 heads (tp x sp up to 8), width 64 (4 unrotated channels), per-token timesteps, batch 2 for dp."""
    ref = dit_reference(seed=3, num_attention_heads=8, attention_head_dim=8, cross_attention_dim=64)
    root = tmp_path_factory.mktemp("ltx_sharded")
    save(ref.state_dict(), root / "transformer", diffusers_config(ref, "LTXVideoTransformer3DModel"))
    model = LTXVideoTransformer(TransformerConfig.from_hf_config(dict(ref.config)))
    tree = convert("ltx_video/transformer", root, model.param_shapes(), dtype="float32")
    rng = np.random.default_rng(3)
    tokens = int(np.prod(GRID))
    cfg = model.cfg
    mask = np.ones((2, 9), np.float32)
    mask[1, 5:] = 0
    cos, sin = rope.rope_tables(rope.grid_coords(1, *GRID, cfg, frame_rate=25), cfg)
    inputs = (jnp.asarray(rng.normal(size=(2, tokens, cfg.in_channels)), jnp.float32),
              jnp.asarray(rng.normal(size=(2, 9, cfg.caption_channels)), jnp.float32), jnp.asarray(mask),
              jnp.broadcast_to(jnp.linspace(0.0, 999.0, tokens), (2, tokens)), cos, sin)
    one_device = _forward(model, jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/")), *inputs)
    return model, tree, inputs, np.asarray(one_device)


@pytest.mark.parametrize("dp, tp, sp", [(2, 2, 2), (1, 2, 4), (1, 8, 1), (2, 1, 4)])
def test_sharded_equals_one_device(sharded_case, dp, tp, sp):
    model, tree, inputs, want = sharded_case
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place_transformer(model, tree, mesh)
    if tp > 1:
        assert params["blocks"]["attn1"]["to_q"]["kernel"].sharding.spec[-1] == "tensor"
        assert params["blocks"]["ff"]["net_2"]["kernel"].sharding.spec[1] == "tensor"  # row-parallel
    with use_mesh(mesh, DIT_RULES):
        got = _forward(model, params, *inputs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_streamed_offload_under_a_mesh_equals_one_device(sharded_case):
    model, tree, inputs, want = sharded_case
    mesh = make_mesh(dp=1, tp=2, sp=2)
    with use_mesh(mesh, DIT_RULES):
        params, streamed, host = stream_blocks(model, tree, chunk=1, rules=DIT_RULES, mesh=mesh)
        got = streamed(params, host, *inputs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
