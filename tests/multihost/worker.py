"""One process of a multi-process test run: joins the run, generates each case, records what it read.

    python -m tests.multihost.worker PORT NUM_PROCESSES PROCESS_ID OUT_DIR CASES_JSON

Errors end the process as `vidax-gen` ends it (`run_guarded`: one line, exit code 1). Each case is a
dict of `GenerateOptions` fields; process 0 writes `OUT_DIR/<case>.npy` (through `generate`), every
process writes `OUT_DIR/<case>.p<ID>.json` with the bytes it read to place its shards. Test-only keys:

- `"die_after_step": k` (with `"dying_process": p`, default 1): process p exits hard after k sampling steps;
- `"latents_missing_on_process": p`: process p is given a latents path that does not exist;
- `"on_process": {"p": {field: value}}`: process p is given other options;
- `"resolved_on_process": {"p": {field: value}}`: process p resolves settings differently (as another
  vidax version might) from the same options;
- `"extra_files": {field: path or [paths]}`: a family's file inputs, given in `extra` as `Path`s (a tuple for
  a list), as vidax-gen's flags and vidax-serve's uploads give them (applied after `on_process`);
- `"unpacked_on_process": p`: process p takes the job as a vidax-serve follower does: its options and the
  bytes of its files through `serve.lockstep.job_message` (JSON), the files written under its own folder.

CASES_JSON `{"join": {...}}` only joins: with `"die_on_process": p` process p exits hard once joined,
and the others wait `"sleep"` seconds without any collective; `"unwatched_process": p` keeps process p
from holding its watch connection to process 0 (as a firewall would).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path


def main(port: str, count: str, index: str, out: str, cases: str) -> int:
    from vidax.zoo.compute import distributed

    cases = json.loads(cases)
    if cases.get("join", {}).get("unwatched_process") == int(index):  # as behind a firewall: no watch connection
        distributed._watch_peers = lambda coordinator: None
    distributed.join(f"127.0.0.1:{port}", int(count), int(index), heartbeat_timeout=int(os.environ["HEARTBEAT"]),
                     join_timeout=int(os.environ["JOIN_TIMEOUT"]))
    print(f"process {index} joined", flush=True)
    if "join" in cases:
        return join_only(int(index), cases["join"])
    _open_shared_compile_cache()
    for name, case in cases.items():
        generate_case(name, dict(case), int(index), Path(out))
    print(f"process {index} done", flush=True)
    return 0


def _open_shared_compile_cache() -> None:
    """The test run's shared persistent compile cache (`VIDAX_TEST_COMPILE_CACHE`, tests/conftest.py), opened
    as conftest opens it: on at this process's first compile, then vidax's own flag as before (the options'
    `compile_cache=False` switches it off again and changes nothing: jax decides once per process). Only
    process 0 writes entries (jax's rule); a later launch (another test) loads on both processes what an
    earlier one compiled. (`jax_share_binary_between_hosts`, process 0 compiling for both, deadlocked: process
    1 waited for a program while process 0 waited for it in gloo's first collective.) The keys hold the XLA
    flags (4 or 1 fake devices here, 8 in the pytest process) and the device assignment, so no entry of a
    multi-process program is ever a single-process one's.

    It was off here from the start (`VIDAX_NO_COMPILE_CACHE=1`, as every test process ran before the run had
    one shared cache): vidax's default cache is the user's own folder, which no test may write. Called after
    `join`: a compile before `jax.distributed.initialize` would start the backend."""
    from tests.compile_cache import open_shared_compile_cache

    open_shared_compile_cache()


def join_only(index: int, case: dict) -> int:
    if case.get("die_on_process") == index:
        die(index)
    time.sleep(case.get("sleep", 0))
    print(f"process {index} done", flush=True)
    return 0


def die(index: int) -> None:
    """Exit hard, no goodbye (as a killed process), saying when."""
    print(f"process {index} dies at {time.time():.3f}", flush=True)
    os._exit(9)


def generate_case(name: str, case: dict, index: int, out_dir: Path) -> None:
    import jax

    from vidax.zoo.compute import sharding
    from vidax.zoo.generator.contract import Family
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.progress import Progress
    from vidax.zoo.api import generate

    class DieAfter(Progress):
        def __init__(self, steps: int, process: int):
            self.steps, self.process = steps, process

        def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
            self.steps -= amount
            if stage == "denoise" and self.steps <= 0 and jax.process_index() == self.process:
                die(index)

    die_after, dying = case.pop("die_after_step", None), case.pop("dying_process", 1)
    if case.pop("latents_missing_on_process", None) == index:
        case["latents"] = case["latents"] + ".missing"
    case.update(case.pop("on_process", {}).get(str(index), {}))
    resolved = case.pop("resolved_on_process", {}).get(str(index))
    if resolved:
        resolve = Family.resolve_settings
        Family.resolve_settings = lambda self, *a, **k: dataclasses.replace(resolve(self, *a, **k), **resolved)
    files = {k: tuple(map(Path, v)) if isinstance(v, list) else Path(v) for k, v in case.pop("extra_files", {}).items()}
    unpacked = case.pop("unpacked_on_process", None) == index
    if files:
        case["extra"] = {**case.get("extra", {}), **files}
    before = sharding.slice_bytes_read()
    options = GenerateOptions(**{**case, "out": out_dir / f"{name}.npy"})
    if unpacked:
        from vidax.serve import lockstep

        message = json.loads(json.dumps(lockstep.job_message(options), default=str))
        options = lockstep._options(GenerateOptions, message, out_dir / f"{name}.uploads.p{index}")
    generate(options, DieAfter(die_after, dying) if die_after else None)
    (out_dir / f"{name}.p{index}.json").write_text(json.dumps({"bytes": sharding.slice_bytes_read() - before}))


if __name__ == "__main__":
    from vidax.cli.common import run_guarded

    sys.exit(run_guarded(lambda: main(*sys.argv[1:6]), debug=False))
