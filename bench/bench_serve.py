"""vidax-serve on loopback: a warm server's second request against a fresh vidax-gen process, and load.

    .venv/bin/python -m bench serve                    # the embedded wan-tiny
    VIDAX_BENCH_SERVE_MODEL=wan2.1-t2v-1.3b VIDAX_BENCH_SERVE_ARGS="--weights out/wan" .venv/bin/python -m bench serve

Same run, same job (the model's default size, seed 0): the server's first and second request (POST to
succeeded), then a fresh `vidax-gen` process with no compile cache and with the server's warm compile
cache on disk. Then load: 5 clients on 127.0.0.1, each submitting 10 jobs one after another (closed loop,
bounded); every job must succeed once; queue latency (created -> started) and end-to-end p50/p95.
"""

from __future__ import annotations

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

from vidax.serve.launch import ServerProcess

MODEL = os.environ.get("VIDAX_BENCH_SERVE_MODEL", "wan-tiny")
SERVER_ARGS = shlex.split(os.environ.get("VIDAX_BENCH_SERVE_ARGS", ""))
CLIENTS, REQUESTS = 5, 10
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


def fresh_vidax_gen(env: dict, out: Path, compile_cache: bool) -> float:
    command = [sys.executable, "-m", "vidax.cli.gen", MODEL, "--prompt", "bench", "--seed", "0", "--out", str(out),
               *SERVER_ARGS, *([] if compile_cache else ["--no-compile-cache"])]
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=JOB_TIMEOUT)
    return time.perf_counter() - start


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
    print(f"load average at start {os.getloadavg()[0]:.2f} (figures under load are not comparable across runs)")
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
            second = run_job(server.url, {"prompt": "bench", "seed": 0})
            cold = fresh_vidax_gen(env, root / "cold.mp4", compile_cache=False)
            cached = fresh_vidax_gen(env, root / "cached.mp4", compile_cache=True)
            start = time.perf_counter()
            results = load(server.url)
            load_wall = time.perf_counter() - start
        finally:
            server.stop()
    print(f"model {MODEL}, default size; server start to ready (load, place, warm-up compile): {ready:.1f} s")
    print(f"{'job':<44}{'seconds':>10}")
    for label, seconds in (("server, first request (after warm-up)", first["wall"]),
                           ("server, second request", second["wall"]),
                           ("fresh vidax-gen, no compile cache", cold),
                           ("fresh vidax-gen, warm compile cache on disk", cached)):
        print(f"{label:<44}{seconds:>10.2f}")
    print(f"second request vs fresh vidax-gen: {cold / second['wall']:.1f}x faster (no cache), "
          f"{cached / second['wall']:.1f}x faster (warm disk cache)")
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
