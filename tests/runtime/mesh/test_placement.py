"""Resident DiT placement: per-layer buffers on CPU run the same blocks as the scanned stack, without
the per-layer weight copies a scan's dots need there."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.dit import BlockGroup, per_layer, place_resident, scan_blocks
from vidax.zoo.compute.layers import Dense, LayerNorm

DEPTH, DIM = 3, 16


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, ctx):
        return x + Dense(x.shape[-1], ("mlp", "embed"))(jax.nn.gelu(LayerNorm()(x))) * ctx


class TwoGroups:
    """The part of the `StackedDiT` shape placement reads: the block groups."""

    block_groups = (BlockGroup("double", Block()), BlockGroup("single", Block()))


def _host_tree():
    block, x = Block(), jnp.zeros((1, 4, DIM))
    rng = np.random.default_rng(0)
    one = nn.unbox(block.init(jax.random.key(0), x, 1.0)["params"])
    stack = lambda: jax.tree.map(  # noqa: E731  every layer its own weights
        lambda a: rng.standard_normal((DEPTH, *a.shape)).astype(np.float32), one)
    return {"double": stack(), "single": stack(), "head": {"kernel": np.ones((DIM, 2), np.float32)}}


def test_per_layer_splits_every_group_into_views():
    host = _host_tree()
    split = per_layer(TwoGroups(), host)
    assert split["head"] is host["head"]
    for group in ("double", "single"):
        layers = split[group]
        assert isinstance(layers, tuple) and len(layers) == DEPTH
        for i, layer in enumerate(layers):
            kernel, stacked_kernel = layer["Dense_0"]["kernel"], host[group]["Dense_0"]["kernel"]
            np.testing.assert_array_equal(kernel, stacked_kernel[i])
            assert np.shares_memory(kernel, stacked_kernel)  # a view: nothing copied before placement


def test_per_layer_blocks_match_the_scanned_stack_and_read_weights_in_place():
    host = _host_tree()
    block = Block()
    x = jnp.asarray(np.random.default_rng(1).standard_normal((1, 4, DIM)), jnp.float32)
    run = jax.jit(lambda p, h: scan_blocks(block, p, h, 0.5))
    stacked, layers = jax.device_put(host["double"]), place_resident(TwoGroups(), host)["double"]
    assert isinstance(layers, tuple)  # CPU: per-layer buffers
    np.testing.assert_allclose(np.asarray(run(layers, x)), np.asarray(run(stacked, x)), rtol=1e-6, atol=1e-6)
    # the scan slices its weights out of the stack on every call; the per-layer program does not
    assert "dynamic-slice" in run.lower(stacked, x).compile().as_text()
    assert "dynamic-slice" not in run.lower(layers, x).compile().as_text()
