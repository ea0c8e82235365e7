"""The device mesh: one mesh with axes ("data", "tensor", "sequence") for every component.

    mesh = make_mesh(dp=2, tp=2, sp=2)          # 8 devices: CFG branches x Megatron x Ulysses

Multi-host (a TPU pod slice, several GPU hosts): start every host's process with
`jax.distributed.initialize()` (on TPU and SLURM/Open MPI clusters it finds the coordinator by
itself; elsewhere pass `coordinator_address`, `num_processes`, `process_id`) *before* anything
else touches jax, then call `make_mesh` with the same degrees on every host. `jax.devices()` then
lists the devices of all hosts, the mesh spans them, and the same program runs on every host
(SPMD); host trees are placed with `vidax.zoo.compute.sharding.place`, which reads on each host only the
slices its own devices hold. vidax has no cluster code of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh
from vidax.translator import VidaxError

DATA, TENSOR, SEQUENCE = "data", "tensor", "sequence"
MESH_AXES = (DATA, TENSOR, SEQUENCE)


class MeshError(VidaxError, ValueError):
    """A mesh or parallel degree that the devices or the model cannot honour."""


def make_mesh(dp: int = 1, tp: int = 1, sp: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh of shape (dp, tp, sp) over the first dp*tp*sp devices.

    Args:
      dp: data-parallel degree (2 runs classifier-free guidance's two branches side by side).
      tp: tensor-parallel degree (Megatron column -> row; must divide the head count).
      sp: sequence-parallel degree (DeepSpeed-Ulysses; tp*sp must divide the head count).
      devices: devices to use; default `jax.devices()` (all hosts' devices under jax.distributed).
    """
    for name, degree in (("dp", dp), ("tp", tp), ("sp", sp)):
        if not isinstance(degree, int) or degree < 1:
            raise MeshError(f"{name} must be a positive integer, got {degree!r}")
    devices = list(jax.devices() if devices is None else devices)
    needed = dp * tp * sp
    if needed > len(devices):
        raise MeshError(
            f"dp*tp*sp = {dp}*{tp}*{sp} = {needed} devices needed, but only {len(devices)} "
            f"{devices[0].platform if devices else ''} device(s) are available"
        )
    grid = _device_grid(devices[:needed], (dp, tp, sp))
    return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES))


def _device_grid(devices: list[jax.Device], shape: tuple[int, int, int]) -> np.ndarray:
    """Topology-aware placement where jax knows the topology (TPU), row-major order otherwise."""
    try:
        from jax.experimental import mesh_utils

        return mesh_utils.create_device_mesh(shape, devices)
    except (ValueError, NotImplementedError, AssertionError):
        return np.asarray(devices, dtype=object).reshape(shape)


def axis_size(mesh: Mesh | None, axis: str) -> int:
    """Size of `axis` in `mesh`, 1 when there is no mesh or no such axis."""
    if mesh is None or axis not in mesh.shape:
        return 1
    return int(mesh.shape[axis])


def valid_degrees(count: int) -> list[int]:
    """The parallel degrees that split `count` (heads, ...) evenly."""
    return [d for d in range(1, count + 1) if count % d == 0]


def check_heads(num_heads: int, tp: int = 1, sp: int = 1) -> None:
    """Raise a clear MeshError when tp (and Ulysses' sp) cannot split `num_heads` evenly."""
    if num_heads % tp:
        raise MeshError(
            f"{num_heads} attention heads cannot be split over tp={tp}; "
            f"valid tp degrees: {', '.join(map(str, valid_degrees(num_heads)))}"
        )
    local = num_heads // tp
    if local % sp:
        raise MeshError(
            f"{num_heads} heads over tp={tp} leave {local} per device, which sequence parallel "
            f"sp={sp} cannot split; valid sp degrees at tp={tp}: {', '.join(map(str, valid_degrees(local)))}"
        )
