"""Runs that span several processes (hosts), on JAX's own multi-controller runtime.

Every process runs the same program (SPMD) over one mesh of all processes' devices. vidax adds only
what a generation needs on top of `jax.distributed`:

- `join`: start or join the run. Explicit `--coordinator HOST:PORT --num-processes N --process-id I`
  (or `VIDAX_COORDINATOR`, `VIDAX_NUM_PROCESSES`, `VIDAX_PROCESS_ID`), else JAX's own detection where
  the platform says the job has several processes (a TPU pod slice, SLURM with several tasks, Open
  MPI), else a single process. On CPU the collectives go through gloo. Process 0 refuses a coordinator
  port that is already taken; the others refuse at once a port that answers but not as a coordinator;
  all give up after the join timeout (`join_timeout`, `VIDAX_JOIN_TIMEOUT`, 300 s).
- `same_everywhere`: right after joining, at the start of each generation (`request_record`) and once
  its preparation is over (`run_record`: resolved settings, mesh, initial latents' hash), every process
  compares what it was asked to do with process 0; any difference stops them all with one line naming
  the field and both values. Input files (an image, a family's video, frame folder or reference images,
  wherever each host keeps its copy) are compared by their contents (`file_contents`), not their paths.
- `to_host`: a mesh output as one NumPy array on every process (a process cannot read another's
  shards with `np.asarray`).
- `agree`: a barrier that carries success: when any process failed to prepare (bad input, missing
  file), every process stops with one line naming the failed ones and quoting the first's error,
  instead of hanging in the first collective. It goes through the coordinator's key-value store, so
  processes may reach it far apart (a first gloo collective gives up after 30 s).
- `run_guard`: around the generation: an error this process alone hit (a collective that failed
  because a peer died, a bug, Ctrl-C) makes it leave at once instead of waiting for its peers at exit.
- `is_writer`: only process 0 writes the video, sidecar and latents.

A peer that dies mid-run ends every survivor with one line and exit code 1, at once: process 0 holds
a connection from every peer and stops when one closes early; the others stop when process 0 (the
coordinator) is gone, or when a collective fails under them. Where those connections cannot be made,
the coordination service's heartbeat (`heartbeat_timeout` seconds, `VIDAX_HEARTBEAT_TIMEOUT`) does it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import numpy as np

from vidax.translator import VidaxError

DEFAULT_HEARTBEAT_TIMEOUT = 60  # seconds without a heartbeat before a peer counts as dead
DEFAULT_JOIN_TIMEOUT = 300  # seconds to wait for every process to join
_ENV = {"coordinator": "VIDAX_COORDINATOR", "num_processes": "VIDAX_NUM_PROCESSES", "process_id": "VIDAX_PROCESS_ID"}
_TIMEOUT_ENV = {"heartbeat_timeout": "VIDAX_HEARTBEAT_TIMEOUT", "join_timeout": "VIDAX_JOIN_TIMEOUT"}
_PROBE_SECONDS = 3  # how long a listening coordinator may take to answer a probe
_GRACE_SECONDS = 3  # how long a process already stopping with its own error line gets to print it
_AGREE_TIMEOUT = 24 * 3600  # seconds processes wait for each other's preparation (alive but slow)
# a collective that failed because a peer process is gone or far behind (gloo on CPU, NCCL/MPI elsewhere)
_PEER_GONE = re.compile(r"connection (closed|reset) by peer|broken pipe|socket closed|(gloo|nccl|mpi)\w* .*fail", re.I)


class DistributedError(VidaxError):
    """A multi-process run that cannot start, or a process whose peers failed."""


@dataclasses.dataclass
class _Run:
    """What this process knows of its multi-process run; read by the hooks JAX's runtime calls."""

    where: str = ""  # "coordinator HOST:PORT" or "the SLURM environment"
    process: int = 0
    heartbeat: int = DEFAULT_HEARTBEAT_TIMEOUT
    join_timeout: int = DEFAULT_JOIN_TIMEOUT
    joined: bool = False
    join_status: str = ""  # what the runtime reported while joining
    rounds: dict = dataclasses.field(default_factory=dict)  # comparisons made so far, by stage
    agreed: BaseException | None = None  # the last error every process learned of through `agree`
    leaving: int | None = None  # exit code of a process that failed alone
    exiting: bool = False  # this process has reached its exit: peers leaving now is expected
    hooks: list = dataclasses.field(default_factory=list)  # C callbacks and sockets kept for the process's life


_run = _Run()


def detected_multiprocess_env() -> str | None:
    """The cluster environment that says this job has several processes (None: a single process)."""
    if int(os.environ.get("SLURM_NTASKS", os.environ.get("SLURM_STEP_NUM_TASKS", "1")) or 1) > 1:
        return "SLURM"
    if int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1") or 1) > 1:
        return "Open MPI"
    if "," in os.environ.get("TPU_WORKER_HOSTNAMES", ""):
        return "TPU pod slice"
    return None


# --- joining -------------------------------------------------------------------------------------


def join(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None, *,
         heartbeat_timeout: int | None = None, join_timeout: int | None = None) -> bool:
    """Join a multi-process run when one is asked for or detected; returns whether there is one.

    Call it before anything touches a jax backend (devices, arrays). Once joined, the processes
    compare their process counts and versions; a difference stops them all with one line.
    """
    given = _given(coordinator, num_processes, process_id)
    explicit = any(v is not None for v in given.values())
    detected = None if explicit else detected_multiprocess_env()
    if not explicit and detected is None:
        return False
    if jax.distributed.is_initialized():
        return jax.process_count() > 1
    _run.heartbeat = _seconds("heartbeat_timeout", heartbeat_timeout, DEFAULT_HEARTBEAT_TIMEOUT)
    _run.join_timeout = _seconds("join_timeout", join_timeout, DEFAULT_JOIN_TIMEOUT)
    _run.where = f"coordinator {given['coordinator']}" if explicit else f"the {detected} environment"
    deadline = time.monotonic() + _run.join_timeout
    kwargs: dict[str, Any] = dict(heartbeat_timeout_seconds=_run.heartbeat)
    if explicit:
        kwargs.update(coordinator_address=given["coordinator"], num_processes=given["num_processes"],
                      process_id=given["process_id"])
        _before_connecting(given["coordinator"], given["process_id"], deadline)
    _quiet_runtime()
    try:
        _initialize(**kwargs, initialization_timeout=max(1, math.ceil(deadline - time.monotonic())))
    except (RuntimeError, ValueError, TypeError) as err:
        _forget_failed_join()
        raise DistributedError(_join_failure(err)) from None
    _run.joined, _run.process = True, _runtime_state().process_id
    _catch_runtime_aborts()
    atexit.register(_leave_without_waiting)  # runs before jax's own exit hook (registered earlier)
    _compare_join()
    _watch_peers(given["coordinator"] or _runtime_state().coordinator_address)
    return jax.process_count() > 1


def _given(coordinator, num_processes, process_id) -> dict[str, Any]:
    """The explicit coordinates (flags, else VIDAX_* variables), checked: all three or none."""
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    for key, env in _ENV.items():
        if given[key] is None and os.environ.get(env):
            given[key] = os.environ[env]
    if all(v is None for v in given.values()):
        return given
    missing = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is None]
    if missing:
        raise DistributedError(f"a multi-process run needs --coordinator, --num-processes and --process-id "
                               f"(or {', '.join(_ENV.values())}); missing {', '.join(missing)}")
    try:
        count, index = int(given["num_processes"]), int(given["process_id"])
    except ValueError:
        raise DistributedError(f"--num-processes and --process-id are integers, got {given['num_processes']!r} "
                               f"and {given['process_id']!r}") from None
    if count < 1 or not 0 <= index < count:
        raise DistributedError(f"--process-id must be in [0, {count}) for --num-processes {count}, got {index}")
    if ":" not in str(given["coordinator"]):
        raise DistributedError(f"--coordinator is HOST:PORT, got {given['coordinator']!r}")
    return {"coordinator": str(given["coordinator"]), "num_processes": count, "process_id": index}


def _seconds(name: str, value: int | None, default: int) -> int:
    """A timeout in whole seconds from the argument, else its VIDAX_* variable, else the default."""
    text = value if value is not None else os.environ.get(_TIMEOUT_ENV[name], default)
    try:
        seconds = int(text)
    except (TypeError, ValueError):
        flag = name.replace("_", "-")
        raise DistributedError(f"--{flag} ({_TIMEOUT_ENV[name]}) is whole seconds, got {text!r}") from None
    if seconds < 1:
        raise DistributedError(f"--{name.replace('_', '-')} must be at least 1 second, got {seconds}")
    return seconds


def _before_connecting(address: str, process_id: int, deadline: float) -> None:
    """Fail fast where JAX would wait out the whole join timeout: process 0 on a port already taken
    (its coordinator could not listen), the others on a port held by something else."""
    host, port = _host_port(address)
    if process_id == 0:
        _refuse_a_taken_port(address, port)
    else:
        _await_coordinator(address, host, port, deadline)


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise DistributedError(f"--coordinator is HOST:PORT, got {address!r}") from None


def _refuse_a_taken_port(address: str, port: int) -> None:
    """The coordinator listens on every interface at `port` (as JAX binds it): refuse a port in use."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed run's TIME_WAIT is no conflict
                probe.bind((host, port))
            return
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise DistributedError(f"cannot start the coordinator at {address}: port {port} is already in use on "
                                       f"this host (another program, or an earlier run still going); choose another "
                                       f"port and give it to every process") from None
            # no IPv6 on this host: try IPv4


def _await_coordinator(address: str, host: str, port: int, deadline: float) -> None:
    """Wait until process 0's coordinator listens; refuse at once a port that answers otherwise."""
    while True:
        answer = _coordinator_answers(host, port)
        if answer:
            return
        if answer is False:
            raise DistributedError(f"{address} answers, but not as a JAX coordinator (another program holds the port, "
                                   f"or process 0 could not start there); choose another port for every process")
        if time.monotonic() > deadline:
            raise DistributedError(f"no coordinator at {address} within the join timeout ({_run.join_timeout} s): "
                                   f"start process 0 there, or raise --join-timeout")
        time.sleep(0.25)


_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # preface + empty SETTINGS


def _coordinator_answers(host: str, port: int) -> bool | None:
    """True: an HTTP/2 server (JAX's coordinator speaks gRPC) answers the client preface with its
    SETTINGS frame; False: something else holds the port; None: nothing listens (yet)."""
    try:
        conn = socket.create_connection((host, port), timeout=_PROBE_SECONDS)
    except OSError:
        return None
    with conn:
        try:
            conn.sendall(_HTTP2_HELLO)
            head = b""
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except OSError:  # no answer in time, or the connection was reset
            return False
    return len(head) == 9 and head[3] == 4  # frame type 4: SETTINGS


def _quiet_runtime() -> None:
    """The runtime's C++ log lines (a peer's death logs several) give way to vidax's one line, unless
    JAX's own logging level was set; the preemption service (unused here) polls and logs too."""
    if jax.config.jax_logging_level in (None, "NOTSET"):
        jax.config.update("jax_logging_level", "CRITICAL")
    jax.config.update("jax_enable_preemption_service", False)
    if (jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "")).startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def _runtime_state():
    from jax._src import distributed as runtime

    return runtime.global_state


class _Overlay:
    """A module seen through a few replaced attributes."""

    def __init__(self, module, **replaced):
        self._module, self._replaced = module, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._module, name)


def _initialize(**kwargs) -> None:
    """`jax.distributed.initialize`, whose client gets vidax's fatal-error hook: JAX passes none on,
    and the default one aborts the process (SIGABRT, a C++ stack trace) when a peer dies."""
    from jax._src import distributed as runtime

    native = runtime._jax
    make_client = native.get_distributed_runtime_client

    def client_with_hook(*args, **options):
        return make_client(*args, **{"missed_heartbeat_callback": _on_runtime_failure, **options})

    runtime._jax = _Overlay(native, get_distributed_runtime_client=client_with_hook)
    try:
        jax.distributed.initialize(**kwargs)
    finally:
        runtime._jax = native


def _forget_failed_join() -> None:
    """Drop what a failed join left behind, so that exiting does not shut it down again and fail."""
    state = _runtime_state()
    service, state.client, state.service, state.preemption_sync_manager = state.service, None, None, None
    if service is not None:
        with contextlib.suppress(Exception):
            service.shutdown()


def _join_failure(err: BaseException) -> str:
    """One line for a join that did not complete: what the runtime said, or what most likely happened."""
    said = _run.join_status or str(err).splitlines()[0]
    if said in ("std::bad_cast", ""):  # the runtime's own report could not reach Python (see _catch_runtime_aborts)
        said = (f"not every process joined within the join timeout ({_run.join_timeout} s); is every process "
                f"given the same --coordinator and --num-processes, and started?")
    return f"could not join the multi-process run through {_run.where}: {said}"


# --- a peer that dies -----------------------------------------------------------------------------


def _on_runtime_failure(status: Any = None) -> None:
    """JAX's runtime found the run broken (a peer missed its heartbeats, or the coordinator is gone):
    one line, exit 1. While joining, the join itself reports it."""
    if not _run.joined:
        _run.join_status = str(status).splitlines()[0] if status else ""
        return
    _stop(f"the multi-process run lost a process: one died, was killed or stopped answering for "
          f"{_run.heartbeat} s, or the coordinator (process 0) is gone; process {_run.process} stops too")


def _stop(line: str) -> None:
    """End this process from a thread other than the main one: its one line, exit code 1."""
    if _run.leaving is not None:  # the main thread is stopping with its own error line: let it finish
        time.sleep(_GRACE_SECONDS)
    os.write(2, f"error: {line}\n".encode())
    os._exit(1)


def _watch_peers(coordinator: str) -> None:
    """Every process holds a connection to process 0, which learns at once that a peer is gone (the
    connection closes) instead of when its heartbeat runs out; process 0 then stops, and the others
    with it (they lose the coordinator). Where no connection can be made the heartbeat still serves."""
    host, _ = _host_port(coordinator)
    if _run.process == 0:
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        server = socket.create_server(("", 0), family=family, dualstack_ipv6=family == socket.AF_INET6)
        _run.hooks.append(server)
        threading.Thread(target=_accept_peers, args=(server,), daemon=True).start()
        _runtime_state().client.key_value_set("vidax/watch", str(server.getsockname()[1]))
        return
    with contextlib.suppress(Exception):  # the runtime's timeout error, or no route: rely on the heartbeat
        port = int(_runtime_state().client.blocking_key_value_get("vidax/watch", _run.join_timeout * 1000))
        connection = socket.create_connection((host, port), timeout=_PROBE_SECONDS)
        connection.sendall(f"{_run.process}\n".encode())
        _run.hooks.append(connection)


def _accept_peers(server: socket.socket) -> None:
    while True:
        connection, _ = server.accept()
        threading.Thread(target=_watch_peer, args=(connection,), daemon=True).start()


def _watch_peer(connection: socket.socket) -> None:
    """Process 0's watch over one peer: its connection closing before this process exits means it died."""
    with connection:
        peer = b""
        with contextlib.suppress(OSError):
            while not peer.endswith(b"\n"):
                chunk = connection.recv(16)
                if not chunk:
                    break
                peer += chunk
            while connection.recv(16):  # peers send nothing more: this returns when the peer is gone
                pass
    if not _run.exiting:
        _stop(f"process {peer.decode().strip() or '?'} of the multi-process run stopped (it died, was killed or "
              f"failed on its own); process 0 stops too")


def _catch_runtime_aborts() -> None:
    """Route the runtime's fatal-error path to `_on_runtime_failure`. jaxlib calls the client's hook
    with a C++ status it cannot hand to Python: the conversion throws in the runtime's own thread and
    the process ends through std::terminate, which this replaces (libstdc++ or libc++)."""
    handler = ctypes.CFUNCTYPE(None)(_on_runtime_failure)
    for library in ("libstdc++.so.6", "libc++.1.dylib", "libc++.so.1"):
        try:
            set_terminate = ctypes.CDLL(library)._ZSt13set_terminatePFvvE
        except (OSError, AttributeError):
            continue
        set_terminate.restype, set_terminate.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        set_terminate(ctypes.cast(handler, ctypes.c_void_p))
        _run.hooks.append(handler)
        return


def _leave_without_waiting() -> None:
    """At exit, a process that failed alone leaves at once: JAX's exit hook would wait for its peers
    at the shutdown barrier until the heartbeat timeout, and then abort. The others wait there for each
    other, and their watch connections may close from now on."""
    _run.exiting = True
    if _run.leaving is not None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(_run.leaving)


@contextlib.contextmanager
def run_guard():
    """Around the part of a generation where the processes work in step. An error only this process
    hit makes it leave without waiting for its peers at exit (they stop when it is gone); a collective
    that failed because a peer died reads as one line saying so."""
    try:
        yield
    except BaseException as err:
        if not _run.joined or isinstance(err, DistributedError) or err is _run.agreed:
            raise
        _run.leaving = 130 if isinstance(err, KeyboardInterrupt) else 1
        said = str(err).splitlines()[0] if str(err) else ""
        if _PEER_GONE.search(said):
            said = re.sub(r"\[[^\]]*\.cc:\d+\] ", "", said)[:200]
            raise DistributedError(f"a collective with the other processes failed ({said}): one of them died, "
                                   f"was killed or stopped answering; process {_run.process} stops too") from err
        raise


# --- every process asked for the same thing ------------------------------------------------------


def same_everywhere(stage: str, record: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
                    count: int | None = None) -> None:
    """Every process's `record` equals process 0's; else all stop with one line naming the first field
    that differs and both values. `record`: the mapping, or a function making it (called only when
    there are several processes); `count`: the number of processes (default: jax's)."""
    if not jax.distributed.is_initialized():
        return
    count = jax.process_count() if count is None else count
    if count < 2:
        return
    mine = {"same": _flatten(record() if callable(record) else record)}
    records = _exchange(stage, mine, count, _run.join_timeout)
    _stop_on_difference(stage, {p: r["same"] for p, r in records.items()})


_HINTS = {"join": "start every process with the same --num-processes and the same jax and vidax",
          "generation": "give every process the same model, weights, settings and inputs"}


def _stop_on_difference(stage: str, records: dict[int, dict]) -> None:
    difference = _first_difference(records)
    if difference:
        raise DistributedError(f"the processes were not given the same run: {difference}; "
                               f"{_HINTS.get(stage, _HINTS['generation'])}")


def _compare_join() -> None:
    """Process counts and versions, compared before the backend starts (it waits for the number of
    processes each was told): the count to compare over is process 0's, the coordinator's."""
    from vidax.translator.version import version

    vidax = version()  # a checkout on PYTHONPATH: its pyproject.toml's
    told = _runtime_state().num_processes
    mine = {"num_processes": told, "jax": jax.__version__, "vidax": vidax}
    if _run.process:  # the first exchange of this stage: its round 0
        told = json.loads(_fetch(_key("join", 0, 0), "join", _run.join_timeout))["same"]["num_processes"]
    same_everywhere("join", mine, count=int(told))


def _key(stage: str, round_: int, process: int) -> str:
    return f"vidax/{stage}/{round_}/{process}"


def _exchange(stage: str, mine: dict, count: int, timeout_s: int) -> dict[int, dict]:
    """Each process's record (JSON) for this stage's next round, through the coordinator's key-value
    store: no collective, so processes may reach it far apart (a first gloo collective waits 30 s)."""
    me = _runtime_state().process_id
    round_ = _run.rounds[stage] = _run.rounds.get(stage, -1) + 1
    text = json.dumps(mine, sort_keys=True, default=str)
    _runtime_state().client.key_value_set(_key(stage, round_, me), text)
    return {p: json.loads(text if p == me else _fetch(_key(stage, round_, p), stage, timeout_s)) for p in range(count)}


def _fetch(key: str, stage: str, timeout_s: int) -> str:
    try:
        return _runtime_state().client.blocking_key_value_get(key, timeout_s * 1000)
    except Exception:  # the runtime's own error type
        process = key.rsplit("/", 1)[1]
        raise DistributedError(f"process {process} did not reach the {stage} check within {timeout_s} s; "
                               f"stopping") from None


def _first_difference(records: dict[int, dict]) -> str | None:
    base = records[0]
    for process in sorted(records)[1:]:
        other = records[process]
        for field in sorted(set(base) | set(other)):
            a, b = base.get(field, "(not given)"), other.get(field, "(not given)")
            if a != b and not _unreadable(a) and not _unreadable(b):
                return f"{field} is {_show(a)} on process 0 but {_show(b)} on process {process}"
    return None


def _unreadable(value: Any) -> bool:
    """A file this process could not read: its own preparation reports that, more precisely."""
    return isinstance(value, str) and value.startswith("unreadable:")


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted fields; values as JSON gives them back (a round trip compares equal)."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.loads(json.dumps(value, default=str))
    return flat


# How a GenerateOptions field is compared across processes: by value unless named here (None: not at
# all, it is each host's own; "weights": the converted folder's manifests and configs; "file": contents).
_REQUEST_RULES: dict[str, str | None] = {"out": None, "compile_cache": None, "weights": "weights",
                                         "latents": "file", "image": "file", "images": "files", "extra": "extra",
                                         "mag_ratios": "file", "cache_calibrate": None,
                                         # a DiT's own file (GGUF, fp8): by name and size, as a weights file
                                         "transformer": "weights", "transformer_2": "weights"}


def request_record(options: Any) -> dict[str, Any]:
    """What a generation was asked for, as compared across processes: every option but the output path
    and the compile cache; files by their contents, the weights by their converted folder's JSON files."""
    record: dict[str, Any] = {}
    for field in dataclasses.fields(options):
        value, rule = getattr(options, field.name), _REQUEST_RULES.get(field.name, "value")
        if rule == "weights":
            value = weights_fingerprint(value)
        elif rule == "file":
            value = None if value is None else _file_digest(Path(value))
        elif rule == "files":
            value = {role: _file_digest(Path(path)) for role, path in dict(value or {}).items()}
        elif rule == "extra":  # a family's own settings; its file inputs (a video, frames, images) by their contents
            value = {k: file_contents(v) for k, v in dict(value or {}).items()}
        if rule is not None:
            record[field.name] = value
    return record


def run_record(settings: Any, options: Any, mesh: Any, latents: Any) -> dict[str, Any]:
    """What a generation resolved to once prepared: every resolved setting, the chosen layout (in the
    options), the mesh's axes and device order, and the initial latents' hash."""
    array = np.ascontiguousarray(np.asarray(latents))
    digest = hashlib.sha256(f"{array.dtype}{array.shape}".encode() + array.tobytes()).hexdigest()[:16]
    layout = None if mesh is None else {"axes": dict(mesh.shape), "devices": np.asarray(mesh.device_ids).tolist()}
    resolved = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)
    resolved = {k: file_contents(v) for k, v in resolved.items()}  # each host's uploads sit in its own folder
    return {"resolved": resolved, "request": request_record(options), "mesh": layout, "latents": f"sha256:{digest}"}


def weights_fingerprint(weights: Any) -> Any:
    """A converted folder's identity without reading its shards: the digest of every JSON file in it
    and its component folders (manifests list each shard's size and the source it came from; configs).
    A folder copied to every host matches; separately converted ones differ in their manifests."""
    path = Path(str(weights)).expanduser() if weights is not None else None
    if path is None or not path.exists():
        return None if weights is None else str(weights)  # a Hub repo id
    if path.is_file():
        return {"file": path.name, "bytes": path.stat().st_size}
    files = sorted([*path.glob("*.json"), *path.glob("*/*.json")])
    return {str(f.relative_to(path)): _file_digest(f) for f in files}


def file_contents(value: Any) -> Any:
    """A value as processes compare it: a file by the digest of its bytes, a folder (of frames) by its files'
    names and bytes, several files each so; anything else as it is. Each host keeps its own copy of a job's
    uploads (vidax-serve writes them under its data folder), so their paths differ while their contents
    must not."""
    if isinstance(value, Path):
        return _folder_digest(value) if value.is_dir() else _file_digest(value)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, Path) for v in value):
        return [file_contents(v) for v in value]
    return value


def _folder_digest(path: Path) -> str:
    """The digest of a folder's files (not its subfolders), by name order: each name and its bytes' digest."""
    digest = hashlib.sha256()
    try:
        files = sorted(p for p in path.iterdir() if p.is_file())
    except OSError:
        return f"unreadable:{path}"
    for file in files:
        digest.update(f"{file.name}\0{_file_digest(file)}\n".encode())
    return f"folder sha256:{digest.hexdigest()[:16]}"


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return f"unreadable:{path}"
    return f"sha256:{digest.hexdigest()[:16]}"


# --- in step -------------------------------------------------------------------------------------


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


def agree(error: BaseException | None, stage: str,
          same: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None) -> None:
    """Every process reports whether `stage` went well; any failure stops them all, with one line.

    The failing process re-raises its own error; the others raise a `DistributedError` naming it and
    quoting its line. `same`: a record every process must also share (as `same_everywhere`) once all
    went well. Processes may reach it far apart (one loads its weights slower): they wait for each
    other as long as they live (a dead one is caught by the heartbeat).
    """
    if not multiprocess():
        if error is not None:
            raise error
        return
    mine: dict[str, Any] = {"failed": None if error is None else _one_line(error)}
    if error is None and same is not None:
        mine["same"] = _flatten(same() if callable(same) else same)
    records = _exchange(f"agree-{stage}", mine, jax.process_count(), _AGREE_TIMEOUT)
    if error is not None:
        _run.agreed = error
        raise error
    failed = {p: r["failed"] for p, r in records.items() if r["failed"] is not None}
    if failed:
        said = next(iter(failed.values()))
        raise DistributedError(f"process {', '.join(map(str, failed))} failed during {stage} ({said}); stopping")
    if same is not None:
        _stop_on_difference(stage, {p: r["same"] for p, r in records.items()})


def agreed_by_all(error: BaseException) -> BaseException:
    """Mark `error` as one every process raises at the same point, from a decision they shared (a server's
    cancelled job): `run_guard` lets it through without this process leaving alone. Returns it."""
    _run.agreed = error
    return error


def _one_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
