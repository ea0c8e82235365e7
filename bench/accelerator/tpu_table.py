"""One table from a TPU run of `scripts/bench_tpu.sh`: vidax's DiT rows, MaxDiffusion's, their ratio,
the attention sweep and the TPU tier's outcome.

    python -m bench.accelerator.tpu_table OUT_DIR      # reads the run's JSON and logs, prints Markdown

It reads `vidax*.json` (the accelerator bench's own JSON, one per process), `md*.json` or the per-run
JSON lines of `md*.log` (`bench.accelerator.maxdiffusion_side`), `sweep.log`
(`python -m vidax.zoo.compute.kernels.tpu_blocks`) and `tier.log` (pytest -m tpu), whichever exist.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from bench.accelerator import report

# vidax case key -> the MaxDiffusion shape of the same model, size and batch
PEERS = {"wan-480p": "wan14b_480p", "wan13-480p": "wan1.3b_480p", "wan-720p": "wan14b_720p"}


def vidax_rows(out: Path) -> dict[str, dict]:
    """`{case key: {"label", "ms_block", "step_s", "mfu", "plan_gb", "compile_s"}}` (or `{"error"}`)."""
    rows: dict[str, dict] = {}
    for path in sorted(out.glob("vidax*.json")):
        results = json.loads(path.read_text())
        peak = results.get("meta", {}).get("peak_tflops")
        for key, entry in results.get("dit", {}).items():
            ours = entry.get("vidax", {})
            if "error" in ours or "full" not in ours:
                rows[key] = {"label": entry["case"]["label"], "error": ours.get("error", "not run")}
                continue
            fig = report.dit_figures(entry, "vidax", peak)
            outside = fig["step"] - entry["case"]["depth"] * fig["per_block"]  # embed + head
            rows[key] = {"label": entry["case"]["label"], "ms_block": 1e3 * fig["per_block"], "step_s": fig["step"],
                         "ms_outside": 1e3 * outside,
                         "mfu": fig.get("mfu"), "plan_gb": (ours.get("plan_bytes") or 0) / 1e9,
                         "compile_s": ours["compile"]["compile_s"] + ours["compile"]["lower_s"]}
    return rows


def maxdiffusion_runs(out: Path) -> list[dict]:
    """Every MaxDiffusion run recorded: the JSON reports, else the JSON lines its log kept."""
    runs: list[dict] = []
    for path in sorted(out.glob("md*.json")):
        report_ = json.loads(path.read_text())
        runs += [{**run, "shape": report_["shape"]["name"]} for run in report_.get("runs", [])]
    if runs:
        return runs
    for path in sorted(out.glob("md*.log")):
        for line in path.read_text().splitlines():
            if line.startswith("{") and '"shape"' in line:
                run = json.loads(line)
                runs.append(run)
    return runs


def _blocks(run: dict) -> str:
    sizes = run.get("flash_block_sizes") or {}
    return "/".join(str(sizes.get(k, "?")) for k in ("block_q", "block_kv", "block_kv_compute"))


def speed_up(row: dict, peer: dict) -> float:
    """MaxDiffusion's time over vidax's for the same work: per block from the slope between its layer
    counts where it has one, else its whole N-layer forward against vidax's N blocks plus embed and head."""
    if peer.get("ms_per_block_slope"):
        return peer["ms_per_block_slope"] / row["ms_block"]
    return peer["ms_per_forward"] / (peer["layers"] * row["ms_block"] + row["ms_outside"])


def peer_ms_per_block(run: dict) -> float:
    """Per-block ms: the slope between layer counts where measured, else the forward over its layers
    (embed and head included)."""
    return run.get("ms_per_block_slope") or run["ms_per_forward"] / run["layers"]


def render(out: Path) -> str:
    rows = vidax_rows(out)
    runs = [r for r in maxdiffusion_runs(out) if "error" not in r]
    lines = ["| case | vidax ms / block | step s | MFU | XLA plan GB | compile s | MaxDiffusion ms / block "
             "(blocks q/kv/kv_compute, layers) | MaxDiffusion temporaries GiB | vidax speed-up |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, row in rows.items():
        if "error" in row:
            lines.append(f"| {row['label']} | {row['error'][:120]} |  |  |  |  |  |  |  |")
            continue
        peers = [r for r in runs if r.get("shape") == PEERS.get(key)]
        mfu = f"{100 * row['mfu']:.1f}%" if row.get("mfu") else "-"
        if not peers:
            lines.append(f"| {row['label']} | {row['ms_block']:.1f} | {row['step_s']:.2f} | {mfu} | "
                         f"{row['plan_gb']:.1f} | {row['compile_s']:.1f} | not measured |  |  |")
        for peer in peers:
            theirs = peer_ms_per_block(peer)
            lines.append(f"| {row['label']} | {row['ms_block']:.1f} | {row['step_s']:.2f} | {mfu} | "
                         f"{row['plan_gb']:.1f} | {row['compile_s']:.1f} | {theirs:.1f} ({_blocks(peer)}, "
                         f"{peer['layers']}) | {peer.get('temp_gib', 0):.2f} | {speed_up(row, peer):.2f}x |")
    side = out / "side.json"
    if side.exists():  # bench.accelerator.side_by_side: the two called in turns in one process
        from bench.accelerator.side_by_side import table as side_table

        lines += ["", side_table(json.loads(side.read_text()))]
    sweep = out / "sweep.log"
    if sweep.exists():
        lines += ["", "Attention alone (`python -m vidax.zoo.compute.kernels.tpu_blocks`):", "", "```",
                  *(line for line in sweep.read_text().strip().splitlines() if "warn" not in line.lower()), "```"]
    tier = out / "tier.log"
    if tier.exists():
        summary = [line for line in tier.read_text().splitlines() if re.search(r"\d+ (passed|failed)", line)]
        lines += ["", f"TPU tier (`pytest -m tpu`): {summary[-1].strip('= ') if summary else 'no summary (stopped)'}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.accelerator.tpu_table OUT_DIR", file=sys.stderr)
        return 2
    print(render(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
