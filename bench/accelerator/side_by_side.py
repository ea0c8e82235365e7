"""vidax and MaxDiffusion's Wan transformer timed in one process, their calls interleaved.

Two programs timed one after the other in separate processes see different chip clocks, host
load and memory-pool states; a ratio between such runs is not a measurement. Here both sides are
built in one process (random weights, the same shapes, the CFG pair as the batch), compiled and
warmed, then called in turns, A B A B ..., each call synced before the next starts. The report
gives each side's median, the ratio, and the per-block cost from the slope between two depths
(free of the embed and head, which differ between the two codebases).

    python -m bench.accelerator.side_by_side --shape wan14b_480p --layers 1,2 \\
        --blocks 1024,2048,1024 --blocks 512,512,512 --rounds 7 --out side.json   # TPU
    python -m bench.accelerator.side_by_side --toy                                # CPU, seconds

vidax's attention blocks follow each `--blocks` (through `VIDAX_TPU_ATTENTION`) so that the
kernel and its tiles are the same on both sides; `--vidax-own` adds vidax with its own choice
(the chip's table), `--vidax-always-own` runs vidax's own choice beside each of MaxDiffusion's.
`--peer KIND:Q,KV,KC` adds MaxDiffusion's other attention paths beside vidax's own choice, e.g. its custom
kernel with the fixed softmax bound, `--peer ulysses_custom_fixed_m:4864,1024,1024` (Ulysses over a one-chip
mesh: no exchange, the local kernel; its fast-inference script's other fields, `maxdiffusion_side.block_sizes_for`);
`--vidax-attention LABEL` sets vidax's own choice for long keys (`VIDAX_TPU_ATTENTION_LONG`, e.g.
`exp2_bounded:2048,4096,1024`; cross-attention to text keeps the table's).
Both sides share the process's `LIBTPU_INIT_ARGS` (vidax raises the scoped VMEM limit to 64 MiB
when it is imported: MaxDiffusion's README asks for the same flag). MaxDiffusion's source comes from `.bench/maxdiffusion` as for
`bench.accelerator.maxdiffusion_side`. `--trace DIR` records one profiled call of each side and
writes the device ops' time per op name (`jax.profiler`'s Perfetto trace, summarised).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.accelerator import cases, maxdiffusion_side
from bench.accelerator.run import ensure_vidax


def vidax_case(shape: maxdiffusion_side.Shape, layers: int, batch: int) -> cases.DitCase:
    """The vidax bench case with MaxDiffusion's shape: same config fields, frames, size, text."""
    config = dict(cases.WAN14B, num_attention_heads=shape.heads, attention_head_dim=shape.head_dim,
                  ffn_dim=shape.ffn, num_layers=shape.depth, text_dim=shape.text_dim, freq_dim=shape.freq_dim,
                  in_channels=shape.in_channels, out_channels=shape.in_channels)
    f, h, w = shape.latent
    frames, height, width = 4 * (f - 1) + 1, h * 8, w * 8
    return cases.DitCase(f"{shape.name}-{layers}", "wan", f"vidax Wan {shape.name}", config, frames, height, width,
                         layers, batch=batch, text=shape.text_tokens)


def prepare_vidax(case: cases.DitCase) -> dict:
    import jax

    from bench.accelerator.vidax_side import DitHarness, memory_plan_bytes

    harness = DitHarness(case)
    start = time.perf_counter()
    compiled = harness.compile(True)
    compile_s = time.perf_counter() - start
    out = jax.block_until_ready(harness.run(True))  # warm-up
    mem = compiled.memory_analysis()
    return {"call": lambda: harness.run(True), "harness": harness, "compile_s": compile_s,
            "temp_bytes": getattr(mem, "temp_size_in_bytes", None), "plan_bytes": memory_plan_bytes(compiled),
            "attention_kernel": harness.attention_kernel(),
            "output_finite": bool(jax.numpy.isfinite(out.astype("float32")).all())}


def interleave(calls: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Seconds per call for each side, called in turns (the order alternates every round)."""
    import jax

    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            start = time.perf_counter()
            jax.block_until_ready(calls[name]())
            times[name].append(time.perf_counter() - start)
    return times


def device_op_times(trace_dir: str, top: int = 40) -> dict:
    """Device-op time per op name from the Perfetto trace `jax.profiler.trace` wrote (microseconds)."""
    found = sorted(Path(trace_dir).rglob("*.trace.json.gz")) or sorted(Path(trace_dir).rglob("perfetto_trace.json.gz"))
    if not found:
        return {"error": f"no trace file under {trace_dir}"}
    with gzip.open(found[-1], "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    process = {e["pid"]: e.get("args", {}).get("name", "") for e in events
               if e.get("ph") == "M" and e.get("name") == "process_name"}
    thread = {(e["pid"], e["tid"]): e.get("args", {}).get("name", "") for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    lanes: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        pname = process.get(e["pid"], "")
        if "TPU:0" not in pname and "/device:" not in pname:
            continue
        lane = thread.get((e["pid"], e.get("tid")), "")
        lanes[lane] += e["dur"]
        if "XLA Ops" not in lane:
            continue
        entry = by_name[e["name"]]
        entry[0] += e["dur"]
        entry[1] += 1
    ops = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    total = sum(v[0] for v in by_name.values())
    return {"xla_ops_us": total, "lanes_us": dict(lanes), "file": found[-1].name,
            "processes": sorted(set(process.values()))[:20],
            "top": [{"op": name, "us": round(us, 1), "count": n, "share": round(us / total, 4) if total else None}
                    for name, (us, n) in ops[:top]]}


def traced(call, name: str) -> dict:
    import jax

    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            jax.block_until_ready(call())
        summary = device_op_times(tmp)
    summary["side"] = name
    return summary


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(maxdiffusion_side.SHAPES), default="wan14b_480p")
    parser.add_argument("--toy", action="store_true", help="--shape toy on the CPU, splash in interpret mode")
    parser.add_argument("--layers", default="1,2", help="depths (two give the per-block slope)")
    parser.add_argument("--blocks", type=maxdiffusion_side._parse_blocks, action="append", default=None,
                        help="block_q,block_kv,block_kv_compute for both sides (repeatable)")
    parser.add_argument("--vidax-own", action="store_true", help="also vidax alone with its own block choice")
    parser.add_argument("--vidax-always-own", action="store_true",
                        help="vidax runs its own block choice beside each of MaxDiffusion's --blocks")
    parser.add_argument("--peer", action="append", default=[], type=_parse_peer,
                        help="KIND:Q,KV,KC: a MaxDiffusion attention path beside vidax's own choice (repeatable)")
    parser.add_argument("--vidax-attention", default=None,
                        help="vidax's own choice for long keys (VIDAX_TPU_ATTENTION_LONG), the table's for the others")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trace", action="store_true", help="summarise one profiled call per side")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.toy:
        args.shape = "toy"
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        args.blocks = args.blocks or [(128, 128, 128)]
        args.rounds = min(args.rounds, 3)
    ensure_vidax()
    import vidax.zoo.compute.runtime  # noqa: F401 - sets the scoped VMEM flag before the backend starts
    from vidax.zoo.compute.kernels import tpu_blocks

    source = maxdiffusion_side.setup_imports()
    import jax

    maxdiffusion_side.record_kernels()
    if args.toy:
        maxdiffusion_side.use_pallas_interpret()
    shape = maxdiffusion_side.SHAPES[args.shape]
    device = jax.devices()[0]
    report: dict[str, Any] = {
        "device": {"backend": jax.default_backend(), "kind": device.device_kind, "jax": jax.__version__,
                   "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS")},
        "maxdiffusion": source, "shape": dataclasses.asdict(shape), "rounds": args.rounds,
        "load_before": os.getloadavg(), "runs": [],
    }
    splash_kind = "dot_product" if args.toy else "flash"
    # (MaxDiffusion's attention kind or None, its blocks, the setting's label, vidax's override or None = own)
    settings = [(splash_kind, blocks, f"{splash_kind} {blocks[0]},{blocks[1]},{blocks[2]}",
                 None if args.vidax_always_own else f"splash:{blocks[0]},{blocks[1]},{blocks[2]}")
                for blocks in (args.blocks or ([] if args.peer else [(512, 512, 512)]))]
    settings += [(kind, blocks, f"{kind} {blocks[0]},{blocks[1]},{blocks[2]}", None) for kind, blocks in args.peer]
    if args.vidax_own:
        settings.append((None, None, "vidax's own", None))
    for layers in [int(n) for n in args.layers.split(",")]:
        for kind, blocks, label, vidax_choice in settings:
            run: dict[str, Any] = {"layers": layers, "blocks": label, "vidax_blocks": vidax_choice or "own"}
            calls = {}
            try:
                if vidax_choice:  # the same kernel and tiles as MaxDiffusion's, for every attention call
                    os.environ["VIDAX_TPU_ATTENTION"] = vidax_choice
                else:
                    os.environ.pop("VIDAX_TPU_ATTENTION", None)
                if args.vidax_attention:  # vidax's own choice with another kernel for long keys (the table's else)
                    os.environ[tpu_blocks.LONG_CHOICE_ENV] = args.vidax_attention
                ours = prepare_vidax(vidax_case(shape, layers, args.batch))
                ours["tpu_blocks"] = (tpu_blocks.override() or tpu_blocks.override(tpu_blocks.LONG_CHOICE_ENV)
                                      or tpu_blocks.default_for(device.device_kind)).label()
                calls["vidax"] = ours.pop("call")
                ours.pop("harness")
                run["vidax"] = ours
                if kind is not None:
                    custom = "custom" in kind
                    theirs = maxdiffusion_side.prepare(shape, layers, kind,
                                                      None if args.toy and not custom else blocks, batch=args.batch,
                                                      flash_min_seq_length=0 if args.toy and custom else None)
                    calls["maxdiffusion"] = theirs.pop("call")
                    run["maxdiffusion"] = theirs
                times = interleave(calls, args.rounds)
                for name, t in times.items():
                    run[name]["ms"] = statistics.median(t) * 1e3
                    run[name]["times_ms"] = [x * 1e3 for x in t]
                if "maxdiffusion" in calls:
                    run["maxdiffusion_over_vidax"] = run["maxdiffusion"]["ms"] / run["vidax"]["ms"]
                if args.trace:
                    run["trace"] = [traced(call, name) for name, call in calls.items()]
            except Exception as exc:  # noqa: BLE001 - one OOM must not lose the other settings
                run["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
            print(json.dumps({k: v for k, v in run.items() if k != "trace"}, default=str), file=sys.stderr,
                  flush=True)
            report["runs"].append(run)
            del calls
    _slopes(report["runs"])
    report["load_after"] = os.getloadavg()
    text = json.dumps(report, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    print(table(report))
    return report


def _parse_peer(text: str) -> tuple[str, tuple[int, int, int]]:
    kind, _, blocks = text.partition(":")
    if not kind or not blocks:
        raise argparse.ArgumentTypeError("--peer is KIND:Q,KV,KC, e.g. ulysses_custom_fixed_m:4864,1024,1024")
    return kind, maxdiffusion_side._parse_blocks(blocks)


def _slopes(runs: list[dict]) -> None:
    """ms per block from the two depths of each setting, for each side."""
    by_setting: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        if "error" not in run:
            by_setting[run["blocks"]].append(run)
    for group in by_setting.values():
        if len(group) < 2:
            continue
        a, b = group[0], group[-1]
        for side in ("vidax", "maxdiffusion"):
            if side in a and side in b:
                b[side]["ms_per_block_slope"] = (b[side]["ms"] - a[side]["ms"]) / (b["layers"] - a["layers"])


def table(report: dict) -> str:
    lines = [f"# side by side on {report['device']['kind']} (jax {report['device']['jax']}), "
             f"load {report['load_before'][0]:.2f} before / {report['load_after'][0]:.2f} after",
             "| layers | MaxDiffusion's path | vidax's attention | vidax ms | MaxDiffusion ms | MD / vidax | "
             "vidax ms/block | MD ms/block |",
             "|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        if "error" in run:
            lines.append(f"| {run['layers']} | {run['blocks']} | error: {run['error'][:120]} ||||||")
            continue
        ours, theirs = run["vidax"], run.get("maxdiffusion", {})
        fmt = lambda x: f"{x:.1f}" if isinstance(x, (int, float)) else "—"  # noqa: E731
        lines.append(f"| {run['layers']} | {run['blocks']} | {ours.get('tpu_blocks', '-')} | {fmt(ours.get('ms'))} | "
                     f"{fmt(theirs.get('ms'))} | "
                     f"{run.get('maxdiffusion_over_vidax', float('nan')):.3f} | "
                     f"{fmt(ours.get('ms_per_block_slope'))} | {fmt(theirs.get('ms_per_block_slope'))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(1 if any("error" in run for run in main()["runs"]) else 0)
