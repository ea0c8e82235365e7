"""Streamed offload gives exactly the resident output, for any chunk size, also under a mesh."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from vidax.zoo.parts.dit import forward
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.weights.offload import StreamedDiT, chunk_bounds
from vidax.zoo.compute.runtime import use_mesh

from .toy_dit import ToyDiT, block_shardings


@pytest.fixture(scope="module")
def toy():
    model = ToyDiT(depth=5)
    x = jax.random.normal(jax.random.key(1), (2, 24, model.channels))
    t = jax.random.normal(jax.random.key(2), (2, 16))
    params = model.init(jax.random.key(0), x, t)
    resident = jax.jit(lambda p, x, t: forward(model, p, x, t))(params, x, t)
    return model, params, x, t, np.asarray(resident)


def test_chunk_bounds_cover_depth_with_at_most_two_sizes():
    assert chunk_bounds(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds(5, 9) == [(0, 5)]
    with pytest.raises(ValueError, match="at least 1"):
        chunk_bounds(5, 0)


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_streamed_equals_resident(toy, chunk):
    model, params, x, t, resident = toy
    params = dict(params)
    streamed = StreamedDiT(model, chunk)
    host = streamed.offload({"blocks": jax.tree.map(np.asarray, params.pop("blocks"))})
    assert len(set(host["blocks"].sizes)) <= 2 and host["blocks"].depth == model.depth
    out = streamed(params, host, x, t)
    np.testing.assert_array_equal(np.asarray(out), resident)


@pytest.mark.parametrize("tp, sp", [(2, 1), (1, 2), (2, 2)])
def test_streamed_equals_resident_under_a_mesh(toy, tp, sp):
    """Each chunk arrives with its tensor-parallel shardings (devices get only their shard), the
    hidden state stays sequence-split, and the result is bit-identical to the resident run."""
    model, params, x, t, _ = toy
    mesh = make_mesh(dp=1, tp=tp, sp=sp, devices=jax.devices()[: tp * sp])
    blocks = jax.tree.map(np.asarray, params["blocks"])
    others = {k: v for k, v in params.items() if k != "blocks"}
    shardings = block_shardings(mesh, blocks)
    x = jax.device_put(x, NamedSharding(mesh, P(None, "sequence")))
    with use_mesh(mesh):
        resident = jax.jit(lambda p, x, t: forward(model, p, x, t))({**others, "blocks": jax.device_put(blocks, shardings)}, x, t)
        streamed = StreamedDiT(model, 2, device_shardings={"blocks": shardings})
        host = streamed.offload({"blocks": blocks})
        q = streamed._fetch("blocks", host["blocks"].chunks[0])["to_q"]["kernel"]
        assert {s.data.shape for s in q.addressable_shards} == {(2, model.dim, model.dim // tp)}
        out = streamed(others, host, x, t)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(resident))
