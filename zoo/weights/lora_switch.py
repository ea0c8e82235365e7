"""Switching LoRAs on weights already placed on the devices, for a long-lived process.

    leaves = touched_leaves("wan/transformer", "/models/wan", adapters, dtype="float32")  # host, merged
    params, applied = apply(params, leaves)      # only the touched leaves move, each with its own sharding
    ...generate...
    params = remove(params, applied)             # the base arrays themselves come back: bit for bit

The merge is the translator's (`vidax.translator.lora`: host, float32, then the leaf's dtype); `apply` places
each merged leaf with the sharding of the leaf it replaces (any mesh: tensor-parallel slices stay slices) and
keeps the replaced arrays, so `remove` restores the base exactly rather than subtracting a delta.

In a process that keeps its placed denoisers (`vidax.zoo.generator.stages.StageCache`: the server), `switch` makes a
cached denoiser carry exactly a run's LoRAs: the ones applied are removed (the base comes back bit for bit)
and the new ones applied; LoRAs at strength 0 are no LoRA at all. 8-bit device weights (`--weights-dtype`,
kernels held as quantized values and scales) and streamed blocks (`--offload-chunk`) are not switched: there
the cache keys a denoiser by its LoRAs too, and a change of LoRA places the DiT again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

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


def apply(params, leaves: Mapping[str, np.ndarray]) -> tuple[Any, Applied]:
    """`params` (placed) with `leaves` (flat paths) placed over theirs, each in the replaced leaf's dtype
    and sharding; the replaced arrays are kept in the returned `Applied`. A block group placed one layer at
    a time (`vidax.zoo.parts.dit.place_resident` on CPU: a tuple of layer trees) takes a stacked leaf layer by layer."""
    flat, treedef = _flatten(params)
    split = {}
    for path, host in leaves.items():
        split.update(_in_placed_form(flat, path, np.asarray(host)))
    originals = {}
    for path, host in split.items():
        old = flat[path]
        if tuple(host.shape) != tuple(old.shape):
            raise ValueError(f"{path}: merged shape {tuple(host.shape)} is not the placed {tuple(old.shape)}")
        flat[path] = jax.device_put(host.astype(old.dtype), old.sharding)
        originals[path] = old
    return jax.tree_util.tree_unflatten(treedef, list(flat.values())), Applied(originals)


def remove(params, applied: Applied):
    """`params` with the base arrays `apply` replaced put back (the merged ones are freed)."""
    flat, treedef = _flatten(params)
    for path, original in applied.originals.items():
        merged = flat[path]
        flat[path] = original
        if merged is not original and not merged.is_deleted():
            merged.delete()
    return jax.tree_util.tree_unflatten(treedef, list(flat.values()))


def _flatten(params) -> tuple[dict[str, Any], Any]:
    """{"a/b/0/c": leaf} of a placed tree (dicts by key, tuples of layers by index) and its structure."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(params)
    names = ["/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path) for path, _ in pairs]
    return dict(zip(names, (leaf for _, leaf in pairs))), treedef


def _in_placed_form(flat: Mapping, path: str, host: np.ndarray) -> dict[str, np.ndarray]:
    """A merged host leaf under the placed tree's paths: itself, or one slice per layer of a split group."""
    if path in flat:
        return {path: host}
    group, _, rest = path.partition("/")
    if f"{group}/0/{rest}" not in flat:
        raise KeyError(f"LoRA leaf not in the placed weights: {path}")
    return {f"{group}/{i}/{rest}": host[i] for i in range(host.shape[0])}


def active(adapters) -> tuple:
    """The adapters that change the weights (strength 0 is no LoRA)."""
    return tuple(a for a in adapters if a.strength != 0)


def identity(adapters) -> tuple:
    """What a denoiser's merged LoRAs are, for a cache: (content hash, strength) of each active adapter."""
    return tuple((a.sha256, a.strength) for a in active(adapters))


def switchable(options) -> bool:
    """Whether LoRAs can be switched on a denoiser's placed weights: all resident, in float kernels."""
    return options.offload_chunk is None and getattr(options, "weights_dtype", None) in (None, "bf16")


def host_leaves(run, part, dtype: str | None, adapters) -> dict[str, np.ndarray]:
    """The merged host leaves of denoiser `part` that `adapters` change (the base re-read, mmapped, to tell
    which: a leaf whose merged value equals the base's is left as placed)."""
    base = run.load_tree(part.component, part.spec, part.subfolders, dtype, loras=())
    merged = run.load_tree(part.component, part.spec, part.subfolders, dtype, loras=tuple(adapters))
    return {path: leaf for path, leaf in merged.items() if not np.array_equal(leaf, base[path])}


def switch(loaded, adapters, merged_leaves) -> None:
    """Make `loaded` (a placed denoiser: `params`, `loras`, `applied`) carry exactly `adapters`' active ones:
    remove what it carries (the base arrays back), then `apply` `merged_leaves(active adapters)`."""
    wanted = identity(adapters)
    if loaded.loras == wanted:
        return
    if loaded.applied is not None:
        loaded.params = remove(loaded.params, loaded.applied)
        loaded.applied, loaded.loras = None, ()
    if wanted:
        loaded.params, loaded.applied = apply(loaded.params, merged_leaves(active(adapters)))
        loaded.loras = wanted
