"""Logical axis names -> mesh axes, and placement of host trees on the mesh.

Parameters carry logical names (`zoo/compute/layers.py`: `Dense(axes=...)`, `logical_param`); activations
get them through `constrain`. A component's rules table maps each name to a mesh axis of
`vidax.zoo.compute.mesh` (or None: replicated); names absent from a table are replicated. Tables are short
and name each logical axis once. Where sequence parallel splits and gathers is data too: the
hidden state is split on "seq" -> "sequence" after the patch embedding and gathered by the head;
inside attention the entry point switches to heads and back (Ulysses, `zoo/compute/attention.py`).

Placement (`place`) turns a host tree (the translator's output) into device arrays in one step:
one `jax.device_put` of the whole tree under its shardings, or, for trees read from mmap,
`jax.make_array_from_callback` per leaf so that each device (each host under jax.distributed)
reads only its own slice from disk. Never `jnp.asarray` a weight first: that puts a full copy on
one chip.
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vidax.zoo.compute.mesh import DATA, SEQUENCE, TENSOR, MeshError, valid_degrees
from vidax.zoo.compute.transfer import to_devices
from vidax.zoo.compute.runtime import TRANSFORMER_RULES, Rules, active_mesh, active_rules  # noqa: F401 (the shared DiT table, defined beside use_mesh, its default)

# Token activations `[B, S, D]` by what they hold: sequence parallel splits the video tokens; text (and
# other short streams) stays whole on every device.
VIDEO_AXES = ("batch", "seq", "act_embed")
TEXT_AXES = ("batch", "text_seq", "act_embed")

# Text encoders run once per prompt: Megatron only, text tokens never split.
TEXT_ENCODER_RULES: Rules = (("batch", DATA), ("heads", TENSOR), ("mlp", TENSOR), ("vocab", None))
# VAEs are convolutional: weights replicated, the batch (and CFG-free decode chunks) on data.
VAE_RULES: Rules = (("batch", DATA), ("conv_in", None), ("conv_out", None))


class ShardingError(MeshError):
    """A host tree, spec or rules table that cannot be placed on the mesh."""


def check_rules(rules: Rules) -> Rules:
    """Validate a rules table: each logical name once, mesh axes from the known vocabulary."""
    names = [logical for logical, _ in rules]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ShardingError(f"rules table names {', '.join(repeated)} more than once")
    known = {DATA, TENSOR, SEQUENCE, None}
    for logical, target in rules:
        for axis in target if isinstance(target, tuple) else (target,):
            if axis not in known:
                raise ShardingError(f"rule {logical!r} -> {axis!r}: mesh axes are {DATA}, {TENSOR}, {SEQUENCE}")
    return rules


# --- logical specs ---------------------------------------------------------------------------


def logical_specs(module: nn.Module, *example_inputs: Any, **kwargs: Any) -> dict:
    """Logical PartitionSpecs of `module`'s params, from an abstract init (no memory used).

    Args:
      module: a linen module whose params are declared with logical names.
      *example_inputs: arrays or `jax.ShapeDtypeStruct`s it is called with.
      **kwargs: keyword inputs of its `__call__`.
    """
    abstract = jax.eval_shape(lambda *a: module.init(jax.random.key(0), *a, **kwargs), *example_inputs)
    return nn.get_partition_spec(abstract["params"])


def stack_specs(block_specs: Any) -> Any:
    """Specs of stacked block params (zoo/parts/dit.py: params["blocks"]): a leading "layers" axis.

    Args:
      block_specs: one block's logical specs (`logical_specs(model.block, ...)`) or its abstract
        boxed params.
    """
    return jax.tree.map(lambda s: PartitionSpec("layers", *s), _as_logical_specs(block_specs), is_leaf=_is_spec)


def _is_spec(x: Any) -> bool:
    return isinstance(x, PartitionSpec)


def _as_logical_specs(specs_or_boxed: Any) -> Any:
    """Accept logical PartitionSpecs, or abstract boxed params (`nn.Partitioned` leaves)."""
    leaves = jax.tree.leaves(specs_or_boxed, is_leaf=lambda x: _is_spec(x) or isinstance(x, nn.Partitioned))
    if leaves and all(_is_spec(x) for x in leaves):
        return specs_or_boxed
    return nn.get_partition_spec(specs_or_boxed)


def to_mesh_spec(logical: PartitionSpec | tuple, rules: Rules) -> PartitionSpec:
    """Logical PartitionSpec -> mesh PartitionSpec under `rules`."""
    return nn.logical_to_mesh_axes(tuple(logical), rules)


def mesh_shardings(specs: Any, rules: Rules, mesh: Mesh) -> Any:
    """The tree of NamedShardings for logical specs (or abstract boxed params) under `rules`."""
    logical = _as_logical_specs(specs)
    return jax.tree.map(lambda s: NamedSharding(mesh, to_mesh_spec(s, rules)), logical, is_leaf=_is_spec)


# --- placement -------------------------------------------------------------------------------


def _nested(tree: Mapping) -> dict:
    """Flat `{"a/b": x}` or nested dicts -> nested dicts."""
    if tree and all(isinstance(k, str) and not isinstance(v, Mapping) for k, v in tree.items()):
        if any("/" in k for k in tree):
            return traverse_util.unflatten_dict(dict(tree), sep="/")
    return {k: _nested(v) if isinstance(v, Mapping) else v for k, v in tree.items()}


def _is_mapped(leaf: Any) -> bool:
    """True for arrays that live in a file (np.memmap, views into mmap) or lazy array-likes."""
    if not isinstance(leaf, np.ndarray):
        return not isinstance(leaf, jax.Array)
    base = leaf
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        if isinstance(base, memoryview):
            return isinstance(base.obj, mmap.mmap)
        base = getattr(base, "base", None)
    return False


def _check_layout(tree: dict, logical: dict, shardings: dict, mesh: Mesh) -> None:
    """All faults at once: missing/extra leaves, and sharded dims the mesh does not divide."""
    flat_tree = traverse_util.flatten_dict(tree, sep="/")
    flat_specs = traverse_util.flatten_dict(logical, sep="/")
    flat_shard = traverse_util.flatten_dict(shardings, sep="/")
    problems = [f"missing from the host tree: {p}" for p in sorted(set(flat_specs) - set(flat_tree))]
    problems += [f"not in the model: {p}" for p in sorted(set(flat_tree) - set(flat_specs))]
    for path in sorted(set(flat_tree) & set(flat_specs)):
        shape = tuple(flat_tree[path].shape)
        spec = flat_shard[path].spec
        if len(spec) > len(shape):
            problems.append(f"{path}: shape {shape} has fewer axes than its spec {flat_specs[path]}")
            continue
        for dim, axes in zip(shape, spec):
            axes = axes if isinstance(axes, tuple) else (axes,)
            ways = int(np.prod([mesh.shape[a] for a in axes if a is not None]))
            if dim % ways:
                problems.append(
                    f"{path}: dimension {dim} cannot be split {ways} ways over {axes}; "
                    f"valid degrees: {', '.join(map(str, valid_degrees(dim)))}"
                )
    if problems:
        raise ShardingError("cannot place the host tree: " + "; ".join(problems))


def place(host_tree: Mapping, specs: Any, rules: Rules, mesh: Mesh, *, lazy: bool | None = None) -> dict:
    """Place a whole host tree on `mesh` under the shardings `rules` give its logical specs.

    Args:
      host_tree: flat `{"a/b/kernel": array}` or nested dict of NumPy arrays (or mmapped views).
      specs: logical PartitionSpecs (`logical_specs`, `stack_specs`) or abstract boxed params.
      rules: the component's rules table.
      mesh: from `make_mesh`.
      lazy: build each array from per-device slices (`jax.make_array_from_callback`) instead of
        one `jax.device_put`; default: when any leaf is backed by a file.
    Returns:
      The nested dict of sharded `jax.Array`s.
    """
    check_rules(rules)
    tree = _nested(host_tree)
    logical = _as_logical_specs(specs)
    shardings = mesh_shardings(logical, rules, mesh)
    _check_layout(tree, logical, shardings, mesh)
    if lazy is None:
        lazy = any(_is_mapped(leaf) for leaf in jax.tree.leaves(tree))
    if not lazy:
        return to_devices(tree, shardings)
    return jax.tree.map(_from_slices, tree, shardings)


_SLICE_BYTES = [0]  # bytes this process has read through `_from_slices` (what multi-host tests count)


def slice_bytes_read() -> int:
    """Bytes of host-tree slices this process has read to place arrays on its own devices."""
    return _SLICE_BYTES[0]


def place_model(model: Any, host_tree: Mapping, rules: Rules, mesh: Mesh) -> dict:
    """Put a model's converted host tree on `mesh` in one placement under the component's `rules`
    (its `logical_specs()` say how each leaf is split)."""
    return place(host_tree, model.logical_specs(), rules, mesh)


def _from_slices(leaf: Any, sharding: NamedSharding) -> jax.Array:
    """A sharded array whose every device shard (of this process: the callback runs for the
    addressable devices only) is read from `leaf[index]` alone, each distinct slice once (devices
    that hold the same slice, e.g. across the sequence axis, share the read)."""
    dtype = np.dtype(leaf.dtype)
    read_once: dict[tuple, np.ndarray] = {}

    def read(index):
        key = tuple((s.start, s.stop, s.step) if isinstance(s, slice) else s for s in index)
        if key not in read_once:
            read_once[key] = np.ascontiguousarray(leaf[index], dtype=dtype)
            _SLICE_BYTES[0] += read_once[key].nbytes
        return read_once[key]

    return jax.make_array_from_callback(tuple(leaf.shape), sharding, read)


# --- activations -----------------------------------------------------------------------------


def constrain(x: jax.Array, axes: tuple[str | None, ...]) -> jax.Array:
    """Pin an activation's sharding by logical names under the active mesh; no-op without one.

    Dimensions the mesh axis does not divide stay unsplit (attention pads what it must).
    """
    mesh, rules = active_mesh(), active_rules()
    if mesh is None or rules is None:
        return x
    spec = [axis if dim % _ways(mesh, axis) == 0 else None for dim, axis in zip(x.shape, to_mesh_spec(axes, rules))]
    return jax.lax.with_sharding_constraint(x, PartitionSpec(*spec))


def _ways(mesh, axis: str | tuple[str, ...] | None) -> int:
    """How many pieces a mesh axis (or tuple of axes, or None) splits a dimension into."""
    axes = () if axis is None else axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([mesh.shape[a] for a in axes]))


def cfg_batch(cond: Any, uncond: Any) -> Any:
    """Classifier-free guidance's two branches as one batch, split over the data axis when dp=2.

    Concatenates every leaf of the two input trees on the batch axis (cond first) and pins that
    axis to "batch" -> "data", so with dp=2 each branch runs on its own half of the mesh; the
    samplers then take `cfg_split(model(cfg_batch(...)))`.
    """
    both = jax.tree.map(lambda c, u: jnp.concatenate([c, u], axis=0), cond, uncond)
    mesh, rules = active_mesh(), active_rules()
    if mesh is None or rules is None:
        return both
    batch_axis = to_mesh_spec(("batch",), rules)[0]

    def pin(x):
        rest = (PartitionSpec.UNCONSTRAINED,) * (x.ndim - 1)  # other axes: whatever the model wants
        split = batch_axis if x.shape[0] % _ways(mesh, batch_axis) == 0 else None
        return jax.lax.with_sharding_constraint(x, PartitionSpec(split, *rest))

    return jax.tree.map(pin, both)


def cfg_split(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(cond, uncond)` halves of a `cfg_batch`ed output."""
    half = out.shape[0] // 2
    return out[:half], out[half:]
