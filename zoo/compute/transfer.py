"""Host trees onto devices with bounded host memory.

On an accelerator `jax.device_put` of a NumPy array copies it into the runtime's own host buffers before the
transfer; one `device_put` of a whole tree stages every leaf at once, and the buffers the runtime keeps for it
stay beside the mapped checkpoint pages. A v5e host generating with Wan2.1-1.3B (16.7 GB of weights, 12.5 GiB of
them the text encoder) peaked at 35.4 GiB of resident memory so.

A leaf read from a file mapping is therefore never handed to the runtime as it is: on the v5e host, whose kernel
keeps a second copy of any mapped page a transfer reads until the file is unmapped, moving the text encoder's
mapped leaves a group at a time still left 8.6 GiB resident beside the runtime's own 13.3 GiB (23.9 GiB at the
peak; `bench/results/tpu-v5e-2026-12-07/host-memory-4db2c4a`). `to_devices` copies a mapped leaf into one
reused anonymous staging buffer of `STAGE_BYTES`, drops the leaf's file pages from the resident set
(`translator.formats.safetensors_io.drop_pages`: they stay in the page cache), and moves the buffer; a leaf
larger than the buffer goes in slices of whole rows, written into its device buffer in place (a donated
`dynamic_update_slice`). The host then holds the staging buffer beside the rest of the process, whatever the
tree's size. Leaves in memory already (computed, or read without a mapping) go in groups of at most
`GROUP_BYTES`, each group waited for.

On a CPU the device is the host: `jax.device_put` aliases 64-byte-aligned host arrays (an mmapped converted
folder) instead of copying them, so a whole tree goes in one call and its pages stay mapped.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from vidax.translator.formats.safetensors_io import drop_pages
from vidax.zoo.compute.runtime import platform

GROUP_BYTES = 1 << 30
STAGE_BYTES = 256 << 20


def to_devices(tree: Any, shardings: Any = None) -> Any:
    """`jax.device_put(tree, shardings)`, with bounded host memory on accelerators (see the module docstring)."""
    if platform() == "cpu":
        return jax.device_put(tree, shardings)
    leaves, treedef = jax.tree.flatten(tree)
    targets = [None] * len(leaves) if shardings is None else treedef.flatten_up_to(shardings)
    placed: list = [None] * len(leaves)
    staging = _Staging(STAGE_BYTES)
    group: list[int] = []
    size = 0
    for index, leaf in enumerate(leaves):
        if _stageable(leaf, targets[index]):
            placed[index] = staging.place(leaf, targets[index])
            continue
        group.append(index)
        size += getattr(leaf, "nbytes", 0)
        if size >= GROUP_BYTES:
            _move(leaves, targets, placed, group)
            group, size = [], 0
    if group:
        _move(leaves, targets, placed, group)
    return jax.tree.unflatten(treedef, placed)


def _move(leaves: list, targets: list, placed: list, group: list[int]) -> None:
    moved = jax.device_put([leaves[i] for i in group], [targets[i] for i in group])
    jax.block_until_ready(moved)
    for i, array in zip(group, moved):
        placed[i] = array
        if isinstance(leaves[i], np.ndarray):
            drop_pages(leaves[i])


def _stageable(leaf: Any, target: Any) -> bool:
    """A NumPy view of a file mapping bound for one device (a mesh's shardings keep the grouped path)."""
    if not isinstance(leaf, np.ndarray) or leaf.nbytes == 0 or not leaf.flags.c_contiguous \
            or not _is_file_view(leaf):
        return False
    return target is None or isinstance(target, jax.Device) or len(getattr(target, "device_set", ())) == 1


def _is_file_view(array: np.ndarray) -> bool:
    import mmap

    base: Any = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base is not None


class _Staging:
    """One anonymous host buffer, reused for every mapped leaf of a transfer."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.buffer: np.ndarray | None = None

    def _view(self, nbytes: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
        if self.buffer is None or self.buffer.nbytes < nbytes:
            self.buffer = None  # the old one goes before the larger one is made
            self.buffer = np.empty(max(nbytes, self.nbytes), np.uint8)  # pages count once written
        return self.buffer[:nbytes].view(dtype).reshape(shape)

    def _put(self, part: np.ndarray, target: Any) -> jax.Array:
        host = self._view(part.nbytes, part.dtype, part.shape)
        np.copyto(host, part)
        drop_pages(part)
        if jax.default_backend() == "cpu":  # XLA's CPU client may alias an aligned host array whatever
            host = host.copy()  # `may_alias` says (jax 0.10.2): a test's stand-in accelerator copies itself
        out = jax.device_put(host, target, may_alias=False)  # the buffer is reused next
        out.block_until_ready()
        return out

    def place(self, leaf: np.ndarray, target: Any) -> jax.Array:
        row_bytes = leaf.nbytes // leaf.shape[0] if leaf.ndim else leaf.nbytes
        if leaf.nbytes <= self.nbytes or row_bytes > self.nbytes:
            return self._put(leaf, target)  # whole (a single row past the buffer makes the buffer that large)
        rows = self.nbytes // row_bytes
        out = _empty(leaf.shape, leaf.dtype, target)
        for start in range(0, leaf.shape[0], rows):
            out = _write(out, self._put(leaf[start:start + rows], target), start)
        out.block_until_ready()
        return out


def _empty(shape: tuple, dtype: np.dtype, target: Any) -> jax.Array:
    device = target if isinstance(target, jax.Device) else None
    sharding = None if target is None or device is not None else target
    return _zeros(tuple(shape), np.dtype(dtype), sharding, device)


@functools.lru_cache(maxsize=None)
def _zeros_program(shape: tuple, dtype: np.dtype, sharding: Any):
    return jax.jit(lambda: jax.numpy.zeros(shape, dtype), out_shardings=sharding)


def _zeros(shape: tuple, dtype: np.dtype, sharding: Any, device: Any) -> jax.Array:
    if device is not None:
        with jax.default_device(device):
            return _zeros_program(shape, dtype, None)()
    return _zeros_program(shape, dtype, sharding)()


@functools.partial(jax.jit, donate_argnums=0)
def _write(buffer: jax.Array, rows: jax.Array, start) -> jax.Array:
    """`buffer` with `rows` written from row `start`, in place (the buffer is donated)."""
    return jax.lax.dynamic_update_slice_in_dim(buffer, rows, start, 0)
