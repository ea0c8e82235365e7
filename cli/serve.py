"""`vidax-serve`: keep a model loaded and compiled, and run video jobs from an HTTP queue.

    vidax-serve wan-tiny                                  # http://127.0.0.1:8000/ (page), /docs (API)
    vidax-serve wan2.1-t2v-1.3b --weights out/wan2.1-t2v-1.3b --data ~/vidax-jobs
    vidax-serve wan-tiny --host 0.0.0.0 --token "$(openssl rand -hex 16)"

The model's settings (weights, dtype, mesh, offload, compile cache) are vidax-gen's flags and hold for
every job; each request sets the rest (prompt, size, steps, seed, the family's own fields).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
from pathlib import Path

import typer

from vidax.cli.common import console, require_packages, run_guarded
from vidax.cli.help_panels import LAYOUT, LORA, MODEL, PROCESSES, SERVER

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(server, host: str, port: int, data: Path, token: str | None, max_queue: int, max_upload_mb: float,
          warmup: bool, processes: dict | None = None) -> int:
    """Serve until stopped. `processes`: the multi-process flags (`join`'s arguments); process 0 serves
    HTTP, every other process runs each job in step with it and serves nothing."""
    import uvicorn

    from vidax.serve.app import create_app
    from vidax.serve.service import Service
    from vidax.zoo.compute.distributed import join
    from vidax.zoo.registry import lookup
    from vidax.zoo.compute.runtime import configure_compile_cache

    lookup(server.model)  # an unknown name is one line, before anything starts
    if token is None and not is_loopback(host):
        raise ServeError(f"--host {host} is reachable from other machines: give --token (a bearer token every "
                         "request must carry)")
    join(**(processes or {}))  # before anything touches a device
    configure_compile_cache(server.compile_cache, min_compile_secs=0)  # every program: a restart compiles nothing
    import jax

    if jax.process_index() != 0:
        from vidax.serve.lockstep import follow

        console.print(f"vidax-serve {server.model}: process {jax.process_index()} of {jax.process_count()}, "
                      "running process 0's jobs", highlight=False, soft_wrap=True)
        return follow(server)
    service = Service(server, data, max_queue=max_queue, warmup=warmup)
    recovered = {k: v for k, v in service.recovered.items() if v}
    if recovered:
        console.print(f"recovered jobs from {data}: {recovered}", highlight=False, soft_wrap=True)
    console.print(f"vidax-serve {server.model} on http://{host}:{port}/ (API docs /docs); data in {data}",
                  highlight=False, soft_wrap=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    application = create_app(service, token=token, max_upload_bytes=int(max_upload_mb * 2**20))
    # uvicorn answers SIGTERM with a graceful shutdown, then raises the signal again for the handler it found:
    # a no-op here, so the process ends through its normal exit (0), where several processes meet at the
    # runtime's shutdown barrier (killed by the signal instead, process 0 would leave its followers failing)
    signal.signal(signal.SIGTERM, lambda *_: None)
    uvicorn.run(application, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    return 0


class ServeError(Exception):
    pass


@app.command()
def main_command(
    model: str = typer.Argument(..., help="registered model name (vidax-gen --list)"),
    # the model (for every job)
    weights: str = typer.Option(None, "--weights", rich_help_panel=MODEL,
                                help="converted folder, local checkpoint folder, or Hub repo id"),
    dtype: str = typer.Option(None, "--dtype", rich_help_panel=MODEL,
                              help="weights/compute dtype override: float32 or bfloat16"),
    # the server
    host: str = typer.Option("127.0.0.1", "--host", rich_help_panel=SERVER,
                             help="address to listen on (not loopback: --token required)"),
    port: int = typer.Option(8000, "--port", rich_help_panel=SERVER, help="TCP port"),
    data: Path = typer.Option(Path("vidax-serve-data"), "--data", rich_help_panel=SERVER,
                              help="folder for the job database, uploads and videos"),
    token: str = typer.Option(None, "--token", envvar="VIDAX_SERVE_TOKEN", rich_help_panel=SERVER,
                              help="bearer token every request but /health must carry"),
    max_queue: int = typer.Option(32, "--max-queue", rich_help_panel=SERVER,
                                  help="queued jobs beyond which a request gets 429"),
    max_upload_mb: float = typer.Option(32.0, "--max-upload-mb", rich_help_panel=SERVER,
                                        help="largest upload (image or video), MiB"),
    no_warmup: bool = typer.Option(False, "--no-warmup", rich_help_panel=SERVER, help="skip the job at the model's "
                                   "default size that loads and compiles before the first request"),
    # the default, accepted as a flag too; one name in the help keeps the panel's name column narrow
    _warmup: bool = typer.Option(False, "--warmup", hidden=True),
    # layout and memory
    tp: int = typer.Option(None, "--tp", rich_help_panel=LAYOUT,
                           help="tensor-parallel degree (default: the memory planner's choice)"),
    sp: int = typer.Option(None, "--sp", rich_help_panel=LAYOUT, help="sequence-parallel degree"),
    dp: int = typer.Option(None, "--dp", rich_help_panel=LAYOUT,
                           help="data-parallel degree (2: CFG branches side by side)"),
    offload_chunk: int = typer.Option(None, "--offload-chunk", rich_help_panel=LAYOUT,
                                      help="stream the DiT's blocks from host memory, N at a time"),
    keep_stages: bool = typer.Option(False, "--keep-stages", rich_help_panel=LAYOUT, help="keep each stage's "
                                     "weights on the devices after it ends (default: freed, for the next stage)"),
    _release_stages: bool = typer.Option(False, "--release-stages", hidden=True),  # the default, as --warmup
    # several processes
    coordinator: str = typer.Option(None, "--coordinator", rich_help_panel=PROCESSES, help="HOST:PORT of process 0, "
                                    "which serves HTTP (TPU pod slices, SLURM and Open MPI are detected without it)"),
    num_processes: int = typer.Option(None, "--num-processes", rich_help_panel=PROCESSES, help="number of processes"),
    process_id: int = typer.Option(None, "--process-id", rich_help_panel=PROCESSES,
                                   help="this process's index (0 serves)"),
    join_timeout: int = typer.Option(None, "--join-timeout", rich_help_panel=PROCESSES, help="seconds to wait for "
                                     "every process to join (default 300, or VIDAX_JOIN_TIMEOUT)"),
    # LoRA
    lora: list[str] = typer.Option(None, "--lora", rich_help_panel=LORA, help="LoRA merged into the DiT, as "
                                   "vidax-gen's: SOURCE[=STRENGTH], repeatable; a request's lora_strength changes the "
                                   "strengths without reloading"),
    # the rest: typer's "Options"
    no_compile_cache: bool = typer.Option(False, "--no-compile-cache", help="do not use the persistent compile cache"),
    debug: bool = typer.Option(False, "--debug", help="show full tracebacks"),
) -> None:
    """Serve MODEL: an HTTP API (/v1/videos) and a web page (/) over one warm model and a durable queue."""

    def work():
        from vidax.serve.requests import ServerOptions

        server = ServerOptions(model=model, weights=weights, dtype=dtype, tp=tp, sp=sp, dp=dp,
                               offload_chunk=offload_chunk, release_stages=not keep_stages,
                               compile_cache=False if no_compile_cache else None, lora=tuple(lora or ()))
        processes = dict(coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                         join_timeout=join_timeout)
        return serve(server, host, port, data, token, max_queue, max_upload_mb, not no_warmup, processes)

    from vidax.cli.common import USER_ERRORS

    raise typer.Exit(run_guarded(work, debug=debug, errors=(*USER_ERRORS, ServeError)))


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    require_packages("vidax-serve", ("fastapi", "uvicorn"), "zoo,serve")
    app()


if __name__ == "__main__":
    main()
