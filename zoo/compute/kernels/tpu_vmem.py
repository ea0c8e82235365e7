"""The scoped VMEM limit libtpu gives a kernel, raised to 64 MiB before JAX starts its TPU backend.

libtpu lets one kernel use 16 MiB of a v5e's 128 MiB VMEM unless `LIBTPU_INIT_ARGS` says otherwise,
and JAX's splash kernel at its fastest blocks needs more (`tpu_blocks` has the measurements). The
flag is read once, when the backend starts, so it is set from `vidax.zoo.compute.runtime`'s import; a
variable that already names the flag wins, and `VIDAX_TPU_SCOPED_VMEM_KIB=0` leaves libtpu's default.
No vidax imports here: the runtime imports this module.
"""

from __future__ import annotations

import os

VMEM_ENV = "VIDAX_TPU_SCOPED_VMEM_KIB"
VMEM_FLAG = "--xla_tpu_scoped_vmem_limit_kib"
LARGE_VMEM_KIB = 65536
LIBTPU_DEFAULT_VMEM_KIB = 16384  # what a kernel gets when nothing raises it (v5e)


def raise_scoped_vmem() -> None:
    """Add the flag to `LIBTPU_INIT_ARGS` (only before the backend starts, so that the limit the
    environment names is the one in effect)."""
    from jax._src import xla_bridge

    wanted = os.environ.get(VMEM_ENV, str(LARGE_VMEM_KIB)).strip()
    current = os.environ.get("LIBTPU_INIT_ARGS", "")
    if wanted in ("", "0") or VMEM_FLAG in current or xla_bridge.backends_are_initialized():
        return
    os.environ["LIBTPU_INIT_ARGS"] = f"{current} {VMEM_FLAG}={int(wanted)}".strip()


def scoped_vmem_kib() -> int | None:
    """The limit `LIBTPU_INIT_ARGS` sets, in KiB (None: libtpu's default)."""
    for arg in os.environ.get("LIBTPU_INIT_ARGS", "").split():
        if arg.startswith(VMEM_FLAG + "="):
            try:
                return int(arg.split("=", 1)[1])
            except ValueError:
                return None
    return None
