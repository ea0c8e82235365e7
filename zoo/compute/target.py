"""Compiling for chips this host does not have: `vidax-gen MODEL --dry-run --target v5e:2x2`.

XLA's TPU compiler runs on any host without a chip (libtpu's deviceless ahead-of-time compile): given a
topology (`v5e:2x2`: four v5e chips), JAX hands out abstract TPU devices that programs can be lowered and
compiled for but never run on. What XLA then says about a compiled program (its buffers, its FLOPs, its
compile time) is what the chip would see, so a plan for a slice you have not rented comes from a laptop.

`compiling_for(target)` makes the model code trace as it would on that chip: `runtime.platform()` answers
"tpu" (the attention kernel, RoPE's products, the FFN's token chunks follow it), the chip's device kind picks
the attention blocks, and `planner.device_memory_bytes()` answers the chip's memory. Nothing here runs on a
device; libtpu must be importable (`pip install libtpu`, the version JAX's `jax[tpu]` extra names), or sit in the
folder `VIDAX_LIBTPU` names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Iterator

from vidax.zoo.errors import PipelineError

GIB = 2**30
LIBTPU_ENV = "VIDAX_LIBTPU"  # a folder holding the libtpu package, installed apart from jax


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation: the name JAX's topologies take, its device kind, the memory one device may use."""

    name: str  # "v5e": the topology prefix
    device_kind: str  # what `jax.devices()[0].device_kind` says on that chip
    device_bytes: int  # HBM one device may allocate
    measured: bool  # device_bytes read off a chip (`memory_stats()["bytes_limit"]`), else the published HBM
    default_topology: str  # the smallest slice: one chip where the chip comes alone
    accelerator: str  # Cloud TPU's name of a slice, "{cores}" or "{chips}" filled in (libtpu reads it at start)


# The v5e figure is the allocator's limit read on one chip (15.75 GiB of 16); the others are the published HBM
# per device (a chip's usable share is a few percent less: plans close to it are marked by the dry run's table).
CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", "TPU v4", 32 * GIB, False, "2x2x1", "v4-{cores}"),
    "v5e": Chip("v5e", "TPU v5 lite", int(15.75 * GIB), True, "1x1", "v5litepod-{chips}"),
    "v5p": Chip("v5p", "TPU v5", 95 * GIB, False, "2x2x1", "v5p-{cores}"),
    "v6e": Chip("v6e", "TPU v6 lite", 32 * GIB, False, "1x1", "v6e-{chips}"),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """A slice to compile for: a chip and a topology (`v5e:2x2`)."""

    chip: Chip
    topology: str

    @property
    def name(self) -> str:
        return f"{self.chip.name}:{self.topology}"

    @property
    def chips(self) -> int:
        return math.prod(int(n) for n in self.topology.split("x"))


def parse_target(text: str) -> Target:
    """`v5e`, `v5e:2x2`, `v5p:2x2x1`, ... -> a `Target` (one line naming what is known when it is not)."""
    name, _, topology = text.strip().lower().partition(":")
    chip = CHIPS.get(name)
    if chip is None:
        raise PipelineError(f"--target {text}: unknown chip {name!r} (known: {', '.join(CHIPS)}; "
                            f"a topology follows a colon: v5e:2x2)")
    topology = topology or chip.default_topology
    dims = topology.split("x")
    if not all(d.isdigit() and int(d) > 0 for d in dims) or len(dims) not in (2, 3):
        raise PipelineError(f"--target {text}: the topology is chips per axis, 2 or 3 of them (v5e:2x2, v5p:2x2x1)")
    return Target(chip, topology)


def target_devices(target: Target) -> list:
    """The abstract devices of `target`'s topology (compile only). One line when libtpu is missing."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # no cloud metadata server to ask: this host has no chip
    # what the metadata server would have said (else libtpu prints warnings and an error it then ignores)
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", target.chip.accelerator.format(chips=target.chips,
                                                                                 cores=2 * target.chips))
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # a second process compiling beside this one
    _import_libtpu(target)
    from jax.experimental import topologies

    one_host = (1, 1, 1) if target.chips == 1 else None
    kwargs = {"chips_per_host_bounds": one_host} if one_host else {}
    try:
        topology = topologies.get_topology_desc(platform="tpu", topology_name=target.name, **kwargs)
    except Exception as error:  # noqa: BLE001 - libtpu's own message says what it refused
        raise PipelineError(f"--target {target.name}: {str(error).splitlines()[0]}") from None
    return list(topology.devices)


def _import_libtpu(target: Target) -> None:
    """libtpu from the environment, else from the folder `LIBTPU_ENV` names: installed apart (`pip install --target
    DIR libtpu`), it stays out of every other jax process on this host, which would otherwise try to start a TPU
    backend it does not have."""
    folder = os.environ.get(LIBTPU_ENV)
    if folder and folder not in sys.path:
        sys.path.append(folder)
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise PipelineError(f"--target {target.name}: compiling for a TPU without one needs libtpu: pip install "
                            f"--target DIR libtpu, then {LIBTPU_ENV}=DIR (or pip install libtpu)") from None


@contextlib.contextmanager
def compiling_for(target: Target | None) -> Iterator[list | None]:
    """Trace and compile as on `target`'s chips (None: the local backend). Yields its devices."""
    from vidax.zoo.compute import runtime

    if target is None:
        yield None
        return
    devices = target_devices(target)
    with runtime.platform_override("tpu", devices[0].device_kind, len(devices), target.chip.device_bytes):
        yield devices
