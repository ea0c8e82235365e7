"""The bodies of the checks every DiT family runs on the 8 fake CPU devices: the model placed on a
(dp, tp, sp) mesh, and its blocks streamed from host memory, give the one-device resident output.

Each family's test_parallel.py builds the model, its converted tree and inputs once (a module
fixture) and parametrises these over its meshes.
"""

from __future__ import annotations

import contextlib
import functools
import operator

import jax
import numpy as np
from jax.sharding import Mesh
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.weights.offload import stream_blocks
from vidax.zoo.compute.runtime import use_mesh
from vidax.zoo.compute.sharding import place_model

from tests.oracle import unflatten

TOL = dict(atol=2e-5, rtol=1e-5)  # reduction order differs across shards


def one_device(model, tree: dict, inputs: tuple) -> np.ndarray:
    """The output of `model` on the converted flat `tree`, resident on one device."""
    return np.asarray(jax.jit(model.__call__)(unflatten(tree), *inputs))


def assert_mesh_equals_one_device(model, tree: dict, inputs: tuple, single: np.ndarray, rules,
                                  mesh_shape: tuple[int, int, int], tensor_axes: dict[str, int]) -> None:
    """`model` placed under `rules` on a (dp, tp, sp) mesh gives `single`. `tensor_axes` (leaf path ->
    axis) name leaves that must be split on the tensor mesh axis (a size-1 axis at tp = 1)."""
    mesh = make_mesh(*mesh_shape)
    params = place_model(model, tree, rules, mesh)
    for path, axis in tensor_axes.items():
        leaf = functools.reduce(operator.getitem, path.split("/"), params)
        assert leaf.sharding.spec[axis] == "tensor", path
    with use_mesh(mesh, rules):
        out = np.asarray(jax.jit(model.__call__)(params, *inputs))
    np.testing.assert_allclose(out, single, **TOL)


def assert_streamed_equals_resident(model, tree: dict, inputs: tuple, single: np.ndarray, rules,
                                    mesh: Mesh | tuple[int, int, int] | None = None) -> dict:
    """The blocks streamed from host memory one per chunk give `single`: on one device, or on `mesh`
    (a mesh or its (dp, tp, sp)). Returns the host chunk pools, one per block group."""
    mesh = make_mesh(*mesh) if isinstance(mesh, tuple) else mesh
    params, streamed, host = stream_blocks(model, tree, 1, rules, mesh)
    with use_mesh(mesh, rules) if mesh is not None else contextlib.nullcontext():
        out = streamed(params, host, *inputs)
    np.testing.assert_allclose(np.asarray(out), single, **TOL)
    return host
