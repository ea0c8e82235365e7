"""Several hosts serving one model: process 0 takes the HTTP requests, every process runs each job.

A job's DiT runs on a mesh over every host's devices, so every process must start the same generation
and stop where process 0 stops, as `vidax-gen`'s processes do. Process 0 announces each job through the
coordinator's key-value store before it starts it (its options, and the bytes of its uploads: the other
hosts do not share its disk), and at every progress hook whether the job goes on; the others follow.
The key-value store carries the messages because the followers wait for jobs far apart (a queue may stay
empty for hours) and a collective would time out; inside a job the collectives keep them in step.

Messages, by job number `n` (0: the warm-up):
  `vidax/serve/job/{n}`: `{"options": ..., "uploads": {field: file(s)}}` (`job_message`), or `{"stop": true}`;
  `vidax/serve/job/{n}/hook/{k}`: "go", "cancel" (the job stops, the server goes on) or "stop".
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("vidax.serve")

WAIT_MS = 24 * 3600 * 1000  # a follower waits this long for the next job before asking again
GO, CANCEL, STOP = "go", "cancel", "stop"


class JobCancelled(Exception):
    """Raised from the progress hooks at the next step of a job whose cancellation was asked."""


class ServerStopping(Exception):
    """Raised from the progress hooks when the server stops: the job goes back to the queue."""


def _client():
    from vidax.zoo.compute.distributed import _runtime_state

    return _runtime_state().client


def several_processes() -> bool:
    from vidax.zoo.compute.distributed import multiprocess

    return multiprocess()


def _taken_together(error: BaseException) -> BaseException:
    """An error every process raises at the same hook: the run's guard lets it through as agreed (no
    process leaves alone), and the server goes on to its next job."""
    from vidax.zoo.compute.distributed import agreed_by_all

    return agreed_by_all(error)


class Announcer:
    """Process 0's side: numbers the jobs, announces each one and every hook's decision."""

    def __init__(self):
        self.job = -1

    def announce(self, options) -> None:
        self.job += 1
        _client().key_value_set(f"vidax/serve/job/{self.job}", json.dumps(job_message(options), default=str))

    def stop(self) -> None:
        """No more jobs: the followers leave."""
        _client().key_value_set(f"vidax/serve/job/{self.job + 1}", json.dumps({"stop": True}))

    def progress(self, inner) -> "LeaderProgress":
        return LeaderProgress(inner, f"vidax/serve/job/{self.job}/hook")


class LeaderProgress:
    """Process 0's progress hooks: the job's own (which raise to cancel or stop it), each decision
    announced before it takes effect, so every process stops at the same hook."""

    def __init__(self, inner, prefix: str):
        self.inner, self.prefix, self.count = inner, prefix, 0

    def _decide(self, hook) -> None:
        key, self.count = f"{self.prefix}/{self.count}", self.count + 1
        try:
            hook()
        except JobCancelled as err:
            _client().key_value_set(key, CANCEL)
            raise _taken_together(err)
        except ServerStopping as err:
            _client().key_value_set(key, STOP)
            raise _taken_together(err)
        _client().key_value_set(key, GO)

    def begin(self, stage: str, total: int | None = None) -> None:
        self._decide(lambda: self.inner.begin(stage, total))

    def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
        self._decide(lambda: self.inner.advance(stage, amount, note))

    def end(self, stage: str, seconds: float) -> None:
        self._decide(lambda: self.inner.end(stage, seconds))


class FollowerProgress:
    """A following process's progress hooks: each waits for process 0's decision at the same hook."""

    def __init__(self, prefix: str):
        self.prefix, self.count = prefix, 0

    def _follow(self) -> None:
        key, self.count = f"{self.prefix}/{self.count}", self.count + 1
        decision = _client().blocking_key_value_get(key, WAIT_MS)
        if decision == CANCEL:
            raise _taken_together(JobCancelled())
        if decision == STOP:
            raise _taken_together(ServerStopping())

    def begin(self, stage: str, total: int | None = None) -> None:
        self._follow()

    def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
        self._follow()

    def end(self, stage: str, seconds: float) -> None:
        self._follow()


def follow(server) -> int:
    """A process other than 0: run every job process 0 announces, in step with it, until it stops."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.api import generate
    from vidax.zoo.generator.stages import StageCache

    stages = StageCache()  # the weights stay placed between jobs, as on process 0
    job = 0
    with tempfile.TemporaryDirectory(prefix="vidax-serve-follower-") as scratch:
        while True:
            message = json.loads(_next_message(f"vidax/serve/job/{job}"))
            if message.get("stop"):
                stages.release()
                return 0
            options = _options(GenerateOptions, message, Path(scratch) / str(job))
            try:
                generate(options, FollowerProgress(f"vidax/serve/job/{job}/hook"), cache=stages)
            except (JobCancelled, ServerStopping):
                pass
            except Exception as err:  # process 0 fails the job with its own line; this one goes on
                log.warning("job %d failed: %s", job, str(err).splitlines()[0] if str(err) else type(err).__name__)
            job += 1


def _next_message(key: str) -> str:
    while True:
        try:
            return _client().blocking_key_value_get(key, WAIT_MS)
        except Exception as err:  # the runtime's own error: a timeout (ask again), or the coordinator gone
            if "deadline" not in str(err).lower():
                raise


def job_message(options) -> dict:
    """A job as process 0 announces it: its options, and the bytes of every file it reads (the image, the
    images, a family's file inputs: one file, a repeatable flag's files, or a folder of frames), by name."""
    fields = {k: v for k, v in dataclasses.asdict(options).items() if k not in ("out", "image", "images")}
    extra = {k: v for k, v in fields.pop("extra").items() if not _is_file(v)}
    files = {"image": options.image, **{f"images/{r}": p for r, p in options.images.items()},
             **{f"extra/{k}": v for k, v in options.extra.items() if _is_file(v)}}
    return {"options": {**fields, "extra": extra, "suffix": Path(options.out).suffix},
            "uploads": {name: _packed(path) for name, path in files.items() if path is not None}}


def _is_file(value) -> bool:
    return isinstance(value, Path) or (isinstance(value, tuple) and bool(value) and
                                       all(isinstance(v, Path) for v in value))


def _packed(path) -> Any:
    """One file `{"name", "data"}`, a folder `{"name", "files": {name: data}}`, several files a list of them."""
    if isinstance(path, tuple):
        return [_packed(one) for one in path]
    path = Path(path)
    if path.is_dir():
        return {"name": path.name, "files": {p.name: _bytes(p) for p in sorted(path.iterdir()) if p.is_file()}}
    return {"name": path.name, "data": _bytes(path)}


def _bytes(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _unpacked(packed: Any, folder: Path) -> Any:
    """The files of `_packed` written under `folder` (their names kept: readers go by suffix), their path(s)."""
    if isinstance(packed, list):
        return tuple(_unpacked(one, folder / str(i)) for i, one in enumerate(packed))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / packed["name"]
    if "files" in packed:
        path.mkdir()
        for name, data in packed["files"].items():
            (path / name).write_bytes(base64.b64decode(data))
    else:
        path.write_bytes(base64.b64decode(packed["data"]))
    return path


def _options(make, message: dict[str, Any], folder: Path):
    """The job's options on this host: its uploads written under `folder`, its output there too (only
    process 0 writes outputs; the path must only be valid)."""
    folder.mkdir(parents=True)
    paths = {name: _unpacked(packed, folder / name.replace("/", "_")) for name, packed in message["uploads"].items()}
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in message["options"].items()}  # JSON's lists
    suffix = fields.pop("suffix")
    extra = {**fields.pop("extra"), **{n[6:]: p for n, p in paths.items() if n.startswith("extra/")}}
    images = {n[7:]: p for n, p in paths.items() if n.startswith("images/")}
    return make(**fields, image=paths.get("image"), images=images, extra=extra, out=folder / f"video{suffix}")
