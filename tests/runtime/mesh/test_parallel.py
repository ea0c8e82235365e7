"""Every dp×tp×sp mesh that fits 8 fake devices gives the single-device output of the tiny DiT."""

import jax
import numpy as np
import pytest

from tests.runtime.tiny_dit import TinyConfig, TinyDiT
from vidax.zoo.parts.dit import forward
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.runtime import use_mesh
from vidax.zoo.compute.sharding import TRANSFORMER_RULES, cfg_batch, cfg_split, place

# 14 video tokens: sp=2 splits them evenly, sp=4 takes the padded-and-masked path.
COMBOS = [(dp, tp, sp) for dp in (1, 2) for tp in (1, 2, 4) for sp in (1, 2, 4) if dp * tp * sp <= 8]


@pytest.fixture(scope="module")
def setup():
    model = TinyDiT(TinyConfig())
    host = model.random_host_tree()
    rng = np.random.default_rng(1)
    inputs = (
        rng.normal(size=(2, 14, 4)).astype(np.float32),
        np.array([0.3, 0.7], np.float32),
        rng.normal(size=(2, 5, 16)).astype(np.float32),
        np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool),  # ragged text: padding masked
    )
    single = jax.jit(lambda p, *a: forward(model, p, *a))(jax.device_put(host, jax.devices()[0]), *inputs)
    return model, host, inputs, np.asarray(single)


def test_combinations_cover_the_grid():
    assert len(COMBOS) == 14 and (2, 2, 2) in COMBOS and (1, 4, 4) not in COMBOS


@pytest.mark.parametrize("dp,tp,sp", COMBOS, ids=[f"dp{d}-tp{t}-sp{s}" for d, t, s in COMBOS])
def test_mesh_equals_single_device(setup, dp, tp, sp):
    model, host, inputs, single = setup
    mesh = make_mesh(dp, tp, sp)
    with use_mesh(mesh, TRANSFORMER_RULES):
        params = place(host, model.specs(), TRANSFORMER_RULES, mesh)
        out = jax.jit(lambda p, *a: forward(model, p, *a))(params, *inputs)
    # fp32 at highest precision; only the reduction order of the sharded sums differs.
    np.testing.assert_allclose(np.asarray(out), single, atol=2e-6, rtol=1e-5)
    if sp == 2:  # 14 tokens split evenly: the hidden state stays sequence-split to the output
        assert out.sharding.spec[1] == "sequence"
    kernel = params["blocks"]["attn1"]["to_out_0"]["kernel"]
    assert kernel.addressable_shards[0].data.shape[1] == kernel.shape[1] // tp  # row-parallel split


def test_cfg_branches_run_on_the_data_axis(setup):
    model, host, (latents, t, text, mask), _ = setup
    uncond_text = np.zeros_like(text)
    run = jax.jit(lambda p, *a: forward(model, p, *a))
    one = jax.devices()[0]
    cond_ref = run(jax.device_put(host, one), latents[:1], t[:1], text[:1], mask[:1])
    uncond_ref = run(jax.device_put(host, one), latents[:1], t[:1], uncond_text[:1], mask[:1])
    mesh = make_mesh(dp=2)
    with use_mesh(mesh, TRANSFORMER_RULES):
        params = place(host, model.specs(), TRANSFORMER_RULES, mesh)

        @jax.jit
        def guided(p, latents, t, text, uncond_text, mask):
            batch = cfg_batch((latents, t, text, mask), (latents, t, uncond_text, mask))
            return forward(model, p, *batch)

        out = guided(params, latents[:1], t[:1], text[:1], uncond_text[:1], mask[:1])
    assert out.sharding.spec[0] == "data"  # each branch on its own device
    assert {s.data.shape[0] for s in out.addressable_shards} == {1}
    cond, uncond = cfg_split(np.asarray(out))
    np.testing.assert_allclose(cond, np.asarray(cond_ref), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(uncond, np.asarray(uncond_ref), atol=2e-6, rtol=1e-5)
