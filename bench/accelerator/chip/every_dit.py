"""Every registered model's DiT step at its native size on one device: ms per block, MFU, attention share,
peak memory beside what `--dry-run` predicts, and cold / warm compile.

The programs are the dry run's own (`vidax.zoo.plan.dry_run.step_args`: the family's predictor, its
condition and the CFG rows its defaults guide with, the DiT cut to a depth), so nothing here knows a
family: a model the dry run builds is a model this bench times. Weights are random at the synthetic
folders' scale (`vidax.zoo.plan.synthetic.leaf_init`: N(0, 0.02), norm scales 1 + N(0, 0.02)) in the
dtype the dry run compiles (bf16), drawn on the device.

For each model, in a process of its own (JAX's memory pool keeps its peak until the process ends):
- the step at depth 1 (one block of each group) and at depth 0 (embed and head alone): one block = t(1) - t(0),
  the native step estimated as t(0) + depth x block (single-group DiTs);
- FLOPs from the program's jaxpr with attention traced as plain XLA products (`count_flops`: every
  dot_general and convolution, loop bodies times their trip count), so MFU counts attention too;
- attention alone at each distinct shape the block calls it with (recorded while tracing), for the share;
- XLA's memory analysis of the depth-1 program (what `vidax-gen MODEL --dry-run` reports for it) beside the
  device's `peak_bytes_in_use` after running it;
- compile seconds with the persistent cache empty (cold), apart from trace + lower (which times the TPU
  attention candidates of a shape met the first time, unless VIDAX_NO_TPU_TUNING is set); `warm` recompiles
  every model's depth-1 program in one process from the cache the runs filled.

    python -m bench.accelerator.chip.every_dit all --out-dir OUT [--budget 480] [--models a,b,...]
    python -m bench.accelerator.chip.every_dit one MODEL [--size WxHxF] --out JSON
    python -m bench.accelerator.chip.every_dit table OUT          # the markdown table from OUT/*.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The table: every family at real width (Wan 1.3B at full depth through the estimate), VACE with its
# extra blocks. `model@WxHxF` overrides the native size.
MODELS = ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b@832x480x81", "wan2.1-vace-1.3b", "hunyuanvideo",
          "hunyuanvideo-1.5", "cogvideox-5b", "cogvideox1.5-5b", "ltx-video-13b", "ltx-2",
          "cosmos-predict2.5-14b", "cosmos3-nano", "wan2.1-t2v-14b")


def _split(spec: str) -> tuple[str, tuple[int, int, int] | None]:
    model, _, size = spec.partition("@")
    if not size:
        return model, None
    w, h, f = (int(x) for x in size.split("x"))
    return model, (w, h, f)


# --- FLOPs from a jaxpr ---------------------------------------------------------------------------


def _sub_jaxprs(eqn) -> list:
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            jaxpr = getattr(item, "jaxpr", None)
            if jaxpr is not None and hasattr(jaxpr, "eqns"):
                found.append(jaxpr)
            elif hasattr(item, "eqns"):
                found.append(item)
    return found


def jaxpr_flops(jaxpr) -> float:
    """Multiply-adds x 2 of every dot_general and convolution; scans count their length, conds their costliest
    branch, while loops once (none in the DiTs' programs)."""
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            rhs_free = math.prod(d for i, d in enumerate(rhs) if i not in rc and i not in rb)
            total += 2.0 * math.prod(lhs) * rhs_free
        elif name == "conv_general_dilated":
            out = eqn.outvars[0].aval.shape
            kernel = eqn.invars[1].aval.shape
            spec = eqn.params["dimension_numbers"].rhs_spec  # (out feature, in feature, spatial...)
            per_output = math.prod(kernel[i] for i in spec[1:])
            total += 2.0 * math.prod(out) * per_output
        elif name == "cond":
            total += max(jaxpr_flops(b.jaxpr) for b in eqn.params["branches"])
        elif name == "scan":
            total += eqn.params["length"] * jaxpr_flops(eqn.params["jaxpr"].jaxpr)
        else:
            total += sum(jaxpr_flops(sub) for sub in _sub_jaxprs(eqn))
    return total


@contextmanager
def plain_attention_kernels():
    """Trace attention as XLA products (plain below the threshold, blockwise above), so a jaxpr counts it."""
    from vidax.zoo.compute import attention as module

    original = module.choose_kernel
    module.choose_kernel = lambda q, k, kv_mask: ("plain" if q.shape[1] * k.shape[1] <= module.PLAIN_MAX_LOGITS
                                                  else "blockwise")
    try:
        yield
    finally:
        module.choose_kernel = original


@contextmanager
def recorded_attention(calls: list):
    """Record `(q shape, k shape, masked)` of every local attention call traced inside the block."""
    from vidax.zoo.compute import attention as module

    original = module.local_attention

    def recording(q, k, v, kv_mask=None, **kw):
        calls.append((tuple(q.shape), tuple(k.shape), kv_mask is not None, str(q.dtype)))
        return original(q, k, v, kv_mask, **kw)

    module.local_attention = recording
    try:
        yield
    finally:
        module.local_attention = original


def count_flops(fn, args) -> float:
    """FLOPs of `fn` with attention as XLA products. Traced through a wrapper of its own: jax keeps the trace of
    `make_jaxpr(fn)` and `jax.jit(fn).lower` reuses it, so counting on `fn` itself made the timed program run
    the blockwise XLA attention traced here instead of the kernel (run G's Wan2.1-14B block: 2,164 ms)."""
    import jax

    with plain_attention_kernels():
        return jaxpr_flops(jax.make_jaxpr(lambda *a: fn(*a))(*args).jaxpr)


# --- one model ------------------------------------------------------------------------------------


def _options(model: str, size):
    from vidax.zoo.generator.options import GenerateOptions

    kw = {} if size is None else dict(width=size[0], height=size[1], frames=size[2])
    return GenerateOptions(model=model, prompt="a bench", **kw)


def _random_like(abstract_tree: Any, seed: int) -> Any:
    """Concrete arrays for an abstract tree: floats N(0, 0.02) (norm scales 1 + that, as the synthetic folders
    write), masks all True, integers zero. Drawn on the host with NumPy and put on the device leaf by leaf: a
    device program drawing every leaf took 20-50 s to compile on the v5e (run G), longer than the draw."""
    import jax
    import ml_dtypes
    import numpy as np
    from vidax.zoo.plan.synthetic import leaf_init

    rng = np.random.default_rng(seed)
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract_tree)
    out = []
    for path, leaf in paths:
        name = "/".join(str(getattr(p, "key", getattr(p, "idx", getattr(p, "name", p)))) for p in path)
        dtype = np.dtype(leaf.dtype) if leaf.dtype != jax.numpy.bfloat16 else np.dtype(ml_dtypes.bfloat16)
        if np.issubdtype(dtype, np.floating) or dtype == ml_dtypes.bfloat16:
            x = rng.standard_normal(leaf.shape, dtype=np.float32) * np.float32(0.02)
            value = (x + np.float32(1.0) if leaf_init(name) == "one" else x).astype(dtype)
        elif dtype == np.bool_:
            value = np.ones(leaf.shape, np.bool_)
        else:
            value = np.zeros(leaf.shape, dtype)
        out.append(jax.device_put(value, getattr(leaf, "sharding", None)))
    return jax.tree_util.tree_unflatten(treedef, out)


def _timed(fn, args, repeats: int) -> dict:
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "times_s": times}


def _program(family, s, depth: int):
    """The dry run's DiT step at `depth` blocks (per group): `(fn, abstract args, dit)`."""
    import jax.numpy as jnp
    from vidax.zoo.plan.dry_run import dit_step, stages_of, step_args

    parts = stages_of(family)
    dit = parts.dit(family, s, depth, jnp.bfloat16)
    cond = parts.cond(family, s, 2 if s.guided else 1)
    predict, args = step_args(family, s, dit, jnp.bfloat16, None, cond, stacked=True)
    return dit_step(predict, dit), args, dit


def _attention_alone(calls: list, repeats: int) -> list[dict]:
    """Each distinct attention call of the block timed alone (random q/k/v, the mask all True)."""
    import jax
    import jax.numpy as jnp
    from vidax.zoo.compute.attention import local_attention

    rows = []
    for (q_shape, k_shape, masked, dtype), count in _counted(calls):
        key = jax.random.key(7)
        q = jax.random.normal(key, q_shape, dtype)
        k = jax.random.normal(key, k_shape, dtype)
        mask = jnp.ones(k_shape[:2], bool) if masked else None
        fn = jax.jit(lambda q, k, v, m: local_attention(q, k, v, m, scale=q_shape[-1] ** -0.5))
        t = _timed(fn, (q, k, k, mask), repeats)
        b, sq, h, d = q_shape
        flops = 4.0 * b * h * sq * k_shape[1] * d
        rows.append({"q": q_shape, "k": k_shape, "masked": masked, "calls_per_unit": count, "ms": t["median_s"] * 1e3,
                     "tflop_s": flops / t["median_s"] / 1e12})
        del q, k, mask
    return rows


def _counted(calls: list) -> list:
    seen: dict = {}
    for c in calls:
        seen[c] = seen.get(c, 0) + 1
    return list(seen.items())


def _seconds(call):
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def _log(message: str) -> None:
    print(f"[every_dit {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure(spec: str, repeats: int = 2, out: Path | None = None) -> dict:
    """One model: the step at depth 1 (one block of each group; compile, FLOPs, memory, time) and at depth 0
    (embed and head alone), so one block = t(1) - t(0); then attention alone at the block's largest call.
    The row is written to `out` after each phase (a cut run keeps what it measured)."""
    import jax
    from vidax.zoo.registry import make_pipeline

    from bench.accelerator.cases import peak_tflops

    model, size = _split(spec)
    family = make_pipeline(model, _options(model, size))
    s = family.resolve_settings(_options(model, size))
    device = jax.devices()[0]
    peak = peak_tflops(device.device_kind)
    row: dict[str, Any] = {"spec": spec, "model": model, "size": f"{s.width}x{s.height}x{s.frames}",
                           "device": device.device_kind, "jax": jax.__version__, "guided": bool(s.guided),
                           "date": time.strftime("%Y-%m-%d"),
                           "heads_major": os.environ.get("VIDAX_HEADS_MAJOR", "by memory")}
    save = (lambda: out.write_text(json.dumps(row, indent=1, default=str))) if out else (lambda: None)
    runs: dict[str, dict] = {}
    for depth in (1, 0, 2):
        if depth == 2 and "0" in runs:
            break
        _log(f"{spec}: depth {depth}: tracing")
        calls: list = []
        try:
            fn, args, dit = _program(family, s, depth)
            with recorded_attention(calls):
                flops = count_flops(fn, args)  # traces the step: LTX-Video's STG row masks a block by index
        except Exception as error:  # noqa: BLE001 - a family whose step needs blocks (LTX-2's and LTX-Video's STG): depth 2 then
            if depth != 0:
                raise
            _log(f"{spec}: depth 0 cannot be built ({type(error).__name__}); depth 2 instead")
            continue
        if depth == 1:
            row["attention_calls"] = [list(c) for c in calls]
            row["depths"] = {g.name: dit_depth(family, s, g.name) for g in _groups(dit)}
        _log(f"{spec}: depth {depth}: compiling ({flops / 1e12:.1f} TFLOP)")
        # trace + lower apart from XLA's compile: tracing a shape met the first time times the TPU attention
        # candidates (`tpu_blocks.choose`, unless VIDAX_NO_TPU_TUNING is set), seconds no compiler spends
        lower_s, lowered = _seconds(lambda: jax.jit(fn).lower(*args))
        compile_s, compiled = _seconds(lowered.compile)
        del lowered
        memory = compiled.memory_analysis()
        # which attention ran: a TPU program that should call the kernel and has no Pallas call is no figure
        pallas_calls = compiled.as_text().count("tpu_custom_call")
        _log(f"{spec}: depth {depth}: traced and lowered in {lower_s:.1f} s, compiled in {compile_s:.1f} s; "
             "drawing inputs")
        concrete = _random_like(args, seed=depth + 1)
        try:
            result = jax.block_until_ready(compiled(*concrete))
        except Exception as error:  # noqa: BLE001 - as for tracing: depth 0 may not run (an empty scan's index)
            if depth != 0:
                raise
            _log(f"{spec}: depth 0 does not run ({type(error).__name__}); depth 2 instead")
            continue
        finite = bool(jax.numpy.isfinite(jax.numpy.asarray(jax.tree.leaves(result)[0], "float32")).all())
        del result
        t = _timed(compiled, concrete, repeats)
        stats = device.memory_stats() or {}
        runs[str(depth)] = {"lower_s": lower_s, "compile_s": compile_s, "ms": t["median_s"] * 1e3, "times_s": t["times_s"],
                            "flops": flops, "finite": finite, "pallas_calls": pallas_calls, "xla_argument": memory.argument_size_in_bytes,
                            "xla_output": memory.output_size_in_bytes, "xla_temp": memory.temp_size_in_bytes,
                            "xla_alias": memory.alias_size_in_bytes,
                            "peak_bytes_in_use": stats.get("peak_bytes_in_use"), "bytes_limit": stats.get("bytes_limit"),
                            # every figure the runtime gives (run G: its peak_bytes_in_use did not count XLA's
                            # temporaries, so the dry run's check needs to know which one does)
                            "memory_stats": dict(stats)}
        row["runs"] = runs
        _log(f"{spec}: depth {depth}: {t['median_s'] * 1e3:.1f} ms, finite {finite}")
        del concrete, compiled
        save()
    one = runs["1"]
    if "0" in runs:
        block_ms, block_flops = one["ms"] - runs["0"]["ms"], one["flops"] - runs["0"]["flops"]
    else:
        block_ms, block_flops = runs["2"]["ms"] - one["ms"], runs["2"]["flops"] - one["flops"]
    zero = {"ms": one["ms"] - block_ms, "flops": one["flops"] - block_flops}
    row.update(block_ms=block_ms, block_flops=block_flops, outside_ms=zero["ms"], outside_flops=zero["flops"])
    if peak and block_ms > 0:
        row["block_mfu"] = block_flops / (block_ms / 1e3) / (peak * 1e12)
    depths = row["depths"]
    if len(depths) == 1:
        depth = next(iter(depths.values()))
        row["native_depth"] = depth
        row["step_ms_estimate"] = zero["ms"] + depth * block_ms
        row["step_flops"] = zero["flops"] + depth * block_flops
        if peak:
            row["step_mfu_estimate"] = row["step_flops"] / (row["step_ms_estimate"] / 1e3) / (peak * 1e12)
    save()
    _log(f"{spec}: attention alone")
    largest = sorted(_counted(calls_of(row)), key=lambda c: -c[0][0][1] * c[0][1][1])[:2]
    row["attention"] = _attention_alone([c for c, n in largest for _ in range(n)], repeats)
    attention_ms = sum(a["ms"] * a["calls_per_unit"] for a in row["attention"])
    row["attention_ms_per_block"] = attention_ms
    if block_ms > 0:
        row["attention_share"] = attention_ms / block_ms
        rest_flops = block_flops - sum(4.0 * math.prod(a["q"][:3]) * a["k"][1] * a["q"][3] * a["calls_per_unit"]
                                       for a in row["attention"])
        if peak and block_ms > attention_ms:
            row["outside_attention_mfu"] = rest_flops / ((block_ms - attention_ms) / 1e3) / (peak * 1e12)
    save()
    _log(f"{spec}: done")
    return row


def calls_of(row: dict) -> list:
    return [(tuple(q), tuple(k), masked, dtype) for q, k, masked, dtype in row["attention_calls"]]


def _groups(dit):
    from vidax.zoo.parts.dit import block_groups

    return block_groups(dit)


def dit_depth(family, s, group: str) -> int:
    """The native depth of `group` (the uncut DiT's)."""
    import jax.numpy as jnp
    from vidax.zoo.plan.dry_run import stages_of

    import jax

    dit = stages_of(family).dit(family, s, None, jnp.bfloat16)
    shapes = jax.eval_shape(lambda: dit.init_params(jax.random.key(0)))
    return int(jax.tree.leaves(shapes[group])[0].shape[0])


def warm_compiles(specs: list[str]) -> list[dict]:
    """Every model's depth-1 program compiled again in this process, from the persistent cache the runs filled."""
    import jax
    from vidax.zoo.registry import make_pipeline

    rows = []
    for spec in specs:
        model, size = _split(spec)
        try:
            family = make_pipeline(model, _options(model, size))
            s = family.resolve_settings(_options(model, size))
            fn, args, _ = _program(family, s, 1)
            lower_s, lowered = _seconds(lambda: jax.jit(fn).lower(*args))
            compile_s, _ = _seconds(lowered.compile)
            rows.append({"model": spec, "warm_lower_s": lower_s, "warm_compile_s": compile_s})
        except Exception as error:  # noqa: BLE001 - a model that failed its run fails here too; keep going
            rows.append({"model": spec, "error": f"{type(error).__name__}: {str(error)[:300]}"})
    return rows


# --- the table ------------------------------------------------------------------------------------


def table(out_dir: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(out_dir.glob("dit-*.json"))]
    warm_file = out_dir / "warm.json"
    warm = {r["model"]: r for r in json.loads(warm_file.read_text())} if warm_file.exists() else {}
    gib = lambda n: "-" if n is None else f"{n / 2**30:.2f}"  # noqa: E731
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    seconds = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = ["| model | size | ms/block | block MFU | attention share | MFU outside attention | step (est.) | "
             "step MFU | peak HBM, 1 block (GiB) | XLA's analysis, 1 block (GiB) | compile cold / warm (s) | "
             "trace + lower (s) | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one = r.get("runs", {}).get("1")
        if one is None:
            lines.append(f"| {r['spec']} | {r.get('size', '-')} | - | - | - | - | - | - | - | - | - | - | "
                         f"{r.get('error', '?')[:160]} |")
            continue
        dry = one["xla_argument"] + one["xla_output"] + one["xla_temp"] - one["xla_alias"]
        w = warm.get(r["spec"], {}).get("warm_compile_s")
        step = "-" if "step_ms_estimate" not in r else f"{r['step_ms_estimate'] / 1e3:.2f} s"
        block = "-" if "block_ms" not in r else f"{r['block_ms']:.1f}"
        groups = r.get("depths", {})
        note = r.get("error", "") or ("one block of each group: " + ", ".join(f"{k} x{v}" for k, v in groups.items())
                                      if len(groups) > 1 else f"{next(iter(groups.values()), '?')} blocks")
        lines.append(
            f"| {r['model']} | {r['size']} | {block} | {pct(r.get('block_mfu'))} | "
            f"{pct(r.get('attention_share'))} | {pct(r.get('outside_attention_mfu'))} | {step} | "
            f"{pct(r.get('step_mfu_estimate'))} | {gib(one['peak_bytes_in_use'])} | {gib(dry)} | "
            f"{one['compile_s']:.1f} / {seconds(w)} | "
            f"{seconds(one.get('lower_s'))} | {note} |")
    return "\n".join(lines)


# --- the command ----------------------------------------------------------------------------------


def _file_name(spec: str) -> str:
    return "dit-" + spec.replace("@", "_").replace(".", "_") + ".json"


def run_all(specs: list[str], out_dir: Path, budget: float, per_model: float) -> None:
    """Each model in a child process (its own memory pool), a fresh persistent cache for all, then `warm`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = out_dir.parent / (out_dir.name + "-cache")
    env = dict(os.environ, VIDAX_CACHE_DIR=str(cache))
    deadline = time.time() + budget
    done = []
    for spec in specs:
        left = deadline - time.time()
        if left < 40:
            print(f"[every_dit] skipped {spec}: {left:.0f} s left", flush=True)
            continue
        target = out_dir / _file_name(spec)
        started = time.time()
        cmd = [sys.executable, "-m", "bench.accelerator.chip.every_dit", "one", spec, "--out", str(target)]
        log = target.with_suffix(".log")
        try:
            with log.open("w") as sink:
                code = subprocess.run(cmd, env=env, timeout=min(per_model, left), stdout=sink, stderr=subprocess.STDOUT).returncode
            why = None if code == 0 else f"exit code {code}"
        except subprocess.TimeoutExpired as error:
            why = f"timed out after {error.timeout:.0f} s"
        row = json.loads(target.read_text()) if target.exists() else {"spec": spec, "model": spec}
        if why and "error" not in row and "attention" not in row:
            row["error"] = why
            target.write_text(json.dumps(row, indent=1, default=str))
        if "runs" in row and "1" in row["runs"]:
            done.append(spec)
        print(f"[every_dit] {spec}: {why or 'ok'} in {time.time() - started:.0f} s", flush=True)
    if done and deadline - time.time() > 40:
        cmd = [sys.executable, "-m", "bench.accelerator.chip.every_dit", "warm", *done, "--out", str(out_dir / "warm.json")]
        try:
            subprocess.run(cmd, env=env, timeout=max(10, deadline - time.time()))
        except subprocess.TimeoutExpired:
            print("[every_dit] warm compiles cut by the budget", flush=True)
    (out_dir / "every_dit.md").write_text(table(out_dir) + "\n")
    print(table(out_dir), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("one")
    one.add_argument("spec")
    one.add_argument("--out", required=True)
    one.add_argument("--repeats", type=int, default=2)
    every = sub.add_parser("all")
    every.add_argument("--out-dir", required=True)
    every.add_argument("--models", default=",".join(MODELS))
    every.add_argument("--budget", type=float, default=480)
    every.add_argument("--per-model", type=float, default=120)
    warm = sub.add_parser("warm")
    warm.add_argument("specs", nargs="+")
    warm.add_argument("--out", required=True)
    show = sub.add_parser("table")
    show.add_argument("out_dir")
    args = parser.parse_args(argv)
    if args.command == "one":
        from vidax.zoo.compute.runtime import configure_compile_cache

        configure_compile_cache(True)
        out = Path(args.out)
        try:
            row = measure(args.spec, args.repeats, out)
        except Exception as error:  # noqa: BLE001 - the table says what stopped the model, in one line
            row = json.loads(out.read_text()) if out.exists() else {"spec": args.spec, "model": args.spec}
            row["error"] = f"{type(error).__name__}: {str(error)[:400]}"
            out.write_text(json.dumps(row, indent=1, default=str))
        print(json.dumps({k: v for k, v in row.items() if k not in ("runs", "attention_calls")}, default=str))
    elif args.command == "all":
        run_all([m for m in args.models.split(",") if m], Path(args.out_dir), args.budget, args.per_model)
    elif args.command == "warm":
        from vidax.zoo.compute.runtime import configure_compile_cache

        configure_compile_cache(True)
        rows = warm_compiles(args.specs)
        Path(args.out).write_text(json.dumps(rows, indent=1))
        print(json.dumps(rows))
    else:
        print(table(Path(args.out_dir)))


if __name__ == "__main__":
    main()
