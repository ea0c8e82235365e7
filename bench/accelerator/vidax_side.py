"""The vidax side: the zoo's own DiTs, attention entry point, streamed offload and VAEs under JAX.

Everything runs through the production code path (`zoo.parts.dit.forward` with `scan_blocks`,
`zoo.compute.attention.attention`, `zoo.weights.offload.StreamedDiT`, the family VAE's `decode`), with the
classes the case's family row names (`families.py`: nothing here branches on a family), and
with random weights in the dtypes the conversion specs give real checkpoints (bf16 DiTs with
their fp32 leaves, fp32 VAEs). Programs are lowered from abstract arguments, so a second process
that builds the same case lowers the identical program and can hit the persistent cache
(`python -m bench.accelerator.vidax_side probe ...` is that process).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from jax import monitoring
from vidax.translator import load_spec
from vidax.zoo.compute.attention import attention, choose_kernel, local_attention
from vidax.zoo.parts.dit import forward, scan_blocks
from vidax.zoo.weights.offload import StreamedDiT, chunk_bytes

from bench.accelerator import cases, families
from bench.accelerator.timing import time_calls

BF16 = jnp.bfloat16
CACHE_EVENTS: list[str] = []  # persistent-cache events of this process (jax.monitoring)
monitoring.register_event_listener(lambda name, **_: CACHE_EVENTS.append(name))


def _cache_counts() -> tuple[int, int]:
    return (CACHE_EVENTS.count("/jax/compilation_cache/cache_hits"),
            CACHE_EVENTS.count("/jax/compilation_cache/cache_misses"))


def sync(result: Any) -> Any:
    return jax.block_until_ready(result)


def device_info(peak_override: float | None = None) -> dict:
    device = jax.devices()[0]
    kind = device.device_kind
    return {"jax": jax.__version__, "backend": jax.default_backend(), "device_kind": kind,
            "devices": jax.device_count(), "platform_version": getattr(device.client, "platform_version", ""),
            "peak_tflops": cases.peak_tflops(kind, peak_override)}


def peak_bytes_in_use() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def calibrate(n: int, repeats: int) -> dict:
    """A bf16 `n x n x n` matmul: what the chip's matrix units give this JAX at all."""
    a, b = (jax.random.normal(jax.random.key(i), (n, n), BF16) for i in (1, 2))
    matmul = jax.jit(jnp.dot)
    timing = time_calls(lambda: matmul(a, b), sync, max(repeats, 5), cap_s=5.0)
    return {"n": n, "timing": timing, "tflops": 2.0 * n**3 / timing["median"] / 1e12}


# ---------------------------------------------------------------------------------------------
# DiT


@partial(jax.jit, static_argnums=(0, 1))
def dit_forward(model, with_blocks: bool, params, *inputs):
    """One DiT forward (the CFG pair is the batch): embed, `scan_blocks` over the stack, head.

    Without blocks it is embed + head alone; the hidden state and context go out with the
    prediction, so that the text embedding the blocks would read is not dead code.
    """
    if with_blocks:
        return forward(model, params, *inputs, run_blocks=scan_blocks)
    hidden, ctx = model.embed(params, *inputs)
    return model.head(params, hidden, ctx), hidden, ctx


def build_model(case: cases.DitCase):
    """`(model, spec name)`: the family's DiT with `case.run_depth` blocks at the case's real width,
    its inputs checked against the DiT's own `dummy_inputs()`."""
    row = case.row
    config = families.resolve(row.dit_config).from_hf_config({**case.config, "num_layers": case.run_depth})
    dtypes = {k: (BF16 if v == "bfloat16" else v) for k, v in row.dit_kwargs.items()}
    model = families.resolve(row.dit)(config, **dtypes)
    dummy = model.dummy_inputs()
    if len(dummy) < len(row.inputs) or any(x is not None for x in dummy[len(row.inputs):]):
        raise ValueError(f"{row.zoo}: the bench feeds {len(row.inputs)} inputs, its DiT's embed takes {len(dummy)}")
    return model, row.spec


def param_dtypes(model, spec_name: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    """`{path: (shape, dtype)}` as a converted bf16 checkpoint gives them (the spec's dtype policy)."""
    policy = load_spec(spec_name).dtype
    shapes = model.param_shapes()
    out = {}
    for path, shape in shapes.items():
        dtype = policy.for_leaf(path, policy.default)
        out[path] = (shape, jnp.dtype(BF16 if dtype is None else dtype))  # "keep": the checkpoints ship bf16
    return out


def abstract_inputs(case: cases.DitCase) -> tuple:
    """ShapeDtypeStructs of the forward's inputs in `embed` order, cast as the pipelines cast them
    (bf16 activations); the DiT's optional trailing inputs (image, meanflow time) are None."""
    inputs = tuple(jax.ShapeDtypeStruct(t.shape(case), jnp.dtype(t.dtype)) for t in case.row.inputs)
    return inputs + _unused(case)


def concrete_inputs(case: cases.DitCase) -> tuple:
    """Random inputs (never zeros, except where the row fills zeros: HunyuanVideo's SigLIP tokens)."""
    out = []
    for index, tensor in enumerate(case.row.inputs):
        shape, dtype = tensor.shape(case), jnp.dtype(tensor.dtype)
        if tensor.fill.startswith("valid:"):
            out.append(jnp.broadcast_to(jnp.arange(shape[1]) < families.valid_length(case, tensor.fill), shape))
        elif tensor.fill == "zeros":
            out.append(jnp.zeros(shape, dtype))
        elif tensor.fill == "timestep":
            out.append(jnp.full(shape, 700.0, dtype))
        else:
            out.append(jax.random.normal(jax.random.key(100 + index), shape, dtype))
    return tuple(out) + _unused(case)


def _unused(case: cases.DitCase) -> tuple:
    """None for each `embed` input past the row's (the DiT's `dummy_inputs` says how many)."""
    model, _ = build_model(case)
    return (None,) * (len(model.dummy_inputs()) - len(case.row.inputs))


def eight_bit_layout(layout: dict[str, tuple[tuple[int, ...], Any]], model, choice: str | None) -> dict:
    """The layout `--weights-dtype choice` places (vidax.zoo.weights.quantize): each stacked block kernel 8-bit, a
    float32 `kernel_scale` `[layers, out]` beside it; the layout itself for bf16 / None."""
    from vidax.zoo.parts.dit import block_groups
    from vidax.zoo.weights.quantize import SCALE, STORAGE, block_kernel_paths

    if choice not in STORAGE:
        return layout
    groups = tuple(g.name for g in block_groups(model))
    out = dict(layout)
    for path in block_kernel_paths(list(layout), groups, {p: len(s) for p, (s, _) in layout.items()}):
        shape = layout[path][0]
        out[path] = (shape, STORAGE[choice])
        out[path[:-len("kernel")] + SCALE] = ((shape[0], shape[-1]), np.dtype(np.float32))
    return out


POOL = 1 << 20  # random values tiled over every weight: varied, never zeros, and fast at 14B scale


def random_tree(layout: dict[str, tuple[tuple[int, ...], Any]], seed: int = 0) -> dict:
    """Random weights `{path: array}` placed with one `device_put`: N(0, 0.02), norm scales 1 + N(0, 0.02).

    Drawn once into a pool that is tiled over each leaf on the host: a jitted per-leaf RNG takes
    minutes to compile on a CPU, and host normals for billions of weights take as long.
    """
    rng = np.random.default_rng(seed)
    noise = (0.02 * rng.standard_normal(POOL)).astype(np.float32)
    pools: dict = {}
    host = {}
    for index, (path, (shape, dtype)) in enumerate(sorted(layout.items())):
        base = 1.0 if path.endswith(("/scale", "/gamma")) else 0.0
        kind = "8-bit" if np.dtype(dtype).itemsize == 1 else "scale" if path.endswith("kernel_scale") else base
        pool = pools.setdefault((kind, np.dtype(dtype)), _pool(noise, kind).astype(dtype))
        size = int(np.prod(shape))
        start = (index * 7919) % POOL  # each leaf starts elsewhere in the pool
        host[path] = np.resize(np.roll(pool, -start) if size < POOL else pool, size).reshape(shape)
    return traverse_util.unflatten_dict(jax.device_put(host), sep="/")


def _pool(noise: np.ndarray, kind) -> np.ndarray:
    """Values for a kind of leaf: 8-bit kernels across their range (N(0, 0.02) would round to zero),
    positive kernel scales, else N(0, 0.02) around `kind` (0, or 1 for norm scales)."""
    if kind == "8-bit":
        return np.clip(np.rint(noise * 2000.0), -127, 127)
    if kind == "scale":
        return np.abs(noise) * 0.5 + 1e-4
    return noise + kind


class DitHarness:
    """One DiT case: model, random params on the device, inputs, and its two compiled programs."""

    def __init__(self, case: cases.DitCase):
        self.case = case
        self.model, spec = build_model(case)
        self.layout = eight_bit_layout(param_dtypes(self.model, spec), self.model, case.weights_dtype)
        self.params = random_tree(self.layout)
        self.inputs = concrete_inputs(case)
        self.compiled: dict[bool, Any] = {}
        self.compile_s: dict[bool, dict] = {}

    def abstract_params(self):
        flat = {p: jax.ShapeDtypeStruct(s, d) for p, (s, d) in self.layout.items()}
        return traverse_util.unflatten_dict(flat, sep="/")

    def compile(self, with_blocks: bool = True):
        """Lower from abstract arguments (as the probe process does) and compile; times both."""
        hits, misses = _cache_counts()
        start = time.perf_counter()
        lowered = dit_forward.lower(self.model, with_blocks, self.abstract_params(), *abstract_inputs(self.case))
        lowered_at = time.perf_counter()
        compiled = lowered.compile()
        self.compile_s[with_blocks] = {"lower_s": lowered_at - start, "compile_s": time.perf_counter() - lowered_at,
                                       "hits": _cache_counts()[0] - hits, "misses": _cache_counts()[1] - misses}
        self.compiled[with_blocks] = compiled
        return compiled

    def run(self, with_blocks: bool = True):
        return self.compiled[with_blocks](self.params, *self.inputs)

    def block_weight_bytes(self) -> float:
        blocks = jax.tree.leaves(self.params["blocks"])
        return sum(a.size * a.dtype.itemsize for a in blocks) / self.case.run_depth

    def attention_kernel(self) -> str:
        """The kernel the entry point picks for this case's self-attention (per-device shapes)."""
        case = self.case
        total = case.attention_tokens
        q = jax.ShapeDtypeStruct((case.batch, total, case.heads, case.head_dim), BF16)
        mask = jax.ShapeDtypeStruct((case.batch, total), jnp.bool_) if case.row.joint_text else None
        return choose_kernel(q, q, mask)


def memory_plan_bytes(compiled) -> int | None:
    """XLA's buffer plan for a program: arguments + outputs + temporaries (aliased outputs once)."""
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes)
    except Exception:  # noqa: BLE001 - a backend without the analysis
        return None


def fused_attention_calls(hlo_text: str) -> int:
    """cuDNN fused-attention custom calls in a compiled GPU program (0 elsewhere)."""
    return sum(1 for line in hlo_text.splitlines() if "custom-call" in line and "fmha" in line.lower())


def dit(harness: DitHarness, repeats: int, deadline: float, artifacts: Path | None = None) -> dict:
    """The case's N-block forward and its embed+head alone, compiled once each, then timed."""
    full = harness.compile(True)
    harness.compile(False)
    hlo = full.as_text() or ""
    if artifacts is not None:
        with gzip.open(artifacts / f"hlo_{harness.case.key}.txt.gz", "wt") as f:
            f.write(hlo)
    timing_full = time_calls(lambda: harness.run(True), sync, repeats, deadline=deadline)
    timing_outside = time_calls(lambda: harness.run(False), sync, repeats, deadline=deadline)
    return {
        "full": timing_full, "outside": timing_outside, "compile": harness.compile_s[True],
        "compile_outside": harness.compile_s[False], "plan_bytes": memory_plan_bytes(full),
        "process_peak_bytes": peak_bytes_in_use(), "block_weight_bytes": harness.block_weight_bytes(),
        "attention_kernel": harness.attention_kernel(), "fmha_calls": fused_attention_calls(hlo),
    }


def profile_trace(harness: DitHarness, artifacts: Path) -> dict:
    """One traced forward (`jax.profiler`), packed into one file so that it travels back."""
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            sync(harness.run(True))
        target = artifacts / f"profile_{harness.case.key}.tar.gz"
        with tarfile.open(target, "w:gz") as tar:
            tar.add(tmp, arcname=f"profile_{harness.case.key}")
    return {"file": target.name, "bytes": target.stat().st_size}


# ---------------------------------------------------------------------------------------------
# Attention alone


def attention_rows(case: cases.AttentionCase, blockwise_max: int, repeats: int, deadline: float) -> dict:
    """The entry point's own choice and the blockwise XLA fallback (on sequences short enough)."""
    shape = (case.batch, case.tokens, case.heads, case.head_dim)
    q, k, v = (jax.random.normal(jax.random.key(i), shape, BF16) for i in range(3))
    mask = None if case.valid is None else jnp.broadcast_to(jnp.arange(case.tokens) < case.valid,
                                                            (case.batch, case.tokens))
    chosen = choose_kernel(q, k, mask)
    rows: dict[str, Any] = {f"vidax entry point ({chosen})": jax.jit(lambda q, k, v, m: attention(q, k, v, kv_mask=m))}
    if chosen != "blockwise":
        if case.tokens <= blockwise_max:
            rows["blockwise (the XLA fallback)"] = jax.jit(
                lambda q, k, v, m: local_attention(q, k, v, m, scale=case.head_dim**-0.5, implementation="blockwise"))
        else:
            rows["blockwise (the XLA fallback)"] = f"not run above {blockwise_max} tokens (budget)"
    logits = case.batch * case.heads * case.tokens**2 * 4
    if logits > 4e9:  # where it would fit, the entry point's plain kernel is already the choice
        rows["plain XLA softmax"] = f"not run: its fp32 S x S logits alone are {logits / 1e9:.0f} GB"
    out = {}
    for name, fn in rows.items():
        if isinstance(fn, str):
            out[name] = {"error": fn}
            continue
        try:
            out[name] = time_calls(lambda fn=fn: fn(q, k, v, mask), sync, repeats, cap_s=5.0, deadline=deadline)
        except Exception as err:  # noqa: BLE001 - one kernel failing is a row, not the end of the run
            out[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}
    return {"chosen": chosen, "rows": out}


# ---------------------------------------------------------------------------------------------
# Streamed offload


def offload(harness: DitHarness, chunks: tuple[int, ...], repeats: int, deadline: float) -> dict:
    """Resident forward vs the same blocks streamed from pinned host memory in chunks of N."""
    resident = time_calls(lambda: harness.run(True), sync, repeats, deadline=deadline)
    host_blocks = jax.device_get(harness.params["blocks"])
    others = {k: v for k, v in harness.params.items() if k != "blocks"}
    memory_kinds = sorted({m.kind for m in jax.devices()[0].addressable_memories()})
    rows = {"resident": {"timing": resident}}
    for chunk in chunks:
        rows[f"chunk {chunk}"] = _streamed(harness, others, host_blocks, chunk, repeats, deadline)
    return {"depth": harness.case.run_depth, "memory_kinds": memory_kinds, "rows": rows}


def _streamed(harness: DitHarness, others, host_blocks, chunk: int, repeats: int, deadline: float) -> dict:
    """One chunk size: the blocks copied to (pinned) host memory once, then streamed every forward."""
    streamed = StreamedDiT(harness.model, chunk)
    host = streamed.offload({"blocks": host_blocks})
    timing = time_calls(lambda: streamed(others, host, *harness.inputs), sync, repeats, deadline=deadline)
    fetch = time_calls(lambda: streamed._fetch("blocks", host["blocks"].chunks[0]), sync, 3, cap_s=3.0)
    size = chunk_bytes(host["blocks"])[0]
    return {"timing": timing, "chunk_bytes": size, "fetch": fetch, "h2d_gbps": size / fetch["median"] / 1e9,
            "chunks": len(host["blocks"].chunks)}


# ---------------------------------------------------------------------------------------------
# VAE decode


def vae(case: cases.VaeCase, repeats: int, deadline: float) -> dict:
    """Decode `case.latent_frames` latent frames (fp32 weights as shipped); the first call compiles."""
    latents = jax.random.normal(jax.random.key(7), case.latent_shape, jnp.float32)
    row = case.row
    model = families.resolve(row.vae)(families.resolve(row.vae_config).from_hf_config(case.config))
    params = random_tree({p: (s, jnp.float32) for p, s in model.param_shapes().items()})
    run = partial(model.decode, params, latents, **row.decode_kwargs)
    timing = time_calls(run, sync, min(repeats, 2), cap_s=15.0, deadline=deadline)
    return {"decode": timing, "process_peak_bytes": peak_bytes_in_use()}


# ---------------------------------------------------------------------------------------------
# Compile-cache probe (run in a fresh process)


def probe(profile_name: str, key: str, cache_dir: str | None) -> dict:
    """Lower and compile one DiT case's forward in this fresh process; persistent-cache events counted."""
    from vidax.zoo.compute.runtime import configure_compile_cache

    configure_compile_cache(cache_dir is not None, cache_dir, min_compile_secs=0)
    return _timed_compile(profile_name, key)


def probe_here(profile_name: str, key: str) -> dict:
    """`probe` in this process after dropping its in-memory compiled programs and traces: the compile is
    then served by the persistent cache folder this process configured (a TPU's warm compile)."""
    jax.clear_caches()
    return _timed_compile(profile_name, key)


def _timed_compile(profile_name: str, key: str) -> dict:
    case = next(c for c in cases.profile(profile_name).dits if c.key == key)
    model, spec = build_model(case)
    flat = {p: jax.ShapeDtypeStruct(s, d) for p, (s, d) in param_dtypes(model, spec).items()}
    hits, misses = _cache_counts()
    start = time.perf_counter()
    lowered = dit_forward.lower(model, True, traverse_util.unflatten_dict(flat, sep="/"), *abstract_inputs(case))
    lowered_at = time.perf_counter()
    lowered.compile()
    return {"lower_s": lowered_at - start, "compile_s": time.perf_counter() - lowered_at,
            "hits": _cache_counts()[0] - hits, "misses": _cache_counts()[1] - misses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="compile-cache probe: one DiT case compiled in a fresh process")
    parser.add_argument("command", choices=["probe"])
    parser.add_argument("--profile", default="real", choices=sorted(cases.PROFILES))
    parser.add_argument("--key", default="wan-480p")
    parser.add_argument("--cache-dir", default=None, help="persistent cache folder (none: cache off)")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.profile, args.key, args.cache_dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
