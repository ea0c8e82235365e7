"""Streamed weight offload: block weights live in host memory, chunks move to the devices just in time.

The DiT's non-block weights (embeddings, head) stay resident; its stacked block weights are cut
into chunks of `chunk` blocks (the last chunk may be shorter, so at most two compiled chunk
shapes) and kept in host memory — pinned where the backend offers it, so transfers run at DMA
speed. Each sweep issues chunk i+1's transfer before chunk i's compute; JAX dispatch is
asynchronous, so the copy and the compute overlap, and the reference to chunk i is dropped as
soon as its compute is queued, so about two chunks are resident at any time.

Under a mesh, `device_shardings` holds the NamedShardings of one chunk's params (the layer axis
unsharded): each device receives only its own tensor-parallel shard.

    streamed = StreamedDiT(model, chunk=4)
    blocks = streamed.offload(params.pop("blocks"))        # host copy, once
    out = streamed(params, blocks, *inputs)                # equals zoo.dit.forward(model, ...)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from flax import traverse_util
from jax.sharding import Mesh

from vidax.zoo.dit import Params, StackedDiT, scan_blocks
from vidax.zoo.runtime import Rules
from vidax.zoo.sharding import mesh_shardings, place


@dataclasses.dataclass(frozen=True)
class HostChunks:
    """Block weights cut into chunks along the layer axis, held in host memory."""

    chunks: tuple[Params, ...]
    sizes: tuple[int, ...]

    @property
    def depth(self) -> int:
        return sum(self.sizes)


def chunk_bounds(depth: int, chunk: int) -> list[tuple[int, int]]:
    """`[(start, stop), ...]` covering `depth` blocks in runs of `chunk` (the last may be shorter)."""
    if chunk < 1:
        raise ValueError(f"offload chunk must be at least 1 block, got {chunk}")
    chunk = min(chunk, depth)
    return [(start, min(start + chunk, depth)) for start in range(0, depth, chunk)]


def _host_sharding(sharding: jax.sharding.Sharding | None) -> jax.sharding.Sharding | None:
    """The same layout in pinned host memory, where the backend has such a memory kind."""
    if sharding is None:
        device = jax.devices()[0]
        kinds = {m.kind for m in device.addressable_memories()}
        if "pinned_host" not in kinds:
            return None
        return jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    kinds = {m.kind for d in sharding.device_set for m in d.addressable_memories()}
    return sharding.with_memory_kind("pinned_host") if "pinned_host" in kinds else None


def offload_blocks(stacked: Params, chunk: int, device_shardings: Params | None = None) -> HostChunks:
    """Cut stacked block weights (numpy or jax arrays, leading axis = layer) into host-resident chunks.

    Each chunk is copied into pinned host memory once (numpy slices stay views where no pinned
    memory kind exists). `device_shardings` is the per-leaf sharding a chunk will have on device.
    """
    leaves = jax.tree.leaves(stacked)
    if not leaves:
        raise ValueError("no block weights to offload")
    depth = leaves[0].shape[0]
    chunks, sizes = [], []
    for start, stop in chunk_bounds(depth, chunk):
        piece = jax.tree.map(lambda a, s=start, e=stop: a[s:e], stacked)
        if device_shardings is None:
            host = _host_sharding(None)
            piece = piece if host is None else jax.device_put(piece, host)
        else:
            host = jax.tree.map(_host_sharding, device_shardings)
            if all(h is not None for h in jax.tree.leaves(host)):
                piece = jax.device_put(piece, host)
        chunks.append(piece)
        sizes.append(stop - start)
    return HostChunks(tuple(chunks), tuple(sizes))


class StreamedDiT:
    """Runs a `zoo.dit.StackedDiT` with its blocks streamed from host memory chunk by chunk.

    The embed and head are compiled once each, and the chunk body once per chunk size (at most
    two). The loop over chunks is a host loop, as the runtime's rule says: jit the repeated unit.
    """

    def __init__(self, model: StackedDiT, chunk: int, device_shardings: Params | None = None):
        self.model = model
        self.chunk = chunk
        self.device_shardings = device_shardings
        self._embed = jax.jit(model.embed)
        self._head = jax.jit(model.head)
        self._run_chunk = jax.jit(lambda blocks, h, ctx: scan_blocks(model.block, blocks, h, ctx), donate_argnums=1)

    def offload(self, stacked: Params) -> HostChunks:
        return offload_blocks(stacked, self.chunk, self.device_shardings)

    def _fetch(self, host_chunk: Params) -> Params:
        if self.device_shardings is None:
            target = jax.sharding.SingleDeviceSharding(jax.devices()[0], memory_kind="device")
            return jax.device_put(host_chunk, target)
        return jax.device_put(host_chunk, self.device_shardings)

    def run_blocks(self, host: HostChunks, hidden: jax.Array, ctx: Any) -> jax.Array:
        pending = self._fetch(host.chunks[0])
        for index in range(len(host.chunks)):
            current = pending
            if index + 1 < len(host.chunks):
                pending = self._fetch(host.chunks[index + 1])  # issued before this chunk's compute
            hidden = self._run_chunk(current, hidden, ctx)
            del current  # its buffers go as soon as the compute that reads them is done
        return hidden

    def __call__(self, params: Params, host: HostChunks, *inputs: Any) -> jax.Array:
        hidden, ctx = self._embed(params, *inputs)
        hidden = self.run_blocks(host, hidden, ctx)
        return self._head(params, hidden, ctx)


def stream_blocks(model: StackedDiT, tree: Mapping[str, np.ndarray], chunk: int, rules: Rules,
                  mesh: Mesh | None = None) -> tuple[Params, StreamedDiT, HostChunks]:
    """A converted DiT tree split for streamed offload: `(params, streamed, host_blocks)`.

    The embed and head weights are placed on the devices (under `rules` on `mesh`, else on the
    default device); the stacked block weights go to host memory in chunks of `chunk` blocks, each
    chunk's per-device shardings keeping the layer axis whole. `streamed(params, host_blocks, *inputs)`
    then equals `zoo.dit.forward(model, all_params, *inputs)`.
    """
    nested = traverse_util.unflatten_dict(dict(tree), sep="/")
    blocks = nested.pop("blocks")
    shardings = None
    if mesh is not None:
        specs = model.logical_specs()
        params = place(nested, {k: specs[k] for k in nested}, rules, mesh)
        shardings = mesh_shardings(specs["blocks"], rules, mesh)
    else:
        params = jax.device_put(nested)
    streamed = StreamedDiT(model, chunk, shardings)
    return params, streamed, streamed.offload(blocks)


def chunk_bytes(host: HostChunks) -> list[int]:
    """Bytes of each chunk (for planners and benchmarks)."""
    return [int(sum(np.prod(a.shape) * a.dtype.itemsize for a in jax.tree.leaves(c))) for c in host.chunks]
