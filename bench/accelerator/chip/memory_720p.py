"""Does a 720p DiT block pair fit one chip? XLA's memory plan, the allocator's peak and the time per block.

    python -m bench.accelerator.chip.memory_720p [--toy] [--cases wan-720p,hv15-720p] [--out FILE] [--dump DIR]
    python -m bench.accelerator.chip.memory_720p --aot v5e     # no chip: libtpu's compiler on the host (below)

Each case (the `real` profile's `wan-720p`: Wan2.1-14B 720x1280 81f, 75,600 tokens; `hv15-720p`:
HunyuanVideo-1.5 720x1280 121f, 111,600 tokens; both two blocks with embed and head, the CFG pair as batch
2, bf16 weights as the conversion specs place them) runs in a process of its own, because JAX's pool keeps
the largest size it has grown to until the process ends. The process lowers the forward from abstract
arguments through the production path (`bench.accelerator.vidax_side`: `scan_blocks`, the attention
kernel vidax selects on the backend), compiles it, and prints one JSON line: XLA's temporaries, argument
and output bytes, then, after placing random weights and calling it (one warm-up, then timed calls), the
allocator's `peak_bytes_in_use` and ms per block (the N-block forward less embed + head alone, over N).
The parent collects the lines into one JSON (`--out`). When compiling or running fails for memory, the
child prints XLA's error and the buffer report (`*memory-usage-report*` of an `--xla_dump_to` folder that
it sets, `--dump` or a temporary one) and the parent goes on to the next case.

`--toy`: the `toy` profile's Wan and HunyuanVideo-1.5 shapes (same code, a few channels), for the CPU.

`--aot v5e`: compile for a TPU v5e without one (JAX's deviceless ahead-of-time compile against a
`v5e:1x1` topology; needs the `libtpu` wheel importable, e.g. `pip install --target DIR libtpu==0.0.42.*`
and `PYTHONPATH=DIR`). The model is traced as on the chip (the splash kernel at the v5e table's blocks,
token-chunked feed-forward, lane-rolled RoPE), and XLA's TPU compiler plans its memory: temp/argument/output
bytes, no run. Nothing in vidax imports libtpu: this is a bench-only path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = ("wan-720p", "hv15-720p")
TOY_CASES = ("wan-480p", "hv15-480p")  # the toy profile has one resolution each: the 720p cases' code
V5E_ATTENTION = "splash:2048,4096,1024"  # tpu_blocks' v5e entry at 64 MiB of scoped VMEM
AOT_HBM_BYTES = {"v5e": int(15.75 * 2**30)}  # what a v5e's allocator offers a program


def parent(args) -> int:
    keys = args.cases.split(",") if args.cases else list(TOY_CASES if args.toy else CASES)
    results, started = [], time.perf_counter()
    for key in keys:
        command = [sys.executable, "-m", "bench.accelerator.chip.memory_720p", "--one", key]
        command += ["--toy"] * args.toy + ["--report"] * args.report + ["--repeats", str(args.repeats)]
        command += ["--aot", args.aot] if args.aot else []
        command += ["--dump", str(Path(args.dump) / key)] if args.dump else []
        begin = time.perf_counter()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired as expired:  # a case that overruns is a row, not the end of the run
            proc = subprocess.CompletedProcess(command, -9, _text(expired.stdout), _text(expired.stderr))
        sys.stderr.write(proc.stderr[-20000:])
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"case": key, "error": f"exit {proc.returncode}, no result"}
        row["process_s"] = round(time.perf_counter() - begin, 1)
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                print(line)
        print(json.dumps(row), flush=True)
        results.append(row)
    summary = {"cases": results, "total_s": round(time.perf_counter() - started, 1)}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    for row in results:
        print(_line(row))
    return 0 if all("error" not in row for row in results) else 1


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _line(row: dict) -> str:
    gib = lambda n: f"{n / 2**30:.2f} GiB" if isinstance(n, (int, float)) else "-"  # noqa: E731
    if "error" in row:
        return f"{row['case']}: {row['error'][:200]}"
    ms = row.get("ms_per_block")
    return (f"{row['case']}: temp {gib(row['temp_bytes'])}, arguments {gib(row['argument_bytes'])}, output "
            f"{gib(row['output_bytes'])}, peak in use {gib(row.get('peak_bytes_in_use'))}, "
            f"{'-' if ms is None else f'{ms:.1f}'} ms/block, {row['process_s']} s")


# ---------------------------------------------------------------------------------------------
# One case (its own process)


def child(args) -> int:
    dump = args.dump or tempfile.mkdtemp(prefix="vidax-mem-")
    Path(dump).mkdir(parents=True, exist_ok=True)
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip()
    os.environ.setdefault("VIDAX_NO_CPU_TUNING", "1")  # no host timing inside a memory run
    if args.aot:
        os.environ.setdefault("VIDAX_TPU_ATTENTION", V5E_ATTENTION)
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    import jax

    from vidax.zoo.compute import runtime  # noqa: F401 - raises the scoped VMEM before a backend starts

    from bench.accelerator import cases, vidax_side

    profile = cases.profile("toy" if args.toy else "real")
    case = next(c for c in profile.dits if c.key == args.one)
    row: dict = {"case": case.key, "label": case.label, "tokens": case.tokens, "batch": case.batch,
                 "blocks": case.run_depth, "jax": jax.__version__}
    target = _aot_device(args.aot) if args.aot else None
    if args.aot:  # the rules that read the device's memory (attention by rows) read the chip's, not the host's
        from vidax.zoo.compute import planner

        planner.device_memory_bytes = lambda: (1, AOT_HBM_BYTES[args.aot])
    row["backend"] = f"aot {args.aot}" if args.aot else jax.default_backend()
    try:
        with _traced_as_tpu(bool(args.aot)):
            model, spec = vidax_side.build_model(case)
            layout = vidax_side.param_dtypes(model, spec)
            params, inputs = _abstract(case, layout, target)
            row["attention_kernel"] = _kernel(case)
            start = time.perf_counter()
            full = vidax_side.dit_forward.lower(model, True, params, *inputs).compile()
            row["compile_s"] = round(time.perf_counter() - start, 1)
        analysis = full.memory_analysis()
        row.update(temp_bytes=int(analysis.temp_size_in_bytes), argument_bytes=int(analysis.argument_size_in_bytes),
                   output_bytes=int(analysis.output_size_in_bytes), alias_bytes=int(analysis.alias_size_in_bytes))
        print(json.dumps({**row, "stage": "compiled"}), flush=True)
        if not args.aot:
            row.update(_run(case, model, layout, full, args.repeats))
    except Exception as error:  # noqa: BLE001 - out of memory is a result: its report is what we came for
        row["error"] = f"{type(error).__name__}: {error}"[:4000]
        needed = re.search(r"memory required for HLO temporaries \(([0-9.]+)G\)", str(error))
        if needed:  # XLA's compile-time check names the temporaries it could not fit
            row["temp_bytes_over_limit"] = int(float(needed.group(1)) * 2**30)
        print(f"--- {case.key}: {type(error).__name__}\n{error}", flush=True)
    _print_reports(dump, case.key, everything="error" in row or args.report)
    print(json.dumps(row), flush=True)
    return 0


def _aot_device(name: str):
    """The one device of a `name:1x1` TPU topology (JAX's deviceless compile; libtpu must be importable)."""
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(platform="tpu", topology_name=f"{name}:1x1", chip_config_name="default",
                                            chips_per_host_bounds=(1, 1, 1), num_slices=1)
    return topology.devices[0]


class _traced_as_tpu:
    """While tracing for `--aot`, the model code's backend checks answer "tpu" (kernel, FFN chunks, RoPE)."""

    def __init__(self, active: bool):
        self.active = active

    def __enter__(self):
        import jax

        self.saved = jax.default_backend
        if self.active:
            jax.default_backend = lambda: "tpu"

    def __exit__(self, *exc):
        import jax

        jax.default_backend = self.saved


def _abstract(case, layout: dict, device):
    import jax
    from flax import traverse_util

    from bench.accelerator import vidax_side

    sharding = None if device is None else jax.sharding.SingleDeviceSharding(device)
    flat = {p: jax.ShapeDtypeStruct(s, d, sharding=sharding) for p, (s, d) in layout.items()}
    inputs = tuple(None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
                   for x in vidax_side.abstract_inputs(case))
    return traverse_util.unflatten_dict(flat, sep="/"), inputs


def _kernel(case) -> str:
    import jax
    import jax.numpy as jnp

    from vidax.zoo.compute.attention import choose_kernel

    q = jax.ShapeDtypeStruct((case.batch, case.attention_tokens, case.heads, case.head_dim), jnp.bfloat16)
    mask = jax.ShapeDtypeStruct((case.batch, case.attention_tokens), jnp.bool_) if case.row.joint_text else None
    name = choose_kernel(q, q, mask)
    return f"{name} ({os.environ['VIDAX_TPU_ATTENTION']})" if name == "pallas" and "VIDAX_TPU_ATTENTION" in os.environ \
        else name


def _run(case, model, layout, full, repeats: int) -> dict:
    """Random weights placed, the compiled forward called; the allocator's peak, then ms per block."""
    from bench.accelerator import vidax_side
    from bench.accelerator.timing import time_calls

    params = vidax_side.random_tree(layout)
    inputs = vidax_side.concrete_inputs(case)
    vidax_side.sync(full(params, *inputs))
    out = {"peak_bytes_in_use": vidax_side.peak_bytes_in_use()}
    print(json.dumps({"case": case.key, "stage": "ran once", **out}), flush=True)
    timing = time_calls(lambda: full(params, *inputs), vidax_side.sync, repeats, cap_s=30.0, warmup=0)
    outside_program = vidax_side.dit_forward.lower(model, False, params, *inputs).compile()
    outside = time_calls(lambda: outside_program(params, *inputs), vidax_side.sync, repeats, cap_s=10.0)
    out.update(forward_s=timing["median"], outside_s=outside["median"],
               ms_per_block=1000 * (timing["median"] - outside["median"]) / case.run_depth,
               peak_bytes_in_use_after_timing=vidax_side.peak_bytes_in_use())
    return out


def _print_reports(dump: str, key: str, everything: bool) -> None:
    """XLA's buffer report of the largest program dumped (the whole report on failure, its head otherwise)."""
    reports = sorted(Path(dump).glob("*memory-usage-report*"), key=lambda p: p.stat().st_size)
    if not reports:
        if everything:
            print(f"--- {key}: no memory-usage-report in {dump}", flush=True)
        return
    forward = [p for p in reports if "dit_forward" in p.name]
    largest = max(forward or reports, key=_report_total)
    text = largest.read_text()
    print(f"--- {key}: XLA buffer report {largest.name}", flush=True)
    print(text if everything else "\n".join(text.splitlines()[:40]), flush=True)


def _report_total(path: Path) -> int:
    for line in path.read_text().splitlines()[:5]:
        if line.strip().startswith("Total bytes:"):
            return int(line.split(":")[1].split()[0])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--toy", action="store_true", help="the toy profile's shapes (CPU)")
    parser.add_argument("--cases", default=None, help=f"comma-separated case keys (default {','.join(CASES)})")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--dump", default=None, help="XLA dump folder (one subfolder per case)")
    parser.add_argument("--aot", default=None, help="compile for this TPU without one (v5e), no run")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls after the first")
    parser.add_argument("--report", action="store_true", help="print the whole buffer report, not only its head")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case process")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return child(args) if args.one else parent(args)


if __name__ == "__main__":
    sys.exit(main())
