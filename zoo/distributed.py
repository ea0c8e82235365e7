"""Runs that span several processes (hosts), on JAX's own multi-controller runtime.

Every process runs the same program (SPMD) over one mesh of all processes' devices. vidax adds only
what a generation needs on top of `jax.distributed`:

- `join`: start or join the run. Explicit `--coordinator HOST:PORT --num-processes N --process-id I`
  (or `VIDAX_COORDINATOR`, `VIDAX_NUM_PROCESSES`, `VIDAX_PROCESS_ID`), else JAX's own detection where
  the platform says the job has several processes (a TPU pod slice, SLURM with several tasks, Open
  MPI), else a single process. On CPU the collectives go through gloo.
- `to_host`: a mesh output as one NumPy array on every process (a process cannot read another's
  shards with `np.asarray`).
- `agree`: a barrier that carries success: when any process failed to prepare (bad input, missing
  file), every process stops with one line naming the failed ones, instead of hanging in the first
  collective.
- `is_writer`: only process 0 writes the video, sidecar and latents.

A peer that dies mid-run is caught by the coordination service's heartbeat (`heartbeat_timeout`
seconds, `VIDAX_HEARTBEAT_TIMEOUT`): the survivors stop with an error instead of waiting forever.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

from vidax.translator import VidaxError

DEFAULT_HEARTBEAT_TIMEOUT = 60  # seconds without a heartbeat before a peer counts as dead
_ENV = {"coordinator": "VIDAX_COORDINATOR", "num_processes": "VIDAX_NUM_PROCESSES", "process_id": "VIDAX_PROCESS_ID"}


class DistributedError(VidaxError):
    """A multi-process run that cannot start, or a process whose peers failed."""


def detected_multiprocess_env() -> str | None:
    """The cluster environment that says this job has several processes (None: a single process)."""
    if int(os.environ.get("SLURM_NTASKS", os.environ.get("SLURM_STEP_NUM_TASKS", "1")) or 1) > 1:
        return "SLURM"
    if int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1:
        return "Open MPI"
    if "," in os.environ.get("TPU_WORKER_HOSTNAMES", ""):
        return "TPU pod slice"
    return None


def join(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None, *,
         heartbeat_timeout: int | None = None, init_timeout: int = 300) -> bool:
    """Join a multi-process run when one is asked for or detected; returns whether there is one.

    Call it before anything touches a jax backend (devices, arrays).
    """
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    for key, env in _ENV.items():
        if given[key] is None and os.environ.get(env):
            given[key] = os.environ[env]
    explicit = any(v is not None for v in given.values())
    if explicit and any(v is None for v in given.values()):
        missing = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is None]
        raise DistributedError(f"a multi-process run needs --coordinator, --num-processes and --process-id "
                               f"(or {', '.join(_ENV.values())}); missing {', '.join(missing)}")
    detected = None if explicit else detected_multiprocess_env()
    if not explicit and detected is None:
        return False
    if jax.distributed.is_initialized():
        return jax.process_count() > 1
    if (jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "")).startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeout = heartbeat_timeout or int(os.environ.get("VIDAX_HEARTBEAT_TIMEOUT", DEFAULT_HEARTBEAT_TIMEOUT))
    kwargs: dict[str, Any] = dict(initialization_timeout=init_timeout, heartbeat_timeout_seconds=timeout)
    if explicit:
        kwargs.update(coordinator_address=str(given["coordinator"]), num_processes=int(given["num_processes"]),
                      process_id=int(given["process_id"]))
    try:
        jax.distributed.initialize(**kwargs)
    except (RuntimeError, ValueError) as err:
        where = f"coordinator {given['coordinator']}" if explicit else f"the {detected} environment"
        raise DistributedError(f"could not join the multi-process run through {where}: {str(err).splitlines()[0]}") from None
    return jax.process_count() > 1


def multiprocess() -> bool:
    return jax.process_count() > 1


def is_writer() -> bool:
    """Process 0 writes the outputs; the others compute their shards and stop."""
    return jax.process_index() == 0


def to_host(x: jax.Array) -> np.ndarray:
    """The whole array as NumPy on this process, whichever processes hold its shards."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def agree(error: BaseException | None, stage: str) -> None:
    """Every process reports whether `stage` went well; any failure stops them all, with one line.

    The failing process re-raises its own error; the others raise a `DistributedError` naming it.
    """
    if not multiprocess():
        if error is not None:
            raise error
        return
    from jax.experimental import multihost_utils

    failed = np.asarray(multihost_utils.process_allgather(np.array([error is not None], np.int32)))
    if error is not None:
        raise error
    bad = [i for i, f in enumerate(failed.reshape(-1)) if f]
    if bad:
        raise DistributedError(f"process {', '.join(map(str, bad))} failed during {stage} (its own log says why); stopping")
