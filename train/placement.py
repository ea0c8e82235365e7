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


def streamed(path: str, ndim: int) -> bool:
    """Whether `--offload` keeps a block leaf in host memory: the stacked linear kernels (nearly all of a DiT's
    bytes). Small tables stay on the device (XLA's TPU compiler lays some out differently in host memory)."""
    return path.endswith("/kernel") and ndim == 3


def split_blocks(blocks: dict) -> tuple[dict, dict]:
    """(streamed leaves, the rest) of a stacked block tree, flat `a/b/kernel` paths."""
    flat = traverse_util.flatten_dict(blocks, sep="/")
    host = {k: v for k, v in flat.items() if streamed(k, v.ndim)}
    return host, {k: v for k, v in flat.items() if k not in host}


def place_base(model, tree, mesh, rules, weights_dtype: str | None = None, stream: bool = False):
    """The frozen DiT's host tree on the devices (`--weights-dtype int8/fp8`: block kernels quantized per output
    channel, `vidax.zoo.weights.quantize`, which the zoo's `Dense` dequantizes inside its product). `stream`: the
    blocks in the device's pinned host memory (where it has one), brought over block by block in the step."""
    from vidax.train.objective import host_memory
    from vidax.zoo.weights.quantize import device_specs, device_weights

    tree = device_weights(tree, ("blocks",), weights_dtype)
    if mesh is None:
        params = traverse_util.unflatten_dict(dict(tree), sep="/")
        if not stream or host_memory() is None:
            return jax.device_put(params)
        from jax.sharding import SingleDeviceSharding

        host = SingleDeviceSharding(jax.devices()[0], memory_kind=host_memory())
        kernels, small = split_blocks(params["blocks"])
        blocks = {**jax.device_put(small), **jax.device_put(kernels, host)}
        rest = {k: v for k, v in params.items() if k != "blocks"}
        return {**jax.device_put(rest), "blocks": traverse_util.unflatten_dict(blocks, sep="/")}
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
