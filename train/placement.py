"""Where a run's arrays go: its mesh (`--dp/--tp/--sp`), the frozen DiT placed under the family's rules (its block
kernels 8-bit with `--weights-dtype`), and each batch split over the data axis."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec


def make_run_mesh(dp: int, tp: int, sp: int):
    """The run's mesh (None on one device)."""
    from vidax.zoo.compute.mesh import make_mesh

    return make_mesh(dp, tp, sp) if dp * tp * sp > 1 else None


def place_base(model, tree, mesh, rules, weights_dtype: str | None = None):
    """The frozen DiT's host tree on the devices (`--weights-dtype int8/fp8`: block kernels quantized per output
    channel, `vidax.zoo.weights.quantize`, which the zoo's `Dense` dequantizes inside its product)."""
    from vidax.zoo.weights.quantize import device_specs, device_weights

    tree = device_weights(tree, ("blocks",), weights_dtype)
    if mesh is None:
        return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))
    from vidax.zoo.compute.sharding import place

    return place(tree, device_specs(model.logical_specs(), tree), rules, mesh)


def place_batch(mesh, batch: dict) -> dict:
    """A batch's arrays on the devices, rows split over the data axis under a mesh."""
    if mesh is None:
        return {k: jnp.asarray(v) for k, v in batch.items()}
    rows_on_data = NamedSharding(mesh, PartitionSpec("data"))
    return {k: jax.device_put(v, rows_on_data) for k, v in batch.items()}


def mesh_context(mesh, rules):
    """`use_mesh` of the run's mesh and DiT rules (nothing on one device)."""
    from vidax.zoo.compute.runtime import use_mesh

    return use_mesh(mesh, rules) if mesh is not None else contextlib.nullcontext()
