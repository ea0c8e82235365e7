"""The server's engine: one worker thread runs the queued jobs one at a time through `generate`.

The model's programs stay compiled in this process (jax's in-memory caches, and the persistent
compile cache on disk), so every job after the warm-up skips the compile a fresh `vidax-gen` pays.
Each job writes under `partial/` and its video is renamed into `videos/` before the job is marked
succeeded: a video in `videos/` is whole, and a job is never reported succeeded without one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
import time
import traceback
from pathlib import Path

from vidax.serve import store as jobs
from vidax.serve.lockstep import Announcer, JobCancelled, ServerStopping, several_processes
from vidax.serve.requests import FORMATS, ServerOptions, build_options, check, command_line, family_flags, file_names
from vidax.serve.requests import output_suffix
from vidax.translator import VidaxError
from vidax.translator.output import fsync_path

log = logging.getLogger("vidax.serve")

KEPT_TRAILS = 64  # jobs whose every progress state is kept for their event streams
MAX_TRAIL = 10_000  # progress states kept per job
LAYOUT_FIELDS = ("tp", "sp", "dp", "offload_chunk")
# Settings of the sidecar that name server paths: a response names jobs by id only.
PRIVATE_SETTINGS = ("out", "image", "images", "latents", "weights", "weights_source", "save_latents", "compile_cache")


class JobProgress:
    """`vidax.zoo.compute.progress.Progress` for a job: stage, step i of N, elapsed and ETA, kept for the API;
    raises `JobCancelled` at the next hook once the job is cancelled.

    Stages nest (weights converted on the fly inside "denoise"): each open stage keeps its own count, and
    the one shown is the one that last moved.
    """

    def __init__(self, service: "Service", job_id: str):
        self.service, self.job_id = service, job_id
        self.start = time.time()
        self.open: dict[str, dict] = {}  # stage -> {"step", "total", "start"}, in the order they began
        self.saved = 0.0

    def _check(self) -> None:
        if self.job_id in self.service.cancel_asked:
            raise JobCancelled()
        if self.service.stopping.is_set():
            raise ServerStopping()

    def begin(self, stage: str, total: int | None = None) -> None:
        self._check()
        self.open[stage] = {"step": 0, "total": total, "start": time.time()}
        self._publish(stage, force=True)

    def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
        self._check()
        if stage in self.open:
            self.open[stage]["step"] += amount
            self._publish(stage)

    def end(self, stage: str, seconds: float) -> None:
        self._check()
        self.open.pop(stage, None)
        if self.open:  # back to the enclosing stage
            self._publish(next(reversed(self.open)), force=True)

    def _publish(self, stage: str, force: bool = False) -> None:
        now, counts = time.time(), self.open[stage]
        done, total = counts["step"], counts["total"]
        eta = (now - counts["start"]) / done * (total - done) if total and done else None
        state = {"stage": stage, "step": done, "total": total, "elapsed": round(now - self.start, 3),
                 "eta": None if eta is None else round(eta, 3)}
        self.service.publish(self.job_id, state)
        if force or now - self.saved > 0.5 or (total and done >= total):  # the database sees it, bounded
            self.service.store.set_progress(self.job_id, state)
            self.saved = now


class Service:
    """The job store, the output folders and the worker thread.

    Args:
      server: the model and its model-level settings.
      data: the data folder (`jobs.sqlite3`, `videos/`, `uploads/`, `partial/`).
      max_queue: queued jobs beyond which a submission is refused (HTTP 429).
      warmup: run one job at the model's default size before the first request (compiles everything).
    """

    def __init__(self, server: ServerOptions, data: str | Path, *, max_queue: int = 32, warmup: bool = True):
        self.server = server
        self.data = Path(data)
        self.videos, self.uploads, self.partial = (self.data / name for name in ("videos", "uploads", "partial"))
        for folder in (self.videos, self.uploads, self.partial):
            folder.mkdir(parents=True, exist_ok=True)
        self.store = jobs.JobStore(self.data / "jobs.sqlite3")
        self.recovered = self.store.recover(lambda job_id: self.video_path(job_id).is_file())
        shutil.rmtree(self.partial, ignore_errors=True)  # what a crash left half-written
        self.partial.mkdir()
        self.max_queue = max_queue
        self.warmup = warmup
        from vidax.zoo.generator.stages import StageCache

        self.stages = StageCache()  # the model's weights, placed by the warm-up, stay for every job
        self.state = "starting"  # -> warming -> ready, or failed (the warm-up's error in self.error)
        self.error: str | None = None
        self.live: dict[str, dict] = {}  # running job -> its latest progress (the database lags by <= 0.5 s)
        self.layouts: dict[str, dict] = {}  # resolved settings -> the planner's layout for them, and why
        self.trails: dict[str, list[dict]] = {}  # job -> every progress state it published (the events stream)
        self.running: str | None = None
        self.cancel_asked: set[str] = set()  # running jobs to stop at their next step
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._work, name="vidax-serve-worker", daemon=True)
        # several hosts: this is process 0, and every other process runs each job with it (vidax.serve.lockstep)
        self.lockstep = Announcer() if several_processes() else None

    # --- paths ------------------------------------------------------------------------------

    def video_path(self, job_id: str) -> Path:
        """The job's video in `videos/` (`.mp4`, or `.npy` frames when the request asked for them)."""
        for suffix in FORMATS.values():
            path = self.videos / f"{job_id}{suffix}"
            if path.is_file():
                return path
        return self.videos / f"{job_id}.mp4"

    def sidecar_path(self, job_id: str) -> Path:
        return self.videos / f"{job_id}.json"

    # --- requests ---------------------------------------------------------------------------

    def submit(self, fields: dict, uploads: dict[str, Path | tuple[Path, ...]], job_id: str) -> str:
        """Check a request like vidax-gen would and queue it; raises RequestError / VidaxError (400)."""
        options = build_options(self.server, fields, uploads, self.partial / f"{job_id}{output_suffix(fields)}")
        settings = check(options)
        request = {k: v for k, v in fields.items() if v is not None and k != "model"}
        request["uploads"] = {role: file_names(path) for role, path in uploads.items()}  # a tuple: a list
        self.store.add(request, settings, job_id)
        self.wake.set()
        return job_id

    def queue_full(self) -> bool:
        return self.store.count(jobs.QUEUED) >= self.max_queue

    def cancel(self, job_id: str) -> str | None:
        """Cancel a job: queued -> cancelled now; running -> stops at its next step. None when it has ended."""
        if self.store.cancel_queued(job_id):
            shutil.rmtree(self.uploads / job_id, ignore_errors=True)
            return jobs.CANCELLED
        record = self.store.get(job_id)
        if record is not None and record["status"] == jobs.RUNNING:
            self.cancel_asked.add(job_id)
            return "cancelling"
        return None

    def publish(self, job_id: str, state: dict) -> None:
        self.live[job_id] = state
        trail = self.trails.setdefault(job_id, [])
        if len(trail) < MAX_TRAIL:  # beyond it, streams see the latest state only
            trail.append(state)
        while len(self.trails) > KEPT_TRAILS:  # the oldest jobs' trails go (dicts keep insertion order)
            self.trails.pop(next(iter(self.trails)))

    def progress_since(self, job_id: str, index: int) -> list[dict]:
        """The progress states a job published from `index` on (every step, however fast)."""
        return list(self.trails.get(job_id, ())[index:])

    def status(self, job_id: str) -> dict | None:
        """The job as the API shows it: state, progress, settings (no server paths), timings, error."""
        record = self.store.get(job_id)
        if record is None:
            return None
        progress = self.live.get(job_id, record["progress"]) if record["status"] == jobs.RUNNING else record["progress"]
        request = {k: v for k, v in record["request"].items() if k != "uploads"}
        status = {
            "id": job_id, "status": record["status"], "model": self.server.model,
            "progress": progress or None, "request": request, "uploads": record["request"].get("uploads", {}),
            "settings": public(record["settings"], self.server.model),
            "times": record["times"], "error": record["error"], "attempts": record["attempts"],
            "created": record["created"], "started": record["started"], "finished": record["finished"],
            "command": command_line(self.server, request, record["request"].get("uploads", {})),
        }
        if record["status"] == jobs.RUNNING and job_id in self.cancel_asked:
            status["status"] = "cancelling"
        if record["status"] == jobs.SUCCEEDED:
            status["content"] = f"/v1/videos/{job_id}/content"
        return status

    # --- the worker -------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        self.wake.set()
        self.thread.join(timeout)
        self.store.close()
        if not self.thread.is_alive():
            self.stages.release()
            if self.lockstep is not None:
                self.lockstep.stop()

    def _work(self) -> None:
        try:
            if self.warmup:
                self.state = "warming"
                self._warm_up()
            self.state = "ready"
        except BaseException as err:  # the server reports it (/health, 503) instead of running jobs
            self.state, self.error = "failed", _one_line(err)
            log.error("warm-up failed: %s", self.error)
            return
        while not self.stopping.is_set():
            job = self.store.take_next()
            if job is None:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            self._run(job)

    def _warm_up(self) -> None:
        """One job at the model's default size: loads the weights, compiles every stage's programs."""
        from vidax.zoo.generator.options import GenerateOptions

        out = self.partial / "warmup.mp4"
        start = time.perf_counter()
        options = GenerateOptions(**dataclasses.asdict(self.server), prompt="warm-up", out=out)
        result = self._generate(options, check(options), None)
        log.info("warm-up done in %.1f s: %s", time.perf_counter() - start, result.settings["programs"]["summary"])
        for path in self.partial.glob("warmup.*"):
            path.unlink()

    def _run(self, job: dict) -> None:
        job_id = job["id"]
        self.running, self.live[job_id] = job_id, {"stage": "starting", "step": 0, "total": None}
        request = {k: v for k, v in job["request"].items() if k != "uploads"}
        out = self.partial / f"{job_id}{output_suffix(request)}"
        try:
            uploads = {role: tuple(self.uploads / job_id / n for n in name) if isinstance(name, list)
                       else self.uploads / job_id / name for role, name in job["request"].get("uploads", {}).items()}
            options = build_options(self.server, request, uploads, out)
            result = self._generate(options, job["settings"], JobProgress(self, job_id))
            log.info("job %s: %s", job_id, result.settings["programs"]["summary"])  # warm: none compiled or loaded
            settings = self._publish_outputs(job_id, out, result.settings["layout_choice"])
            self.store.finish(job_id, jobs.SUCCEEDED, settings={**job["settings"], **settings},
                              times={k: round(v, 4) for k, v in result.times.items()})
        except JobCancelled:
            self.store.finish(job_id, jobs.CANCELLED, error="cancelled while running")
        except ServerStopping:
            self.store.requeue(job_id)
            return  # its uploads stay for the next run
        except VidaxError as err:
            self.store.finish(job_id, jobs.FAILED, error=_one_line(err))
        except Exception as err:  # a bug: the job fails with its name, the traceback goes to the log
            log.error("job %s: %s", job_id, traceback.format_exc())
            self.store.finish(job_id, jobs.FAILED, error=f"internal error: {_one_line(err)}")
        finally:
            self.running = None
            self.live.pop(job_id, None)
            self.cancel_asked.discard(job_id)
            for path in self.partial.glob(f"{job_id}.*"):
                path.unlink()
        shutil.rmtree(self.uploads / job_id, ignore_errors=True)  # the job has ended: its inputs are not kept

    def _generate(self, options, settings: dict, progress):
        """`generate`, with the layout the memory planner chose for the same settings before given outright:
        planning builds the model's shapes (seconds on CPU), the same choice each time for one size."""
        from vidax.zoo.compute.progress import Progress
        from vidax.zoo.api import generate

        key = json.dumps({k: v for k, v in settings.items() if k not in ("seed", "negative_prompt")}, sort_keys=True)
        remembered = self.layouts.get(key)
        if remembered is not None:
            options = dataclasses.replace(options, **remembered["layout"])
        if self.lockstep is not None:  # the other processes start the same job and stop where this one stops
            self.lockstep.announce(options)
            progress = self.lockstep.progress(progress or Progress())
        result = generate(options, progress, cache=self.stages)
        if remembered is not None:
            result.settings["layout_choice"] = remembered["choice"]
        elif not any(getattr(self.server, field) is not None for field in LAYOUT_FIELDS):
            self.layouts[key] = {"layout": {field: result.settings[field] for field in LAYOUT_FIELDS},
                                 "choice": result.settings["layout_choice"]}
        return result

    def _publish_outputs(self, job_id: str, out: Path, layout_choice: str) -> dict:
        """Move a finished job's files into `videos/` (sidecar first, the video last: its presence is the
        job's success) and return its recorded settings, without server paths."""
        sidecar = json.loads(out.with_suffix(".json").read_text())
        video = self.videos / f"{job_id}{out.suffix}"
        sidecar["outputs"] = {"video": video.name, "sidecar": self.sidecar_path(job_id).name}
        sidecar["out"] = video.name  # ("video" is a family's setting: VACE's and Cosmos' input clip)
        sidecar["layout_choice"] = layout_choice
        temporary = out.with_suffix(".sidecar")
        temporary.write_text(json.dumps(sidecar, indent=1, default=str) + "\n")
        fsync_path(temporary)
        os.replace(temporary, self.sidecar_path(job_id))
        fsync_path(out)
        os.replace(out, video)
        fsync_path(self.videos)
        return {k: v for k, v in public(sidecar, self.server.model).items()
                if k not in ("stage_seconds", "outputs", "out")}


def public(settings: dict, model: str) -> dict:
    """Settings as a response shows them: no path on the server (uploads by their file names, weights by name)."""
    files = {flag.field for flag in family_flags(model) if flag.kind is Path}
    shown = {k: _names(v) if k in files else v for k, v in settings.items() if k not in PRIVATE_SETTINGS}
    if isinstance(shown.get("extra"), dict):  # the options' family fields (the sidecar's)
        shown["extra"] = {k: _names(v) if k in files else v for k, v in shown["extra"].items()}
    source = settings.get("weights_source")
    if source is not None:
        shown["weights_source"] = _no_path(source)
    if settings.get("loras"):  # component -> LoRA records: their sources by file name
        shown["loras"] = {component: [{**record, "source": _no_path(record["source"])} for record in records]
                          for component, records in settings["loras"].items()}
    return shown


def _no_path(source) -> str:
    return source if not str(source).startswith("/") else Path(source).name


def _names(files):
    """A family flag's file(s) by name (the data folder may be a relative path too)."""
    if isinstance(files, (list, tuple)):
        return [Path(one).name for one in files]
    return files if files is None else Path(files).name


def _one_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return text or type(err).__name__
