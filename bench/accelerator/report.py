"""The results dict -> the Markdown table the run writes (after every part, so a killed run keeps its rows).

Derived figures: a DiT's time per block is (N-block forward - embed+head forward) / N, and its
step at full depth is embed+head + depth x per block; TFLOP/s and MFU divide the FLOPs counted
from the shapes (`cases.dit_flops`) by those times and the chip's dense bf16 peak.
"""

from __future__ import annotations

from typing import Any

GB = 1e9


def _f(value: float | None, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def dit_figures(entry: dict, side: str, peak: float | None) -> dict[str, Any] | None:
    """Per-block and full-depth figures of one side of a DiT case (None if it did not run)."""
    res = entry.get(side)
    if not res or "error" in res:
        return None
    case, flops = entry["case"], entry["flops"]
    n, depth = case["run_depth"], case["depth"]
    full, outside = res["full"]["median"], res["outside"]["median"]
    per_block = max(full - outside, 1e-9) / n
    step = outside + depth * per_block
    out = {"per_block": per_block, "step": step, "tflops": flops["step"] / step / 1e12,
           "block_tflops": flops["block"] / per_block / 1e12}
    out["mfu"] = out["tflops"] / peak if peak else None
    out["block_mfu"] = out["block_tflops"] / peak if peak else None
    peak_bytes = res.get("plan_bytes") if side == "vidax" else res.get("peak_bytes")
    out["peak_gb"] = None if peak_bytes is None else peak_bytes / GB
    out["full_gb"] = None if peak_bytes is None else (peak_bytes + (depth - n) * res["block_weight_bytes"]) / GB
    return out


def render(results: dict) -> str:
    meta = results.get("meta", {})
    peak = meta.get("peak_tflops")
    lines = [f"# vidax accelerator benchmark ({meta.get('profile', '?')} shapes)", ""]
    lines += [
        f"- date: {meta.get('date', '?')}; chip: {meta.get('device_kind', '?')} ({meta.get('backend', '?')}, "
        f"{meta.get('devices', '?')} device(s)); jax {meta.get('jax', '?')}; "
        f"torch {meta.get('torch', {}).get('torch', '-')}, diffusers {meta.get('torch', {}).get('diffusers', '-')} "
        f"on {meta.get('torch', {}).get('device', '-')}",
        f"- bf16 dense peak: {_f(peak, '.0f')} TFLOP/s ({meta.get('peak_source', 'table')})",
    ]
    cal = results.get("calibration")
    if cal:
        share = f" = {cal['tflops'] / peak:.0%} of peak" if peak else ""
        lines.append(f"- calibration: bf16 {cal['n']}^3 matmul through jnp.dot: {cal['tflops']:.1f} TFLOP/s{share}")
    lines.append(f"- run: {results.get('elapsed_s', 0):.0f} s of a {meta.get('budget_s', 0):.0f} s budget")
    lines += _dit_table(results.get("dit", {}), peak)
    lines += _breakdown_table(results.get("dit", {}), results.get("attention", {}), peak)
    lines += _compile_table(results.get("compile", {}))
    lines += _attention_table(results.get("attention", {}), peak)
    lines += _offload_table(results.get("offload"))
    lines += _vae_table(results.get("vae", {}))
    notes = [f"- skipped: {s}" for s in results.get("skipped", [])]
    notes += [f"- error: {e}" for e in results.get("errors", [])]
    if notes:
        lines += ["", "## Skipped and failed", ""] + notes
    return "\n".join(lines) + "\n"


def _dit_table(dits: dict, peak: float | None) -> list[str]:
    if not dits:
        return []
    lines = ["", "## DiT step, bf16, batch 2 (the CFG pair of one guided step)", "",
             "N blocks at real width run; per step = embed+head + depth x per-block time (full depth, scaled).",
             "Peak GB: vidax = XLA's buffer plan of the N-block program, diffusers = torch max allocated; "
             "full depth adds (depth - N) blocks' weights.", "",
             "| case | tokens (video + text) | side | ms / block | step s (depth) | TFLOP / step | TFLOP/s | MFU "
             "| block MFU | peak GB (N) | GB full depth | kernel | vs diffusers |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for entry in dits.values():
        case, flops = entry["case"], entry["flops"]
        ours, ref = dit_figures(entry, "vidax", peak), dit_figures(entry, "diffusers", peak)
        for side, fig in (("vidax", ours), ("diffusers", ref)):
            res = entry.get(side) or {}
            name = f"{case['label']}, N={case['run_depth']}"
            tokens = f"{case['tokens']} + {case['text_tokens']}"
            if fig is None:
                why = res.get("error", "not run") if res else "not run"
                lines.append(f"| {name} | {tokens} | {side} | {why} |  |  |  |  |  |  |  |  |  |  |")
                continue
            kernel = (f"{res.get('attention_kernel')} ({res.get('fmha_calls', 0)} fmha calls)" if side == "vidax"
                      else res.get("attention_backend", ""))
            ratio = f"{fig['step'] / ref['step']:.2f}x" if side == "vidax" and ref else ""
            lines.append(
                f"| {name} | {tokens} | {side} | {fig['per_block'] * 1e3:.1f} | {fig['step']:.2f} ({case['depth']}) "
                f"| {flops['step'] / 1e12:.1f} | {fig['tflops']:.1f} | {_f(fig['mfu'], '.1%')} "
                f"| {_f(fig['block_mfu'], '.1%')} | {_f(fig['peak_gb'], '.1f')} | {_f(fig['full_gb'], '.1f')} "
                f"| {kernel} | {ratio} |")
    return lines


def _breakdown_table(dits: dict, attention: dict, peak: float | None) -> list[str]:
    """A vidax block's time split into its self-attention (timed alone, same shapes) and the rest."""
    rows = []
    for key, entry in dits.items():
        fig = dit_figures(entry, "vidax", peak)
        att = attention.get(key, {})
        timed = [(name, row) for name, row in (att.get("vidax") or {}).get("rows", {}).items()
                 if name.startswith("vidax entry point") and "median" in row]
        if fig is None or not timed:
            continue
        name, row = timed[0]
        att_s, att_flops = row["median"], att["flops"]
        rest_s, rest_flops = fig["per_block"] - att_s, entry["flops"]["block"] - att_flops
        rest = f"{rest_flops / rest_s / 1e12:.1f}" if rest_s > 0 else "-"
        rows.append(f"| {entry['case']['label']} | {fig['per_block'] * 1e3:.1f} | {att_s * 1e3:.1f} "
                    f"({name.split('(')[-1].rstrip(')')}) | {att_s / fig['per_block']:.0%} "
                    f"| {att_flops / att_s / 1e12:.1f} | {rest_s * 1e3:.1f} | {rest} |")
    if not rows:
        return []
    return ["", "## Where a vidax block's time goes (self-attention timed alone at the same shapes)", "",
            "| case | block ms | attention ms (kernel) | attention share | attention TFLOP/s | rest ms "
            "| rest TFLOP/s (projections, FFN, norms) |", "|---|---|---|---|---|---|---|"] + rows


def _compile_table(compile_: dict) -> list[str]:
    if not compile_:
        return []
    lines = ["", f"## Compile: {compile_.get('label', '')} forward (one block body under lax.scan)", "",
             "| run | trace + lower s | compile s | persistent cache |", "|---|---|---|---|"]
    names = {"cold": "this process, empty cache (its first compile)",
             "cold_process": "fresh process, empty cache folder",
             "warm": "fresh process, the cache folder filled above"}
    if compile_.get("warm", {}).get("in_process"):
        names["warm"] = "this process again, in-memory caches dropped (a TPU opens for one process)"
    for key, name in names.items():
        row = compile_.get(key)
        if row is None:
            continue
        if "error" in row:
            lines.append(f"| {name} | {row['error']} |  |  |")
            continue
        cache = f"{row['hits']} hit(s), {row['misses']} miss(es)" if "hits" in row else "-"
        lines.append(f"| {name} | {row['lower_s']:.2f} | {row['compile_s']:.2f} | {cache} |")
    return lines


def _attention_table(attention: dict, peak: float | None) -> list[str]:
    if not attention:
        return []
    lines = ["", "## Attention alone, bf16 (`zoo.compute.attention` vs torch SDPA), FLOPs 4*B*H*Sq*Skv*D over valid keys", "",
             "| case | B x S x H x D | side | kernel | ms | TFLOP/s | MFU |", "|---|---|---|---|---|---|---|"]
    for entry in attention.values():
        case, flops = entry["case"], entry["flops"]
        shape = f"{case['batch']} x {case['tokens']} x {case['heads']} x {case['head_dim']}"
        for side in ("vidax", "diffusers"):
            res = entry.get(side) or {}
            if "error" in res:
                lines.append(f"| {case['label']} | {shape} | {side} | {res['error']} |  |  |  |")
                continue
            for name, row in res.get("rows", {}).items():
                if "error" in row:
                    lines.append(f"| {case['label']} | {shape} | {side} | {name}: {row['error']} |  |  |  |")
                    continue
                ms, rows_flops = row["median"] * 1e3, flops
                if "valid prefix" in name:  # the trimmed run does only the valid rows' work
                    rows_flops = flops * case["valid"] / case["tokens"]
                tflops = rows_flops / row["median"] / 1e12
                lines.append(f"| {case['label']} | {shape} | {side} | {name} | {ms:.1f} | {tflops:.1f} "
                             f"| {_f(tflops / peak if peak else None, '.1%')} |")
    return lines


def _offload_table(offload: dict | None) -> list[str]:
    if not offload:
        return []
    if "error" in offload:
        return ["", "## Streamed offload", "", f"error: {offload['error']}"]
    lines = ["", f"## Streamed offload: {offload.get('label', '')}, {offload['depth']} blocks, bf16 "
             f"(host memory kinds: {', '.join(offload.get('memory_kinds', []))})", "",
             "| config | s / forward | vs resident | chunks | GB / chunk | H2D GB/s (one chunk) |",
             "|---|---|---|---|---|---|"]
    resident = offload["rows"]["resident"]["timing"]["median"]
    for name, row in offload["rows"].items():
        t = row["timing"]["median"]
        if name == "resident":
            lines.append(f"| all blocks resident | {t:.3f} | 1.00x | - | - | - |")
        else:
            lines.append(f"| offload {name} | {t:.3f} | {t / resident:.2f}x | {row['chunks']} "
                         f"| {row['chunk_bytes'] / GB:.2f} | {row['h2d_gbps']:.1f} |")
    return lines


def _vae_table(vaes: dict) -> list[str]:
    if not vaes:
        return []
    lines = ["", "## VAE decode, fp32 weights (as shipped), one video", "",
             "| case | frames | side | first call s (incl. compile) | s / decode | ms / frame | peak GB "
             "| vs diffusers |",
             "|---|---|---|---|---|---|---|---|"]
    for entry in vaes.values():
        case = entry["case"]
        ref = entry.get("diffusers") or {}
        ref_t = ref.get("decode", {}).get("median") if "error" not in ref else None
        for side in ("vidax", "diffusers"):
            res = entry.get(side) or {}
            if not res or "error" in res:
                lines.append(f"| {case['label']} | {case['frames']} | {side} | {res.get('error', 'not run')} "
                             "|  |  |  |  |")
                continue
            t = res["decode"]["median"]
            peak = res.get("peak_bytes") if side == "diffusers" else None
            ratio = f"{t / ref_t:.2f}x" if side == "vidax" and ref_t else ""
            lines.append(f"| {case['label']} | {case['frames']} | {side} | {res['decode']['first']:.2f} | {t:.3f} "
                         f"| {t / case['frames'] * 1e3:.1f} | {_f(None if peak is None else peak / GB, '.1f')} "
                         f"| {ratio} |")
    return lines
