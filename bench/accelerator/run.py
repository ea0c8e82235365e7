"""The runner: one process that measures every part in priority order inside a wall-clock budget.

Order: DiT steps at 480p, the compile cache, DiT steps at 720p, attention alone, streamed offload,
VAE decodes, and a cold compile in a fresh process. Each part asks the budget first and is skipped
(and listed as such) when its estimate no longer fits; each writes the table and the JSON again
when it ends, so a run stopped by its time limit keeps every finished row. The diffusers side
runs in one worker process (`torch_side.py`) started at the beginning, so its imports overlap the
JAX side's first compiles.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from bench.accelerator import cases, report
from bench.accelerator.timing import Budget

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("dit", "compile", "attention", "offload", "vae")
# Seconds each part is expected to take on an H200 (compile included); the toy profile asks for none.
ESTIMATES = {"dit": 40.0, "compile_warm": 25.0, "attention": 30.0, "offload": 45.0, "vae": 35.0,
             "compile_cold": 60.0}


def ensure_vidax() -> None:
    """Make `vidax.*` importable from this checkout where it is not installed (a bare GPU image):
    a folder holding a `vidax` namespace of links to the repo's packages, for this process and its children."""
    import importlib.util

    try:
        if importlib.util.find_spec("vidax.zoo") is not None:
            return
    except ModuleNotFoundError:
        pass
    shim = Path(tempfile.mkdtemp(prefix="vidax-shim-"))
    (shim / "vidax").mkdir()
    for folder, name in (("translator", "translator"), ("zoo", "zoo"), ("cli", "cli"),
                         ("conversion_specs", "conversion_specs")):
        (shim / "vidax" / name).symlink_to(ROOT / folder, target_is_directory=True)
    sys.path.insert(0, str(shim))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), str(ROOT), os.environ.get("PYTHONPATH")]))


class TorchWorker:
    """The diffusers side's process: JSON requests in, `@@{json}` answers out, with timeouts."""

    def __init__(self, profile: str, device: str):
        self.answers: queue.Queue = queue.Queue()
        self.error: str | None = None
        self.hello: dict | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.accelerator.torch_side", "--profile", profile, "--device", device],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        from bench.accelerator.torch_side import RESULT_PREFIX

        for line in self.proc.stdout:
            if line.startswith(RESULT_PREFIX):
                self.answers.put(json.loads(line[len(RESULT_PREFIX):]))
        self.answers.put({"error": f"worker exited (code {self.proc.wait()})"})

    def _answer(self, timeout: float) -> dict:
        try:
            return self.answers.get(timeout=max(timeout, 1.0))
        except queue.Empty:
            self.stop()
            self.error = f"timed out after {timeout:.0f} s; worker stopped"
            return {"error": self.error}

    def greeting(self, timeout: float = 180.0) -> dict:
        if self.hello is None:
            self.hello = self._answer(timeout)
            if "error" in self.hello:
                self.error = self.error or self.hello["error"]
        return self.hello

    def request(self, timeout: float, **request) -> dict:
        if "error" in self.greeting() or self.error:
            return {"error": f"diffusers side unavailable: {self.error}"}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            self.error = f"worker gone ({err})"
            return {"error": self.error}
        answer = self._answer(timeout)
        if "worker exited" in answer.get("error", ""):
            self.error = answer["error"]
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()


class Run:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.profile = cases.profile(args.profile)
        self.budget = Budget(args.budget)
        self.estimates = ESTIMATES if args.profile == "real" else {k: 0.0 for k in ESTIMATES}
        self.out = Path(args.out)
        self.json_path = Path(args.json) if args.json else self.out.with_suffix(".json")
        self.artifacts = Path(args.artifacts) if args.artifacts else None
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self.results: dict = {"meta": {"profile": args.profile, "budget_s": args.budget, "date": date},
                              "skipped": self.budget.skipped, "errors": [], "timeline": []}
        self.harnesses: dict = {}
        self.worker: TorchWorker | None = None

    # --- bookkeeping ---------------------------------------------------------------------------

    def save(self) -> None:
        self.results["elapsed_s"] = self.budget.elapsed()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.json_path.write_text(json.dumps(self.results, indent=1, default=str))
        self.out.write_text(report.render(self.results))

    def part(self, name: str, estimate_key: str, fn) -> None:
        """Run one part if the budget allows; an exception becomes an error line, not the end of the run."""
        if not self.budget.allows(name, self.estimates[estimate_key]):
            print(f"[bench] skipped {name}: {self.budget.skipped[-1]}", flush=True)
            self.save()
            return
        started, cpu = time.time(), _cpu_seconds()
        print(f"[bench] {name} ({self.budget.left():.0f} s left)", flush=True)
        try:
            fn()
        except Exception as err:  # noqa: BLE001
            traceback.print_exc()
            self.results["errors"].append(f"{name}: {_one_line(err)}")
        self.results["timeline"].append([name, round(time.time() - started, 1), round(_cpu_seconds() - cpu, 1)])
        self.save()

    def diffusers(self, **request) -> dict:
        if self.worker is None:
            return {"error": "diffusers side not run (--torch-device none)"}
        self.results["meta"].setdefault("torch", self.worker.greeting())
        request.update(repeats=self.profile.repeats, deadline=self.budget.deadline)
        return self.worker.request(timeout=self.budget.left() + 60.0, **request)

    # --- the parts ------------------------------------------------------------------------------

    def dit(self, case: cases.DitCase) -> None:
        from bench.accelerator import vidax_side

        entry = self.results.setdefault("dit", {})[case.key] = {
            "case": {**_public(case), "tokens": case.tokens, "text_tokens": case.text_tokens, "depth": case.depth},
            "flops": cases.dit_flops(case)}
        # diffusers first: its allocator gives its memory back after each case, JAX's pool never does
        entry["diffusers"] = self.diffusers(op="dit", key=case.key) if case.weights_dtype is None else {
            "error": f"no {case.weights_dtype} counterpart: the bf16 row's diffusers figure is the reference"}
        self.save()
        harness = vidax_side.DitHarness(case)
        artifacts = self.artifacts if case.key.endswith("480p") else None
        try:
            entry["vidax"] = vidax_side.dit(harness, self.profile.repeats, self.budget.deadline, artifacts)
        except Exception as err:  # noqa: BLE001 - the diffusers side still runs
            traceback.print_exc()
            entry["vidax"] = {"error": _one_line(err)}
        ok = "error" not in entry["vidax"]
        if ok and case.key == self.profile.dits[0].key:  # the first compile of the run: a cold one
            self.results["compile"] = {"label": case.label, "key": case.key, "cold": harness.compile_s[True]}
            if self.artifacts is not None:
                try:
                    entry["vidax"]["profile"] = vidax_side.profile_trace(harness, self.artifacts)
                except Exception as err:  # noqa: BLE001 - a profiler that cannot start costs the trace only
                    entry["vidax"]["profile"] = {"error": f"{type(err).__name__}: {err}"[:300]}
        if ok and case.key == self.profile.offload:
            self.harnesses[case.key] = harness  # its blocks are streamed later
        del harness
        gc.collect()

    def compile_probe(self, row: str, cache_dir: str | None) -> None:
        compile_ = self.results.setdefault("compile", {})
        key = compile_.get("key", self.profile.dits[0].key)
        compile_.setdefault("label", next(c.label for c in self.profile.dits if c.key == key))
        if self.in_process_compile(cache_dir):
            from bench.accelerator import vidax_side

            compile_[row] = {**vidax_side.probe_here(self.args.profile, key), "in_process": True}
            return
        cmd = [sys.executable, "-m", "bench.accelerator.vidax_side", "probe", "--profile", self.args.profile,
               "--key", key] + (["--cache-dir", cache_dir] if cache_dir else [])
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=os.environ.copy(),
                                  timeout=max(self.budget.left() + 30.0, 30.0))
            if done.returncode:
                compile_[row] = {"error": f"probe failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}"}
            else:
                compile_[row] = json.loads(done.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            compile_[row] = {"error": "probe timed out"}

    def in_process_compile(self, cache_dir: str | None) -> bool:
        """A TPU opens for one process at a time, so while this one holds it a fresh process cannot
        compile: the warm compile is then this process's, its in-memory caches dropped first (the
        persistent cache folder is the run's own). A cold compile in another folder cannot be had so."""
        wanted = self.args.compile_in_process
        if wanted == "auto":
            return self.results["meta"].get("backend") == "tpu" and cache_dir == self.results["meta"]["cache_dir"]
        return wanted == "yes" and cache_dir == self.results["meta"]["cache_dir"]

    def compile_warm(self) -> None:
        """A fresh process compiles the first DiT case again from the run's cache folder; where this
        process has not compiled it (`--only compile`), a first fresh process fills the folder."""
        cache = self.results["meta"]["cache_dir"]
        if "cold" not in self.results.get("compile", {}):
            self.compile_probe("cold_process", cache)
        self.compile_probe("warm", cache)

    def attention(self) -> None:
        from bench.accelerator import vidax_side

        section = self.results.setdefault("attention", {})
        for case in self.profile.attention:
            if not self.budget.allows(f"attention {case.key}", self.estimates["attention"] / 3):
                continue
            valid = case.valid or case.tokens
            entry = section[case.key] = {
                "case": _public(case),
                "flops": cases.attention_flops(case.batch, case.heads, case.tokens, valid, case.head_dim)}
            entry["diffusers"] = self.diffusers(op="attention", key=case.key)
            entry["vidax"] = vidax_side.attention_rows(case, self.profile.blockwise_max_tokens, self.profile.repeats,
                                                       self.budget.deadline)
            gc.collect()
            self.save()

    def offload(self) -> None:
        from bench.accelerator import vidax_side

        case = next(c for c in self.profile.dits if c.key == self.profile.offload)
        case = dataclasses.replace(case, run_depth=self.profile.offload_depth)
        harness = self.harnesses.pop(case.key, None)
        if harness is None or harness.case.run_depth != case.run_depth:
            harness = vidax_side.DitHarness(case)
            harness.compile(True)
        result = vidax_side.offload(harness, self.profile.offload_chunks, self.profile.repeats, self.budget.deadline)
        result["label"] = case.label
        self.results["offload"] = result
        del harness
        gc.collect()

    def vae(self, case: cases.VaeCase) -> None:
        from bench.accelerator import vidax_side

        entry = self.results.setdefault("vae", {})[case.key] = {"case": {**_public(case), "frames": case.frames}}
        entry["diffusers"] = self.diffusers(op="vae", key=case.key)
        self.save()
        entry["vidax"] = vidax_side.vae(case, self.profile.repeats, self.budget.deadline)
        gc.collect()

    # --- the whole run --------------------------------------------------------------------------

    def __call__(self) -> int:
        args, meta = self.args, self.results["meta"]
        wanted = set(args.only.split(",")) if args.only else set(SECTIONS)
        if args.torch_device != "none":  # torch is never imported here: one CUDA framework per process
            self.worker = TorchWorker(args.profile, args.torch_device)
        from vidax.zoo.compute.runtime import configure_compile_cache

        from bench.accelerator import vidax_side

        meta["cache_dir"] = str(configure_compile_cache(True, args.cache_dir, min_compile_secs=0))
        meta.update(vidax_side.device_info(args.peak_tflops))
        meta["peak_source"] = "--peak-tflops" if args.peak_tflops else "table by device kind"
        if args.profile == "real" and meta["backend"] == "cpu":
            print("[bench] real shapes need an accelerator; on a CPU run `--profile toy`", file=sys.stderr)
            return 2
        self.save()
        print(f"[bench] {meta['device_kind']} ({meta['backend']}), peak {meta['peak_tflops']} TFLOP/s, "
              f"budget {args.budget:.0f} s, out {self.out}", flush=True)
        self.part("calibration", "compile_warm", lambda: self.results.__setitem__(
            "calibration", vidax_side.calibrate(self.profile.matmul, self.profile.repeats)))
        dits = self.profile.dits
        if args.cases:
            dits = tuple(c for c in dits if c.key in args.cases.split(","))
        low, high = [c for c in dits if c.key.endswith("480p")], [c for c in dits if not c.key.endswith("480p")]
        if "dit" in wanted:
            for case in low:
                self.part(f"dit {case.key}", "dit", lambda case=case: self.dit(case))
        if "compile" in wanted:
            self.part("compile warm", "compile_warm", self.compile_warm)
        if "dit" in wanted:
            for case in high:
                self.part(f"dit {case.key}", "dit", lambda case=case: self.dit(case))
        if "attention" in wanted:
            self.part("attention", "attention", self.attention)
        if "offload" in wanted:
            self.part("offload", "offload", self.offload)
        if "vae" in wanted:
            for case in self.profile.vaes:
                self.part(f"vae {case.key}", "vae", lambda case=case: self.vae(case))
        if ("compile" in wanted and self.profile.cold_process_compile and "cold_process" not in self.results["compile"]
                and not self.in_process_compile(meta["cache_dir"])):
            fresh = tempfile.mkdtemp(prefix="vidax-cold-cache-")
            self.part("compile cold process", "compile_cold", lambda: self.compile_probe("cold_process", fresh))
        if self.worker is not None:
            self.worker.stop()
        self.save()
        print(self.out.read_text(), flush=True)
        return 0


def _one_line(err: BaseException) -> str:
    text = str(err).splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the toy run's cost on a shared machine)."""
    import resource

    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def _public(case) -> dict:
    return {k: v for k, v in dataclasses.asdict(case).items() if k != "config"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.accelerator", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="real", choices=sorted(cases.PROFILES),
                        help="real: Wan2.1-14B / HunyuanVideo-1.5 layer shapes (an accelerator); toy: tiny, any CPU")
    parser.add_argument("--budget", type=float, default=330.0, help="wall-clock seconds for the whole run")
    parser.add_argument("--out", default=".bench/accelerator.md", help="the Markdown table")
    parser.add_argument("--json", default=None, help="all figures as JSON (default: --out with .json)")
    parser.add_argument("--artifacts", default=None, help="folder for HLO text and a jax.profiler trace")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the chip's dense bf16 peak (overrides the table by device kind)")
    parser.add_argument("--cache-dir", default=None, help="persistent compile cache (default: a fresh temp folder)")
    parser.add_argument("--only", default=None, help=f"comma-separated sections of {','.join(SECTIONS)}")
    parser.add_argument("--compile-in-process", default="auto", choices=["auto", "yes", "no"],
                        help="warm compile in this process (auto: on a TPU, which one process holds at a time)")
    parser.add_argument("--cases", default=None, help="comma-separated DiT case keys (default: all of the profile)")
    parser.add_argument("--torch-device", default="auto",
                        help="the diffusers side: auto (cuda where torch sees one, else cpu for toy shapes), "
                             "cuda, cpu or none")
    args = parser.parse_args(argv)
    if args.cache_dir is None:
        args.cache_dir = tempfile.mkdtemp(prefix="vidax-bench-cache-")  # empty: the first compile is cold
    if args.artifacts:
        Path(args.artifacts).mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # two frameworks share the device
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    ensure_vidax()
    import vidax.zoo.compute.runtime  # noqa: F401 - its import sets the TPU's scoped VMEM flag before the backend starts
    return Run(args)()
