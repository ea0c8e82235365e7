"""The MaxDiffusion side: Google's own Wan 2.1 transformer (JAX/Flax NNX) as a peer on the same chip.

MaxDiffusion (github.com/AI-Hypercomputer/maxdiffusion) is a peer in the benchmark, never a
dependency of vidax: its source is exported, at a recorded commit, from a local git mirror by

    bash scripts/prepare_maxdiffusion.sh /path/to/maxdiffusion.git    # -> .bench/maxdiffusion/src

(git-ignored, about 1.5 MB), and this module puts `.bench/maxdiffusion/src` first on `sys.path`.
It builds MaxDiffusion's `WanModel` the way its Wan pipeline does (`create_sharded_logical_transformer`:
the model's HF config fields, the run's yml for attention kernel, flash block sizes, minimum flash
sequence length, padding masks, scanned layers, base-2 exp flags, logical axis rules; norms, the
condition embedder and the modulation tables kept in float32, everything else in bf16), with
random weights and a chosen number of layers on a one-device mesh, and times its jitted forward
(`WanModel.__call__`: patch embed, time/text embedding, the `nnx.scan` over blocks, head; RoPE
computed once outside, as its denoising loop does) on the CFG pair (batch 2) of an 81-frame latent
with 512 text tokens.

    python -m bench.accelerator.maxdiffusion_side --toy                     # CPU, seconds
    python -m bench.accelerator.maxdiffusion_side --toy --attention flash   # CPU, splash in interpret mode
    python -m bench.accelerator.maxdiffusion_side --shape wan14b_480p --layers 8 \\
        --blocks 512,512,512 --blocks 1024,2048,1024                        # TPU
    python -m bench.accelerator.maxdiffusion_side --shape wan1.3b_480p      # TPU, all 30 layers

Each `--blocks Q,KV,KV_COMPUTE` is applied as MaxDiffusion's own tile search applies a candidate
(`max_utils.flash_block_sizes_for_candidate`: forward and backward fields together), then turned
into the kernel's BlockSizes by `max_utils.get_flash_block_sizes`, as its pipeline does. Without
`--blocks` the yml's shipped sizes are used (512 everywhere). One JSON object goes to stdout (and
`--out FILE`): per configuration, ms per forward (median of `--repeats` >= 3 after one warm-up),
ms per block (forward / layers, and the slope between layer counts when `--layers` names two or
more), compile seconds, XLA temporaries (`memory_analysis().temp_size_in_bytes`), the device's
peak bytes in use where it reports them, the number of Pallas TPU custom calls in the compiled
program, and which attention kernel each attention call really took (recorded at trace time from
MaxDiffusion's kernel registry, with the block sizes it was handed).

Python packages it needs beyond jax/jaxlib/numpy: REQUIRED_PACKAGES (imported and used at module
level on the model's import chain: flax, einops, pyyaml, pillow, huggingface_hub) and
RECOMMENDED_PACKAGES (imported at module level for checkpoints, training or downloads only:
optax, orbax-checkpoint, requests; a missing one is stubbed, and the JSON names the stub).
transformers, torch, chex, tensorboardX, google-cloud-storage and aqtp are not needed. On the
TPU machine all of them come from its own index:

    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \\
        --index-url file:///opt/pypi/simple --target /tmp/site \\
        flax optax orbax-checkpoint einops huggingface_hub requests pillow pyyaml \\
      && export PYTHONPATH=$PYTHONPATH:/tmp/site

(`PIP_LINE` below; the machine's own JAX stays first on PYTHONPATH). Carry `.bench/maxdiffusion`.

Stubbed at run time (small modules in `sys.modules`, never edits to MaxDiffusion's files), only
when the real one cannot be imported: `tensorboardX` and `google.cloud` (metrics upload/logging),
`aqt` (int8 quantization, off in the Wan configs), `maxdiffusion.models.modeling_flax_pytorch_utils`
when torch or chex is absent (PyTorch checkpoint conversion), and `optax`, `orbax` + `etils`,
`requests` (see above; flax itself depends on optax, orbax-checkpoint and so etils). None of them
is reached by the forward.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.abc
import importlib.machinery
import json
import os
import re
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MAXDIFFUSION_DIR = Path(os.environ.get("MAXDIFFUSION_DIR", ROOT / ".bench" / "maxdiffusion"))
LOCAL_DEPS_DIR = ROOT / ".bench" / "pydeps"  # optional: `pip install --target` here for a CPU run

# pip names -> import names. Needed: imported and used at module level on the model's import chain.
REQUIRED_PACKAGES = {"flax": "flax", "einops": "einops", "pyyaml": "yaml", "pillow": "PIL.Image",
                     "huggingface_hub": "huggingface_hub"}
# Imported at module level too, but for checkpoints / training / downloads only: stubbed when missing.
RECOMMENDED_PACKAGES = {"optax": "optax", "orbax-checkpoint": "orbax.checkpoint", "requests": "requests"}
TPU_INDEX = "file:///opt/pypi/simple"
PIP_PACKAGES = ("flax", "optax", "orbax-checkpoint", "einops", "huggingface_hub", "requests", "pillow", "pyyaml")
PIP_LINE = ("PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: "
            f"--index-url {TPU_INDEX} --target /tmp/site {' '.join(PIP_PACKAGES)} "
            "&& export PYTHONPATH=$PYTHONPATH:/tmp/site")

# Import roots stubbed when their real module cannot be imported (the probes, space-separated, are tried).
STUB_CANDIDATES = (
    # (root to stub, the modules whose import decides, why stubbing it is safe)
    ("tensorboardX", "tensorboardX", "metrics writer"),
    ("google.cloud", "google.cloud.storage", "GCS upload / cloud logging"),
    ("aqt", "aqt.jax.v2.config", "AQT int8 quantization (quantization='' in the Wan configs)"),
    ("maxdiffusion.models.modeling_flax_pytorch_utils", "torch chex", "PyTorch checkpoint conversion"),
    ("optax", "optax", "optimizers (training)"),
    ("orbax", "orbax.checkpoint", "checkpointing"),
    ("etils", "etils.epath", "checkpoint paths"),
    ("requests", "requests", "HTTP errors of hub downloads"),
)


# ---------------------------------------------------------------------------------------------
# Shapes

@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    yml: str  # MaxDiffusion config the run settings come from
    heads: int
    head_dim: int
    ffn: int
    depth: int  # the real model's layer count
    latent: tuple[int, int, int]  # latent frames, height, width (16 channels)
    text_tokens: int
    default_layers: int
    text_dim: int = 4096
    freq_dim: int = 256
    in_channels: int = 16

    @property
    def tokens(self) -> int:
        t, h, w = self.latent
        return t * (h // 2) * (w // 2)

    def model_kwargs(self) -> dict:
        """The Wan2.1 transformer config fields (as in the Diffusers checkpoints' config.json)."""
        return dict(model_type="t2v", patch_size=(1, 2, 2), num_attention_heads=self.heads,
                    attention_head_dim=self.head_dim, in_channels=self.in_channels,
                    out_channels=self.in_channels, text_dim=self.text_dim, freq_dim=self.freq_dim,
                    ffn_dim=self.ffn, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
                    image_dim=None, added_kv_proj_dim=None, rope_max_seq_len=1024)


LAT_480P = (21, 60, 104)  # 81 frames, 480x832 -> 21x30x52 = 32760 tokens
LAT_720P = (21, 90, 160)  # 81 frames, 720x1280 -> 21x45x80 = 75600 tokens
SHAPES = {s.name: s for s in (
    Shape("wan14b_480p", "base_wan_14b.yml", 40, 128, 13824, 40, LAT_480P, 512, 8),
    Shape("wan14b_720p", "base_wan_14b.yml", 40, 128, 13824, 40, LAT_720P, 512, 2),
    Shape("wan1.3b_480p", "base_wan_1_3b.yml", 12, 128, 8960, 30, LAT_480P, 512, 30),
    Shape("wan1.3b_720p", "base_wan_1_3b.yml", 12, 128, 8960, 30, LAT_720P, 512, 30),
    # CPU smoke test: the same code path a few channels wide. 192 video tokens (padded to 256 by
    # the flash path) and 128 text tokens: the splash kernel's smallest block is 128, and MaxDiffusion
    # derives cross-attention blocks from both lengths, so --attention flash runs there too.
    Shape("toy", "base_wan_14b.yml", 2, 16, 64, 2, (3, 16, 16), 128, 2, text_dim=32, freq_dim=32),
)}


# ---------------------------------------------------------------------------------------------
# Import set-up: sys.path and stubs


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub


class _Stub(metaclass=_StubMeta):
    """Stands for any class, function or constant of a stubbed module (annotations, base classes)."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves an empty, permissive package for every module under the given roots."""

    def __init__(self, roots: list[str]):
        self.roots = roots
        self.served: list[str] = []

    def _covers(self, name: str) -> bool:
        return any(name == r or name.startswith(r + ".") for r in self.roots)

    def find_spec(self, fullname, path=None, target=None):
        if self._covers(fullname):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, "vidax bench stub (not the real module)")
        module.__path__ = []

        def __getattr__(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Stub

        module.__getattr__ = __getattr__
        self.served.append(spec.name)
        return module

    def exec_module(self, module):
        pass


def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001 - any failure means "stub it"
        return False


_FINDER: _StubFinder | None = None


def setup_imports(maxdiffusion_dir: Path = MAXDIFFUSION_DIR) -> dict:
    """Put MaxDiffusion's exported source on sys.path and stub what cannot be imported."""
    global _FINDER
    src = maxdiffusion_dir / "src"
    if not (src / "maxdiffusion" / "models" / "wan").is_dir():
        raise SystemExit(f"{src} has no maxdiffusion source: run scripts/prepare_maxdiffusion.sh first")
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    if LOCAL_DEPS_DIR.is_dir() and str(LOCAL_DEPS_DIR) not in sys.path:
        sys.path.append(str(LOCAL_DEPS_DIR))
    missing = [pip for pip, mod in REQUIRED_PACKAGES.items() if not _importable(mod)]
    if missing:
        raise SystemExit(f"missing Python packages for MaxDiffusion's Wan model: {' '.join(missing)}\n"
                         f"on the TPU machine: {PIP_LINE}")
    if _FINDER is None:
        roots = [root for root, probes, _ in STUB_CANDIDATES if not all(map(_importable, probes.split()))]
        _FINDER = _StubFinder(roots)
        sys.meta_path.insert(0, _FINDER)
    commit_file = maxdiffusion_dir / "COMMIT"
    return {"commit": commit_file.read_text().strip() if commit_file.exists() else None,
            "source": str(src), "stubbed_roots": list(_FINDER.roots)}


# ---------------------------------------------------------------------------------------------
# Model


def load_yml(name: str) -> dict:
    import yaml

    return yaml.safe_load((MAXDIFFUSION_DIR / "src" / "maxdiffusion" / "configs" / name).read_text())


CUSTOM_VMEM_BYTES = 64 * 2**20  # its fast-inference script's vmem_limit_bytes for the custom kernel
CUSTOM_INNER = 1024  # ... and its block_kv_compute_in


def block_sizes_for(yml: dict, attention: str, blocks: tuple[int, int, int] | None):
    """MaxDiffusion's BlockSizes for a (block_q, block_kv, block_kv_compute) candidate, or the yml's. The custom
    kernel's ("ulysses_custom", "ulysses_custom_fixed_m") get its fast-inference script's other fields: keys per
    exponential pass min(block_kv_compute, 1024), 64 MiB of VMEM."""
    from maxdiffusion import max_utils

    sizes = dict(yml["flash_block_sizes"])
    if blocks is not None:
        custom = {"vmem_limit_bytes": CUSTOM_VMEM_BYTES} if "custom" in attention else {}
        sizes = max_utils.flash_block_sizes_for_candidate(sizes, attention, *blocks, **custom)
        if "custom" in attention:
            sizes["block_kv_compute_in"] = min(blocks[2], CUSTOM_INNER)
    return sizes, max_utils.get_flash_block_sizes(types.SimpleNamespace(attention=attention, flash_block_sizes=sizes))


# Params MaxDiffusion's Wan loader keeps in float32 (wan_pipeline's cast exclusion): path keywords.
FP32_KEYWORDS = ("norm", "condition_embedder", "scale_shift_table")


def build_model(shape: Shape, layers: int, attention: str, flash_block_sizes, yml: dict, mesh,
                flash_min_seq_length: int, seed: int = 0):
    """`(graphdef, params, rest)` of a random-weight WanModel, its params on the mesh per the rules."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn
    from flax import nnx
    from maxdiffusion import max_utils
    from maxdiffusion.models.wan.transformers.transformer_wan import WanModel

    weights_dtype = jnp.dtype(yml["weights_dtype"])
    config = dict(shape.model_kwargs())
    config.update(
        num_layers=layers, mesh=mesh, dtype=jnp.dtype(yml["activations_dtype"]), weights_dtype=weights_dtype,
        attention=attention, precision=max_utils.get_precision(types.SimpleNamespace(precision=yml["precision"])),
        flash_block_sizes=flash_block_sizes, remat_policy=yml["remat_policy"],
        names_which_can_be_saved=yml["names_which_can_be_saved"],
        names_which_can_be_offloaded=yml["names_which_can_be_offloaded"],
        flash_min_seq_length=flash_min_seq_length, dropout=yml["dropout"],
        mask_padding_tokens=yml["mask_padding_tokens"], scan_layers=yml["scan_layers"],
        enable_jax_named_scopes=False,
        attention_config={"use_base2_exp": yml["use_base2_exp"],
                          "use_experimental_scheduler": yml["use_experimental_scheduler"],
                          "ulysses_shards": yml.get("ulysses_shards", -1),
                          "ulysses_attention_chunks": yml.get("ulysses_attention_chunks", 1)})

    def make():
        return WanModel(**config, rngs=nnx.Rngs(params=seed))

    abstract = nnx.eval_shape(make)
    graphdef, abstract_params, _ = nnx.split(abstract, nnx.Param, ...)
    shardings = nn.logical_to_mesh_sharding(nnx.get_partition_spec(abstract_params), mesh,
                                            yml["logical_axis_rules"])

    def cast(path, x):
        text = ".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path).lower()
        dtype = jnp.float32 if any(word in text for word in FP32_KEYWORDS) else weights_dtype
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

    # Leaves travel as a flat list: the Variables' metadata (their init functions) differs between
    # the abstract model and the one built under jit, which a State-shaped out_shardings rejects.
    treedef = jax.tree_util.tree_structure(abstract_params)

    def init():
        _, params, rest = nnx.split(make(), nnx.Param, ...)
        return jax.tree_util.tree_leaves(jax.tree_util.tree_map_with_path(cast, params)), rest

    leaves, rest = jax.jit(init, out_shardings=(jax.tree_util.tree_leaves(shardings), None))()
    return graphdef, jax.tree_util.tree_unflatten(treedef, leaves), rest


def make_mesh(yml: dict):
    import jax
    import numpy as np

    axes = tuple(yml["mesh_axes"])
    return jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape((1,) * len(axes)), axes)


# ---------------------------------------------------------------------------------------------
# Attention kernel record (trace time)

KERNEL_CALLS: list[dict] = []


def _describe_blocks(sizes) -> dict | None:
    if sizes is None:
        return None
    fields = ("block_q", "block_kv", "block_kv_compute", "block_q_dkv", "block_kv_dkv", "block_kv_dkv_compute",
              "block_q_dq", "block_kv_dq", "use_fused_bwd_kernel")
    return {f: getattr(sizes, f) for f in fields if hasattr(sizes, f)}


def record_kernels() -> None:
    """Wrap MaxDiffusion's attention kernel registry so each call's choice is recorded when traced.

    The wrappers call the registered kernel unchanged. For the splash path the BlockSizes actually
    handed to the kernel (after MaxDiffusion's own cross-attention re-derivation) are recorded too.
    """
    from maxdiffusion.models import attention_flax as af

    if getattr(af, "_vidax_recording", False):
        return
    af._vidax_recording = True

    def wrap(name, fn):
        def recorded(q, k, v, context):
            KERNEL_CALLS.append({"kernel": name, "q": list(q.shape), "kv": list(k.shape)})
            return fn(q, k, v, context)
        return recorded

    for name in list(af.KERNEL_REGISTRY):
        af.KERNEL_REGISTRY[name] = wrap(name, af.KERNEL_REGISTRY[name])

    select = af._select_flash_block_sizes

    def selected(query, key, flash_block_sizes, dtype, attention_kernel):
        out = select(query, key, flash_block_sizes, dtype, attention_kernel)
        if KERNEL_CALLS:
            KERNEL_CALLS[-1]["block_sizes"] = _describe_blocks(out)
        return out

    af._select_flash_block_sizes = selected


_INTERPRET = []  # set by use_pallas_interpret


def _interpreted():
    import contextlib

    from jax.experimental.pallas import tpu as pltpu

    return pltpu.force_tpu_interpret_mode() if _INTERPRET else contextlib.nullcontext()


def use_pallas_interpret() -> None:
    """Run the splash kernel and MaxDiffusion's custom kernel in Pallas interpret mode (CPU smoke tests)."""
    import functools

    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from maxdiffusion.kernels import custom_splash_attention as custom

    if not getattr(sk.make_splash_mha, "_vidax_interpret", False):
        patched = functools.partial(sk.make_splash_mha, interpret=True)
        patched._vidax_interpret = True
        sk.make_splash_mha = patched
    if not getattr(custom.make_splash_mha, "_vidax_interpret", False):
        make = custom.make_splash_mha

        def interpreted(*args, **kwargs):
            kernel = make(*args, **kwargs)

            def run(*a):
                with pltpu.force_tpu_interpret_mode():
                    return kernel(*a)
            return run

        interpreted._vidax_interpret = True
        custom.make_splash_mha = interpreted
    _INTERPRET.append(True)


# ---------------------------------------------------------------------------------------------
# Timing


def _peak_bytes() -> int | None:
    import jax

    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - CPU backends may not report
        return None
    return stats.get("peak_bytes_in_use")


def prepare(shape: Shape, layers: int, attention: str, blocks: tuple[int, int, int] | None, *, batch: int,
            flash_min_seq_length: int | None) -> dict:
    """MaxDiffusion's forward built, compiled and run once: `{"call": run it once, **facts}`.

    `call()` returns the output (not synced), so that a caller can time it beside another program."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from flax.linen import partitioning as nn_partitioning

    yml = load_yml(shape.yml)
    fmin = yml["flash_min_seq_length"] if flash_min_seq_length is None else flash_min_seq_length
    sizes, flash_block_sizes = block_sizes_for(yml, attention, blocks)
    mesh = make_mesh(yml)
    rules = yml["logical_axis_rules"]
    act = jnp.dtype(yml["activations_dtype"])
    KERNEL_CALLS.clear()

    t0 = time.perf_counter()
    with mesh:
        graphdef, params, rest = build_model(shape, layers, attention, flash_block_sizes, yml, mesh, fmin)
    jax.block_until_ready(params)
    build_s = time.perf_counter() - t0

    k1, k2 = jax.random.split(jax.random.key(1))
    latents = jax.random.normal(k1, (batch, shape.in_channels, *shape.latent), act)
    text = jax.random.normal(k2, (batch, shape.text_tokens, shape.text_dim), act)
    timestep = jnp.full((batch,), 500, jnp.int32)

    def forward(params, rest, latents, timestep, text, rotary_emb):
        model = nnx.merge(graphdef, params, rest)
        return model(hidden_states=latents, timestep=timestep, encoder_hidden_states=text,
                     encoder_hidden_states_image=None, deterministic=True, rngs=None, rotary_emb=rotary_emb)

    with mesh, nn_partitioning.axis_rules(rules):
        # As its Wan 2.1 denoising loop does: RoPE once per shape, outside the step, passed in.
        rotary_emb = nnx.merge(graphdef, params, rest).rope(
            jnp.zeros((batch, *shape.latent, shape.in_channels)))
        args = (params, rest, latents, timestep, text, rotary_emb)
        t0 = time.perf_counter()
        with _interpreted():  # the custom kernel has no interpret flag: the mode must hold while it is lowered
            lowered = jax.jit(forward).lower(*args)
            compiled = lowered.compile()
        compile_s = time.perf_counter() - t0
        mem = compiled.memory_analysis()
        hlo = compiled.as_text() or ""
        pallas_calls = len(re.findall(r'custom_call_target="tpu_custom_call"', hlo))
        out = jax.block_until_ready(compiled(*args))  # warm-up
        finite = bool(jnp.isfinite(out.astype(jnp.float32)).all())

    def call():
        with mesh, nn_partitioning.axis_rules(rules):
            return compiled(*args)

    seen = []
    for kernel_call in KERNEL_CALLS:  # one entry per distinct call site (the scan traces a block once)
        if kernel_call not in seen:
            seen.append(kernel_call)
    return {
        "call": call,
        "shape": shape.name, "layers": layers, "batch": batch, "tokens": shape.tokens,
        "text_tokens": shape.text_tokens, "latent": [batch, shape.in_channels, *shape.latent],
        "attention": attention, "flash_block_sizes": sizes, "flash_min_seq_length": fmin,
        "compile_s": compile_s, "build_s": build_s,
        "temp_bytes": getattr(mem, "temp_size_in_bytes", None) if mem is not None else None,
        "temp_gib": getattr(mem, "temp_size_in_bytes", 0) / 2**30 if mem is not None else None,
        "argument_bytes": getattr(mem, "argument_size_in_bytes", None) if mem is not None else None,
        "weight_bytes": sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params)),
        "pallas_tpu_custom_calls": pallas_calls, "attention_calls": seen,
        "output_shape": list(out.shape), "output_finite": finite,
    }


def measure(shape: Shape, layers: int, attention: str, blocks: tuple[int, int, int] | None, *, batch: int,
            repeats: int, flash_min_seq_length: int | None) -> dict:
    import jax

    prepared = prepare(shape, layers, attention, blocks, batch=batch, flash_min_seq_length=flash_min_seq_length)
    call = prepared.pop("call")
    times = []
    for _ in range(max(3, repeats)):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    result = dict(prepared, ms_per_forward=ms, ms_per_block=ms / layers, times_ms=[t * 1e3 for t in times],
                  peak_bytes_in_use=_peak_bytes())
    del call, prepared
    return result


def _parse_blocks(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(",")]
    if len(parts) == 2:
        parts.append(parts[1])
    if len(parts) != 3:
        raise argparse.ArgumentTypeError("--blocks is block_q,block_kv[,block_kv_compute]")
    return tuple(parts)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="wan14b_480p")
    parser.add_argument("--toy", action="store_true", help="--shape toy on the CPU backend (dot_product by default)")
    parser.add_argument("--layers", default=None, help="layer count, or several: 1,8 (default: per shape)")
    parser.add_argument("--blocks", type=_parse_blocks, action="append", default=None,
                        help="block_q,block_kv,block_kv_compute (repeatable); default: the yml's")
    parser.add_argument("--attention", default=None,
                        help="MaxDiffusion attention kernel (default: 'flash', the yml's; 'dot_product' for --toy)")
    parser.add_argument("--flash-min-seq-length", type=int, default=None,
                        help="default: the yml's (14B: 4096, so 512-token cross-attention is dot_product; 1.3B: 0)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vmem-limit-kib", type=int, default=None,
                        help="adds --xla_tpu_scoped_vmem_limit_kib to LIBTPU_INIT_ARGS "
                             "(MaxDiffusion's README and tile search use 65536)")
    parser.add_argument("--interpret", action="store_true", help="splash in Pallas interpret mode (CPU)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    if args.toy:
        args.shape = "toy"
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        if args.attention == "flash":
            args.interpret = True
            if args.flash_min_seq_length is None:
                args.flash_min_seq_length = 0  # the toy's 48 tokens would otherwise fall back to dot_product
            if args.blocks is None:
                args.blocks = [(128, 128, 128)]
    if args.vmem_limit_kib:
        os.environ["LIBTPU_INIT_ARGS"] = (os.environ.get("LIBTPU_INIT_ARGS", "")
                                          + f" --xla_tpu_scoped_vmem_limit_kib={args.vmem_limit_kib}").strip()
    shape = SHAPES[args.shape]
    attention = args.attention or ("dot_product" if args.toy else "flash")
    layer_counts = [int(n) for n in args.layers.split(",")] if args.layers else [shape.default_layers]

    source = setup_imports()
    import jax

    record_kernels()
    if args.interpret:
        use_pallas_interpret()
    device = jax.devices()[0]
    report: dict[str, Any] = {
        "side": "maxdiffusion", "maxdiffusion": source,
        "device": {"backend": jax.default_backend(), "kind": device.device_kind, "jax": jax.__version__,
                   "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS")},
        "shape": dataclasses.asdict(shape), "interpret": args.interpret, "runs": [],
    }
    for blocks in args.blocks or [None]:
        runs = []
        for layers in layer_counts:
            try:
                run = measure(shape, layers, attention, blocks, batch=args.batch, repeats=args.repeats,
                              flash_min_seq_length=args.flash_min_seq_length)
            except Exception as exc:  # noqa: BLE001 - one OOM must not lose the other configurations
                run = {"layers": layers, "blocks": blocks, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
            print(json.dumps(run), file=sys.stderr, flush=True)
            runs.append(run)
        ok = [r for r in runs if "error" not in r]
        if len(ok) >= 2:  # per-block cost from the slope, free of embed/head overhead
            a, b = ok[0], ok[-1]
            for r in ok:
                r["ms_per_block_slope"] = (b["ms_per_forward"] - a["ms_per_forward"]) / (b["layers"] - a["layers"])
        report["runs"] += runs
    report["stubbed_modules"] = list(_FINDER.served) if _FINDER else []
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return report


if __name__ == "__main__":
    sys.exit(1 if any("error" in run for run in main()["runs"]) else 0)
