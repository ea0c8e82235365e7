"""vidax-serve on loopback: a warm server's second request against a fresh vidax-gen process, and load.

    .venv/bin/python -m bench serve                    # the embedded wan-tiny
    VIDAX_BENCH_SERVE_MODEL=wan2.1-t2v-1.3b VIDAX_BENCH_SERVE_ARGS="--weights out/wan" .venv/bin/python -m bench serve

Same run, same job (the model's default size, seed 0): the server's first request (POST to succeeded,
once), then three contenders of one `bench.protocol.interleaved` run: a request to the warm server, a
fresh `vidax-gen` process with no compile cache, and one with the server's warm compile cache on disk,
each once untimed and then `VIDAX_BENCH_REPEATS` (default 3) rounds in which each runs once in turn, so
a change in the machine's load hits all alike (the load is printed at start; the table says whether the
run was quiet enough to quote, counting the server's CPU as the bench's own). Then load: 5 clients on
127.0.0.1, each submitting 10 jobs one after another (closed loop, bounded); every job must succeed once;
queue latency (created -> started) and end-to-end p50/p95.

    VIDAX_BENCH_REPEATS=1 VIDAX_BENCH_SERVE_CLIENTS=1 VIDAX_BENCH_SERVE_REQUESTS=1 VIDAX_BENCH_SETTLE_S=0 \
        .venv/bin/python -m bench serve                # a quick functional run (no figures)
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.protocol import announce_load, interleaved, print_table, process_cpu_seconds
from vidax.serve.launch import ServerProcess

MODEL = os.environ.get("VIDAX_BENCH_SERVE_MODEL", "wan-tiny")
SERVER_ARGS = shlex.split(os.environ.get("VIDAX_BENCH_SERVE_ARGS", ""))
CLIENTS = int(os.environ.get("VIDAX_BENCH_SERVE_CLIENTS", "5"))
REQUESTS = int(os.environ.get("VIDAX_BENCH_SERVE_REQUESTS", "10"))
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))
WARM, COLD, CACHED = ("server, warm request", "fresh vidax-gen, no cache",
                      "fresh vidax-gen, disk cache")  # no compile cache; the server's warm one on disk
JOB_TIMEOUT = 600.0


def run_job(url: str, body: dict) -> dict:
    """POST a job and follow its events to the end; the final status with the client's wall time added."""
    start = time.perf_counter()
    job_id = httpx.post(url + "/v1/videos", json=body, timeout=60).raise_for_status().json()["id"]
    final = None
    with httpx.stream("GET", f"{url}/v1/videos/{job_id}/events", timeout=JOB_TIMEOUT) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                final = json.loads(line[6:])
    return {**final, "wall": time.perf_counter() - start}


def fresh_vidax_gen(env: dict, out: Path, compile_cache: bool) -> None:
    """One `vidax-gen` process for the bench's job (fails loudly if it does)."""
    command = [sys.executable, "-m", "vidax.cli.gen", MODEL, "--prompt", "bench", "--seed", "0", "--out", str(out),
               *SERVER_ARGS, *([] if compile_cache else ["--no-compile-cache"])]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=JOB_TIMEOUT)


def contenders(server: ServerProcess, env: dict, root: Path, statuses: list[str]) -> dict:
    """The warm server's request and the two fresh processes, as zero-argument calls (each fresh process
    writes its own file; every server request's final status is kept in `statuses`)."""
    outputs = itertools.count()

    def warm_request() -> None:
        statuses.append(run_job(server.url, {"prompt": "bench", "seed": 0})["status"])

    def fresh(compile_cache: bool):
        return lambda: fresh_vidax_gen(env, root / f"fresh_{next(outputs)}.mp4", compile_cache)

    return {WARM: warm_request, COLD: fresh(False), CACHED: fresh(True)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load(url: str) -> list[dict]:
    """CLIENTS threads x REQUESTS jobs each, one after another per client."""
    results: list[dict] = []
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            for request in range(REQUESTS):
                results.append(run_job(url, {"prompt": f"client {index}", "seed": index * 100 + request}))
        except BaseException as err:  # reported after the threads join
            errors.append(err)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOB_TIMEOUT * REQUESTS)
    if errors:
        raise errors[0]
    return results


def main() -> None:
    announce_load("bench serve")
    with tempfile.TemporaryDirectory(prefix="bench_serve_") as folder:
        root = Path(folder)
        env = {**os.environ, "VIDAX_CACHE_DIR": str(root / "jax_cache"), "JAX_PLATFORMS": os.environ.get(
            "JAX_PLATFORMS", "cpu")}
        env.pop("VIDAX_NO_COMPILE_CACHE", None)
        start = time.perf_counter()
        server = ServerProcess(MODEL, root / "data", args=[*SERVER_ARGS, "--max-queue", str(CLIENTS * 2)], env=env)
        server.start(timeout=JOB_TIMEOUT)
        ready = time.perf_counter() - start
        try:
            first = run_job(server.url, {"prompt": "bench", "seed": 0})
            statuses = [first["status"]]
            timings = interleaved(contenders(server, env, root, statuses), repeats=REPEATS,
                                  helper_cpu=lambda: process_cpu_seconds(server.process.pid))
            start = time.perf_counter()
            results = load(server.url)
            load_wall = time.perf_counter() - start
        finally:
            server.stop()
    print(f"model {MODEL}, default size; server start to ready (load, place, warm-up compile): {ready:.1f} s")
    print(f"server, first request (after warm-up, once): {first['wall']:.2f} s")
    print_table(f"{MODEL}: one job, warm server vs fresh vidax-gen", timings, reference=WARM)
    warm = timings.results[WARM].best
    print(f"warm server request vs fresh vidax-gen (best against best): {timings.results[COLD].best / warm:.1f}x "
          f"faster (no cache), {timings.results[CACHED].best / warm:.1f}x faster (warm disk cache); "
          f"{statuses.count('succeeded')}/{len(statuses)} server requests succeeded")
    succeeded = sum(r["status"] == "succeeded" for r in results)
    queue = [r["started"] - r["created"] for r in results]
    walls = [r["wall"] for r in results]
    print(f"load: {CLIENTS} clients x {REQUESTS} requests on 127.0.0.1 in {load_wall:.1f} s: "
          f"{succeeded}/{len(results)} succeeded, {len({r['id'] for r in results})} distinct jobs")
    print(f"{'latency':<20}{'p50 s':>10}{'p95 s':>10}")
    print(f"{'queue':<20}{percentile(queue, 0.5):>10.2f}{percentile(queue, 0.95):>10.2f}")
    print(f"{'end to end':<20}{percentile(walls, 0.5):>10.2f}{percentile(walls, 0.95):>10.2f}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    print(f"mean job run time {statistics.mean(r['finished'] - r['started'] for r in results):.2f} s")


if __name__ == "__main__":
    main()
