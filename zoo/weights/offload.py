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
    blocks = streamed.offload({"blocks": params.pop("blocks")})   # host copy, once
    out = streamed(params, blocks, *inputs)                # equals zoo.parts.dit.forward(model, ...)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from flax import traverse_util
from jax.sharding import Mesh

from vidax.zoo.parts.dit import Params, StackedDiT, block_groups, scan_blocks
from vidax.zoo.compute.runtime import Rules
from vidax.zoo.compute.sharding import mesh_shardings, place


@dataclasses.dataclass(frozen=True)
class HostChunks:
    """Block weights cut into chunks along the layer axis, held in host memory."""

    chunks: tuple[Params, ...]
    sizes: tuple[int, ...]

    @property
    def depth(self) -> int:
        return sum(self.sizes)


# a pytree (the chunks are its leaves), so `pipeline.release(host_blocks)` frees them
jax.tree_util.register_dataclass(HostChunks, data_fields=["chunks"], meta_fields=["sizes"])


def chunk_bounds(depth: int, chunk: int) -> list[tuple[int, int]]:
    """`[(start, stop), ...]` covering `depth` blocks in runs of `chunk` (the last may be shorter)."""
    if chunk < 1:
        raise ValueError(f"offload chunk must be at least 1 block, got {chunk}")
    chunk = min(chunk, depth)
    return [(start, min(start + chunk, depth)) for start in range(0, depth, chunk)]


def _host_sharding(sharding: jax.sharding.Sharding | None) -> jax.sharding.Sharding | None:
    """The same layout in pinned host memory, where the backend has such a memory kind."""
    if sharding is None:
        device = jax.local_devices()[0]
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


HostBlocks = dict[str, HostChunks]  # block group name -> its chunks (zoo.parts.dit block groups)


class StreamedDiT:
    """Runs a `zoo.parts.dit.StackedDiT` with its blocks streamed from host memory chunk by chunk.

    The embed and head are compiled once each, and each block group's chunk body once per chunk
    size (at most two). The loop over chunks is a host loop, as the runtime's rule says: jit the
    repeated unit. Each block group (HunyuanVideo 1.0: dual-stream, then single-stream blocks) is
    its own pool of chunks.

    Args:
      model: the DiT.
      chunk: blocks per chunk.
      device_shardings: `{group: shardings of one chunk's params}` under a mesh; None on one device.
    """

    def __init__(self, model: StackedDiT, chunk: int, device_shardings: Mapping[str, Params] | None = None):
        self.model = model
        self.chunk = chunk
        self.device_shardings = dict(device_shardings or {})
        self._embed = jax.jit(model.embed)
        self._head = jax.jit(model.head)
        between = getattr(model, "between_groups", None)
        self._between = None if between is None else jax.jit(between, static_argnums=0)
        self._run_chunk = {
            group.name: jax.jit(lambda blocks, h, ctx, b=group.block: scan_blocks(b, blocks, h, ctx), donate_argnums=1)
            for group in block_groups(model)
        }

    def offload(self, stacked: Mapping[str, Params]) -> HostBlocks:
        """`{group: stacked block weights}` -> the groups' host-resident chunks."""
        return {name: offload_blocks(blocks, self.chunk, self.device_shardings.get(name))
                for name, blocks in stacked.items()}

    def _fetch(self, group: str, host_chunk: Params) -> Params:
        shardings = self.device_shardings.get(group)
        if shardings is None:
            target = jax.sharding.SingleDeviceSharding(jax.local_devices()[0], memory_kind="device")
            return jax.device_put(host_chunk, target)
        return jax.device_put(host_chunk, shardings)

    def run_group(self, group: str, host: HostChunks, hidden: Any, ctx: Any, start: int = 0) -> Any:
        """One block group's chunks from chunk `start` (a step cache ran the ones before), chunk i+1's
        transfer issued before chunk i's compute."""
        if start >= len(host.chunks):
            return hidden
        pending = self._fetch(group, host.chunks[start])
        for index in range(start, len(host.chunks)):
            current = pending
            if index + 1 < len(host.chunks):
                pending = self._fetch(group, host.chunks[index + 1])  # issued before this chunk's compute
            hidden = self._run_chunk[group](current, hidden, ctx)
            del current  # its buffers go as soon as the compute that reads them is done
        return hidden

    def __call__(self, params: Params, host: HostBlocks, *inputs: Any) -> jax.Array:
        hidden, ctx = self._embed(params, *inputs)
        for group in block_groups(self.model):
            hidden = self.run_group(group.name, host[group.name], hidden, ctx)
            if self._between is not None:
                hidden = self._between(group.name, hidden, ctx)
        return self._head(params, hidden, ctx)


def stream_blocks(model: StackedDiT, tree: Mapping[str, np.ndarray], chunk: int, rules: Rules,
                  mesh: Mesh | None = None) -> tuple[Params, StreamedDiT, HostBlocks]:
    """A converted DiT tree split for streamed offload: `(params, streamed, host_blocks)`.

    The embed and head weights are placed on the devices (under `rules` on `mesh`, else on the
    default device); each block group's stacked weights go to host memory in chunks of `chunk`
    blocks, each chunk's per-device shardings keeping the layer axis whole.
    `streamed(params, host_blocks, *inputs)` then equals `zoo.parts.dit.forward(model, all_params, *inputs)`.
    """
    nested = traverse_util.unflatten_dict(dict(tree), sep="/")
    blocks = {group.name: nested.pop(group.name) for group in block_groups(model)}
    shardings = None
    if mesh is not None:
        from vidax.zoo.weights.quantize import device_specs

        specs = device_specs(model.logical_specs(), tree)  # 8-bit kernels' scales too (--weights-dtype)
        params = place(nested, {k: specs[k] for k in nested}, rules, mesh)
        shardings = {name: mesh_shardings(specs[name], rules, mesh) for name in blocks}
    else:
        params = jax.device_put(nested)
    streamed = StreamedDiT(model, chunk, shardings)
    return params, streamed, streamed.offload(blocks)


def place_layers(model: StackedDiT, tree: Mapping[str, np.ndarray]) -> tuple[Params, StreamedDiT, HostBlocks]:
    """A converted DiT tree on one device to run layer by layer: `(params, runner, blocks)` as `stream_blocks`
    gives them, each block's weights placed once as a chunk of one layer, the runner a host loop over one
    compiled block (what a CPU run uses: XLA's CPU compiler keeps every layer's temporaries of a whole-model
    program live at once, 24.6 GB for Wan2.1-1.3B's 480p step against 4.8 GB for two blocks; one block per
    program holds one block's). A layer of an mmapped, 64-byte-aligned host tree is placed without a copy on a
    CPU (`jax.device_put` aliases it), so the weights stay the folder's file pages."""
    nested = traverse_util.unflatten_dict(dict(tree), sep="/")
    blocks = {group.name: nested.pop(group.name) for group in block_groups(model)}
    params = jax.device_put(nested)
    host = {}
    for name, stacked in blocks.items():
        depth = jax.tree.leaves(stacked)[0].shape[0]
        chunks = tuple(jax.device_put(jax.tree.map(lambda a, i=i: a[i:i + 1], stacked)) for i in range(depth))
        host[name] = HostChunks(chunks, (1,) * depth)
    return params, StreamedDiT(model, 1), host


def chunk_bytes(host: HostChunks) -> list[int]:
    """Bytes of each chunk (for planners and benchmarks)."""
    return [int(sum(np.prod(a.shape) * a.dtype.itemsize for a in jax.tree.leaves(c))) for c in host.chunks]
