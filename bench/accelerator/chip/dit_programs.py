"""The programs `every_dit` measures and the three phases of a group of models in one process.

A model's programs are the dry run's own DiT step (`vidax.zoo.plan.dry_run.step_args`: the family's predictor,
its condition and the CFG rows its defaults guide with, the DiT cut to a depth) at depth 1 (one block of each
group) and depth 0 (embed and head alone; depth 2 where depth 0 cannot be built or run), plus each distinct
attention call of the block alone. Weights are random at the synthetic folders' scale
(`vidax.zoo.plan.synthetic.leaf_init`: N(0, 0.02), norm scales 1 + N(0, 0.02)) in the dtype the dry run
compiles (bf16), drawn on the host.

A group runs in three phases, so that XLA's compiles (most of a model's time on the chip: 40-210 s for a
one-block program there on 2026-12-06) overlap instead of queueing behind each model's runs:

1. `plan`: every model's programs traced and lowered, one after another (Python), FLOPs counted from the
   jaxpr with attention traced as XLA products (`count_flops`), the block's attention calls recorded;
2. `compile_all`: every lowered program compiled in a thread pool (XLA compiles outside the GIL; the chip's host
   has 13 cores), each one's wall and thread CPU seconds recorded;
3. `run`: model by model, smallest XLA plan first (JAX's pool keeps the largest size it grew to), inputs drawn,
   programs timed (a warm-up call, then the median of `repeats`), attention alone timed, the row written.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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


def _split(spec: str) -> tuple[str, tuple[int, int, int] | None]:
    model, _, size = spec.split("+")[0].partition("@")
    if not size:
        return model, None
    w, h, f = (int(x) for x in size.split("x"))
    return model, (w, h, f)


@contextmanager
def _environment(spec: str):
    """`MODEL[@WxHxF][+NAME=VALUE...]`: the variables set while the model's programs are traced (the choices vidax
    reads when tracing, e.g. `+VIDAX_HEADS_MAJOR=1`), restored after."""
    import os

    pairs = [item.split("=", 1) for item in spec.split("+")[1:]]
    saved = {name: os.environ.get(name) for name, _ in pairs}
    os.environ.update({name: value for name, value in pairs})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


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


def _counted(calls: list) -> list:
    seen: dict = {}
    for c in calls:
        seen[c] = seen.get(c, 0) + 1
    return list(seen.items())


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


# --- the three phases ------------------------------------------------------------------------------


@dataclasses.dataclass
class Program:
    """One lowered program of a model and what compiling it cost."""

    key: str  # "1", "0", "2" (depths) or "attention N"
    args: Any  # abstract arguments
    lowered: Any = None
    compiled: Any = None
    flops: float = 0.0
    lower_s: float = 0.0
    compile_s: float | None = None
    error: str | None = None


@dataclasses.dataclass
class Model:
    """A model's programs and its row of the table, filled in phase by phase."""

    spec: str
    row: dict
    family: Any = None
    settings: Any = None
    programs: dict = dataclasses.field(default_factory=dict)
    attention: list = dataclasses.field(default_factory=list)  # [(call, calls per unit, Program)]


def _log(message: str) -> None:
    print(f"[every_dit {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _seconds(call):
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def _lowered(family, s, depth: int, calls: list):
    """The step at `depth`, its FLOPs counted (the block's attention calls recorded into `calls`) and lowered."""
    import jax

    fn, args, dit = _program(family, s, depth)
    with recorded_attention(calls):
        flops = count_flops(fn, args)  # traces the step: LTX-Video's STG row masks a block by index
    lower_s, lowered = _seconds(lambda: jax.jit(fn).lower(*args))
    return Program(str(depth), args, lowered, flops=flops, lower_s=lower_s), dit


def _attention_program(call, index: int) -> Program:
    """One attention call of the block alone, lowered from abstract q/k/v (its mask all True when it has one)."""
    import jax
    import jax.numpy as jnp
    from vidax.zoo.compute.attention import local_attention

    q_shape, k_shape, masked, dtype = call
    q = jax.ShapeDtypeStruct(q_shape, jnp.dtype(dtype))
    k = jax.ShapeDtypeStruct(k_shape, jnp.dtype(dtype))
    mask = jax.ShapeDtypeStruct(k_shape[:2], jnp.bool_) if masked else None
    fn = jax.jit(lambda q, k, v, m: local_attention(q, k, v, m, scale=q_shape[-1] ** -0.5))
    lower_s, lowered = _seconds(lambda: fn.lower(q, k, k, mask))
    b, sq, h, d = q_shape
    return Program(f"attention {index}", (q, k, k, mask), lowered, flops=4.0 * b * h * sq * k_shape[1] * d,
                   lower_s=lower_s)


def plan(spec: str) -> Model:
    """Phase 1: a model's programs traced and lowered (depth 2 where depth 0 cannot be built)."""
    with _environment(spec):
        return _plan(spec)


def _plan(spec: str) -> Model:
    import jax
    from vidax.zoo.registry import make_pipeline

    model_name, size = _split(spec)
    family = make_pipeline(model_name, _options(model_name, size))
    s = family.resolve_settings(_options(model_name, size))
    device = jax.devices()[0]
    model = Model(spec, {"spec": spec, "model": model_name + "".join(f" ({v})" for v in spec.split("+")[1:]),
                         "size": f"{s.width}x{s.height}x{s.frames}",
                         "device": device.device_kind, "jax": jax.__version__, "guided": bool(s.guided),
                         "date": time.strftime("%Y-%m-%d")}, family, s)
    calls: list = []
    _log(f"{spec}: tracing depth 1")
    model.programs["1"], dit = _lowered(family, s, 1, calls)
    model.row["attention_calls"] = [list(c) for c in calls]
    model.row["depths"] = {g.name: dit_depth(family, s, g.name) for g in _groups(dit)}
    try:
        model.programs["0"], _ = _lowered(family, s, 0, [])
    except Exception as error:  # noqa: BLE001 - a step that needs blocks (LTX-Video's STG row): depth 2 then
        _log(f"{spec}: depth 0 cannot be built ({type(error).__name__}); depth 2 instead")
        model.programs["2"], _ = _lowered(family, s, 2, [])
    largest = sorted(_counted(calls), key=lambda c: -c[0][0][1] * c[0][1][1])[:2]
    model.attention = [(call, count, _attention_program(call, i)) for i, (call, count) in enumerate(largest)]
    return model


def _compile(program: Program) -> None:
    started = time.perf_counter()
    try:
        program.compiled = program.lowered.compile()
    except Exception as error:  # noqa: BLE001 - out of memory at compile is a result
        program.error = f"{type(error).__name__}: {str(error)[:600]}"
    program.compile_s = time.perf_counter() - started
    program.lowered = None


def compile_all(models: list[Model], workers: int) -> dict:
    """Phase 2: every lowered program compiled, `workers` at a time, the one-block programs first; a program
    lowered to the same text as another (Wan2.2-A14B's block is Wan2.1-14B's at 720p) is compiled once."""
    programs = [p for m in models for p in m.programs.values() if p.lowered is not None]
    programs += [p for m in models for _, _, p in m.attention if p.lowered is not None]
    programs.sort(key=lambda p: p.key != "1")
    first: dict[str, Program] = {}
    copies: list[tuple[Program, Program]] = []
    for program in programs:
        text = program.lowered.as_text()
        if text in first:
            copies.append((program, first[text]))
        else:
            first[text] = program
    _log(f"compiling {len(first)} programs ({len(copies)} more the same), {workers} at a time")
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(_compile, first.values()))
    phase = {"programs": len(first), "workers": workers, "wall_s": time.perf_counter() - started,
             "cpu_s": time.process_time() - cpu}
    _log(f"compiled in {phase['wall_s']:.1f} s ({phase['cpu_s']:.1f} s of CPU)")
    for program, same in copies:
        program.compiled, program.error = same.compiled, same.error
        program.compile_s, program.lowered = same.compile_s, None
    return phase


def _memory_row(program: Program, device, workers: int) -> dict:
    memory = program.compiled.memory_analysis()
    stats = device.memory_stats() or {}
    return {"lower_s": program.lower_s, "compile_s": program.compile_s, "compiled_beside": workers,
            "flops": program.flops,
            # which attention ran: a TPU program that should call the kernel and has no Pallas call is no figure
            "pallas_calls": program.compiled.as_text().count("tpu_custom_call"),
            "xla_argument": memory.argument_size_in_bytes, "xla_output": memory.output_size_in_bytes,
            "xla_temp": memory.temp_size_in_bytes, "xla_alias": memory.alias_size_in_bytes,
            "peak_bytes_in_use": stats.get("peak_bytes_in_use"), "bytes_limit": stats.get("bytes_limit")}


def _run_program(program: Program, repeats: int, seed: int) -> dict:
    import jax

    concrete = _random_like(program.args, seed=seed)
    result = jax.block_until_ready(program.compiled(*concrete))
    finite = bool(jax.numpy.isfinite(jax.numpy.asarray(jax.tree.leaves(result)[0], "float32")).all())
    del result
    timed = _timed(program.compiled, concrete, repeats)
    return {"ms": timed["median_s"] * 1e3, "times_s": timed["times_s"], "finite": finite}


def planned_bytes(model: Model) -> int:
    one = model.programs.get("1")
    if one is None or one.compiled is None:
        return 0
    memory = one.compiled.memory_analysis()
    return memory.argument_size_in_bytes + memory.temp_size_in_bytes


def run(model: Model, repeats: int, workers: int, out: Path | None = None) -> dict:
    """Phase 3: the model's programs timed and its row completed (written to `out` after each step)."""
    import jax

    from bench.accelerator.cases import peak_tflops

    row, device = model.row, jax.devices()[0]
    save = (lambda: out.write_text(json.dumps(row, indent=1, default=str))) if out else (lambda: None)
    row["runs"] = runs = {}
    keys = ["1"] + [k for k in ("0", "2") if k in model.programs]
    while keys:
        key = keys.pop(0)
        program = model.programs[key]
        if program.error is not None:
            raise RuntimeError(f"depth {key}: {program.error}")
        runs[key] = _memory_row(program, device, workers)
        try:
            runs[key].update(_run_program(program, repeats, seed=int(key) + 1))
        except Exception as error:  # noqa: BLE001 - depth 0 may not run (an empty scan's index): depth 2 then
            if key != "0":
                raise
            del runs[key]
            _log(f"{model.spec}: depth 0 does not run ({type(error).__name__}); depth 2 instead")
            with _environment(model.spec):
                model.programs["2"], _ = _lowered(model.family, model.settings, 2, [])
            _compile(model.programs["2"])
            keys.append("2")
            continue
        program.compiled = None
        _log(f"{model.spec}: depth {key}: {runs[key]['ms']:.1f} ms, finite {runs[key]['finite']}")
        save()
    _block_figures(row, peak_tflops(device.device_kind))
    save()
    row["attention"] = []
    for call, count, program in model.attention:
        if program.error is not None:
            row["attention"].append({"q": call[0], "k": call[1], "error": program.error})
            continue
        timed = _run_program(program, repeats, seed=7)
        row["attention"].append({"q": call[0], "k": call[1], "masked": call[2], "calls_per_unit": count,
                                 "ms": timed["ms"], "tflop_s": program.flops / timed["ms"] / 1e9,
                                 "compile_s": program.compile_s})
        program.compiled = None
    _attention_share(row, peak_tflops(device.device_kind))
    save()
    return row


def _block_figures(row: dict, peak) -> None:
    runs = row["runs"]
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


def _attention_share(row: dict, peak) -> None:
    timed = [a for a in row["attention"] if "ms" in a]
    attention_ms = sum(a["ms"] * a["calls_per_unit"] for a in timed)
    row["attention_ms_per_block"] = attention_ms
    block_ms = row.get("block_ms", 0)
    if block_ms > 0 and timed:
        row["attention_share"] = attention_ms / block_ms
        rest = row["block_flops"] - sum(4.0 * math.prod(a["q"][:3]) * a["k"][1] * a["q"][3] * a["calls_per_unit"]
                                        for a in timed)
        if peak and block_ms > attention_ms:
            row["outside_attention_mfu"] = rest / ((block_ms - attention_ms) / 1e3) / (peak * 1e12)


def measure_group(specs: list[str], out_dir: Path | None = None, repeats: int = 3, workers: int = 4) -> list[dict]:
    """The three phases over `specs` in this process; one row each (a model that fails keeps its error)."""
    models, rows = [], {}
    for spec in specs:
        try:
            models.append(plan(spec))
        except Exception as error:  # noqa: BLE001 - the table says what stopped the model, in one line
            rows[spec] = {"spec": spec, "model": _split(spec)[0], "error": f"{type(error).__name__}: {str(error)[:400]}"}
    phase = compile_all(models, workers)
    for model in sorted(models, key=planned_bytes):
        model.row["compile_phase"] = phase
        out = None if out_dir is None else out_dir / file_name(model.spec)
        try:
            rows[model.spec] = run(model, repeats, workers, out)
        except Exception as error:  # noqa: BLE001
            model.row["error"] = f"{type(error).__name__}: {str(error)[:400]}"
            rows[model.spec] = model.row
        model.programs.clear()
        model.attention.clear()
        _log(f"{model.spec}: done")
    for spec, row in rows.items():
        if out_dir is not None:
            (out_dir / file_name(spec)).write_text(json.dumps(row, indent=1, default=str))
    return [rows[s] for s in specs if s in rows]


def file_name(spec: str) -> str:
    return "dit-" + spec.replace("@", "_").replace(".", "_").replace("+", "_").replace("=", "-") + ".json"
