"""Switching LoRAs on weights already placed on the devices, for a long-lived process.

    leaves = touched_leaves("wan/transformer", "/models/wan", adapters, dtype="float32")  # host, merged
    params, applied = apply(params, leaves)      # only the touched leaves move, each with its own sharding
    ...generate...
    params = remove(params, applied)             # the base arrays themselves come back: bit for bit

The merge is the translator's (`vidax.translator.lora`: host, float32, then the leaf's dtype); `apply` places
each merged leaf with the sharding of the leaf it replaces (any mesh: tensor-parallel slices stay slices) and
keeps the replaced arrays, so `remove` restores the base exactly rather than subtracting a delta.
Not yet wired into `vidax-serve` (its requests take no LoRAs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import numpy as np
from flax import traverse_util

from vidax.translator import convert


@dataclasses.dataclass
class Applied:
    """The placed base leaves an `apply` replaced, by tree path (what `remove` puts back)."""

    originals: dict[str, jax.Array]


def touched_leaves(spec: str, source, adapters, dtype: str | None = None, **convert_options) -> dict[str, np.ndarray]:
    """The merged host leaves of the converted tree that `adapters` change (the others are not computed)."""
    tree = convert(spec, source, dtype=dtype, lazy=True, loras=list(adapters), **convert_options)
    deltas = tree.source.checkpoint.deltas
    return {path: tree[path] for path, leaf in tree.leaves.items() if any(p.key in deltas for p in leaf.pieces)}


def apply(params: Mapping, leaves: Mapping[str, np.ndarray]) -> tuple[dict, Applied]:
    """`params` (nested, placed) with `leaves` (flat paths) placed over theirs, each in the replaced leaf's dtype
    and sharding; the replaced arrays are kept in the returned `Applied`."""
    flat = traverse_util.flatten_dict(dict(params), sep="/")
    missing = sorted(set(leaves) - set(flat))
    if missing:
        raise KeyError(f"LoRA leaves not in the placed weights: {', '.join(missing[:6])}")
    originals = {}
    for path, host in leaves.items():
        old = flat[path]
        if tuple(host.shape) != tuple(old.shape):
            raise ValueError(f"{path}: merged shape {tuple(host.shape)} is not the placed {tuple(old.shape)}")
        flat[path] = jax.device_put(np.asarray(host).astype(old.dtype), old.sharding)
        originals[path] = old
    return traverse_util.unflatten_dict(flat, sep="/"), Applied(originals)


def remove(params: Mapping, applied: Applied) -> dict:
    """`params` with the base arrays `apply` replaced put back (the merged ones are freed)."""
    flat = traverse_util.flatten_dict(dict(params), sep="/")
    for path, original in applied.originals.items():
        merged = flat[path]
        flat[path] = original
        if merged is not original and not merged.is_deleted():
            merged.delete()
    return traverse_util.unflatten_dict(flat, sep="/")
