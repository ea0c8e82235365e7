"""Runtime settings shared by every component: active mesh, compile cache, donation, precision.

How the attention entry point learns the mesh: through jax's own mesh context. `use_mesh(mesh,
rules)` enters `jax.set_mesh(mesh)` (so the abstract mesh is part of every jit cache key: a
function traced without a mesh is retraced under one) and records the logical-axis rules table
for `vidax.zoo.compute.sharding.constrain`. Outside `use_mesh` everything runs plainly on one device.

    with use_mesh(make_mesh(dp=2, tp=2, sp=2), TRANSFORMER_RULES):
        out = jax.jit(model_forward)(params, latents, ...)

The persistent compilation cache is switched on when this module is imported, unless
`VIDAX_NO_COMPILE_CACHE=1`; the CLIs call `configure_compile_cache` for `--no-compile-cache`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from vidax.zoo.compute.kernels.tpu_vmem import LIBTPU_DEFAULT_VMEM_KIB, raise_scoped_vmem, scoped_vmem_kib
from vidax.zoo.compute.mesh import DATA, SEQUENCE, TENSOR

Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

# The shared DiT table: Megatron column->row on "heads"/"mlp", Ulysses on "seq", CFG on "batch".
TRANSFORMER_RULES: Rules = (
    ("batch", DATA),
    ("seq", SEQUENCE),
    ("heads", TENSOR),
    ("mlp", TENSOR),
    ("act_heads", TENSOR),
    ("act_mlp", TENSOR),
    ("embed", None),
    ("layers", None),
)

_ACTIVE_RULES: contextvars.ContextVar[Rules | None] = contextvars.ContextVar("vidax_rules", default=None)


@contextlib.contextmanager
def use_mesh(mesh: Mesh, rules: Rules | None = None) -> Iterator[Mesh]:
    """Run the enclosed jax code on `mesh`, mapping logical axes with `rules`.

    The mesh is part of jax's jit cache key; the rules table is not, so a function jitted under
    one table keeps it when called under another on the same mesh: keep one table per component.

    Args:
      mesh: from `vidax.zoo.compute.mesh.make_mesh`.
      rules: the component's logical-axis rules table (default: the shared DiT table).
    """
    if rules is None:
        rules = TRANSFORMER_RULES
    token = _ACTIVE_RULES.set(tuple(rules))
    try:
        with jax.set_mesh(mesh):
            yield mesh
    finally:
        _ACTIVE_RULES.reset(token)


def active_mesh() -> jax.sharding.AbstractMesh | None:
    """The mesh in context (abstract: valid inside jit), or None when there is none.

    Inside `shard_map` (manual axes) the code is already per-device: None as well, so that the
    entry points do not nest a second `shard_map`.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh is None or mesh.empty or mesh.manual_axes:
        return None
    return mesh


def active_rules() -> Rules | None:
    return _ACTIVE_RULES.get()


# --- the platform programs are compiled for ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlatformOverride:
    """A chip this process compiles for without having it (`vidax.zoo.compute.target`)."""

    platform: str
    device_kind: str
    devices: int
    device_bytes: int


_PLATFORM: contextvars.ContextVar[PlatformOverride | None] = contextvars.ContextVar("vidax_platform", default=None)


def platform() -> str:
    """The platform the code being traced will run on: the local backend's (`jax.default_backend()`), or the
    chip a deviceless compile targets (`--target`). Model code asks this, not jax, wherever a backend picks a
    form (the attention kernel, RoPE's products, CPU row blocks)."""
    override = _PLATFORM.get()
    return override.platform if override is not None else jax.default_backend()


# A CPU run of a model with at least this much weight runs it layer by layer (text encoders: a host loop over one
# compiled layer, `encoders.by_layer`; the DiT: one block per program, `offload.place_layers`): XLA's CPU compiler
# otherwise keeps whole-model temporaries (UMT5-XXL: 18.5 GB beside 10.8 GB of weights). Below it those are small
# and one program is faster to compile and to call (wan-tiny's generation: 38 programs instead of 91).
LAYERED_CPU_BYTES = 256 << 20


def tree_bytes(tree: Any) -> int:
    """Bytes of a tree's arrays (NumPy, jax, or abstract `ShapeDtypeStruct`s)."""
    import math

    return sum(math.prod(leaf.shape) * jnp.dtype(leaf.dtype).itemsize for leaf in jax.tree.leaves(tree)
               if hasattr(leaf, "shape") and hasattr(leaf, "dtype"))


def runs_layer_by_layer(weights: Any) -> bool:
    """Whether a model with these weights (a tree, or its bytes) runs layer by layer: on a CPU, when they reach
    `LAYERED_CPU_BYTES`."""
    size = weights if isinstance(weights, int) else tree_bytes(weights)
    return platform() == "cpu" and size >= LAYERED_CPU_BYTES


def encoder_runs_layer_by_layer(weights: Any) -> bool:
    """Whether a text or image encoder with these weights runs as a host loop over one compiled layer
    (`encoders.by_layer`): where any large model does (`runs_layer_by_layer`), and on an accelerator when its
    float32 weights reach `LAYERED_CPU_BYTES`. An accelerator's matrix unit takes bf16 parts of fp32 operands, and
    XLA converts every layer's weights at once, out of the scan: CogVideoX's fp32 T5-XXL compiled for a v5e held
    26.4 GB of temporaries beside its 19 GB of weights."""
    if runs_layer_by_layer(weights):
        return True
    float32 = [leaf for leaf in jax.tree.leaves(weights) if getattr(leaf, "dtype", None) == jnp.float32]
    return platform() != "cpu" and tree_bytes(float32) >= LAYERED_CPU_BYTES


def device_kind() -> str:
    """The device kind programs are compiled for (`jax.devices()[0].device_kind` when nothing is targeted)."""
    override = _PLATFORM.get()
    return override.device_kind if override is not None else jax.devices()[0].device_kind


def target_memory() -> tuple[int, int] | None:
    """(devices, bytes per device) of the targeted chips, None when compiling for the local backend."""
    override = _PLATFORM.get()
    return None if override is None else (override.devices, override.device_bytes)


@contextlib.contextmanager
def platform_override(platform_name: str, kind: str, devices: int, device_bytes: int) -> Iterator[None]:
    token = _PLATFORM.set(PlatformOverride(platform_name, kind, devices, device_bytes))
    try:
        yield
    finally:
        _PLATFORM.reset(token)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Trace for shapes alone (parameter trees, abstract inits under `jax.eval_shape`): `platform()` answers
    "shapes", so no code asks jax for its backend (which starts one: on a TPU host, the chip and gigabytes of host
    memory, for a `vidax-convert` too) or times a CPU product. The forms a backend picks trace to the same shapes."""
    with platform_override("shapes", "shapes only", 1, 0):
        yield


# --- persistent compilation cache ------------------------------------------------------------


def default_cache_dir() -> Path:
    """`$VIDAX_CACHE_DIR`, else `$XDG_CACHE_HOME/vidax/jax` (`~/.cache/vidax/jax`).

    It also holds `cpu-tuning.json`, this machine's measured CPU choices (`vidax.zoo.compute.cpu_tuning`), kept
    whether or not the compile cache is on."""
    if os.environ.get("VIDAX_CACHE_DIR"):
        return Path(os.environ["VIDAX_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "vidax" / "jax"


def configure_compile_cache(
    enabled: bool | None = None, path: str | os.PathLike | None = None, min_compile_secs: float | None = None
) -> Path | None:
    """Switch jax's persistent compilation cache on or off; returns the cache folder or None.

    Call it before the first compilation (jax opens its cache once per process).

    Args:
      enabled: None reads the environment (off when `VIDAX_NO_COMPILE_CACHE=1`); the CLIs pass
        `not no_compile_cache`.
      path: cache folder; default `default_cache_dir()`.
      min_compile_secs: only cache programs that took at least this long to compile (default 0: every
        program, so that a second process compiles nothing; jax's own default, 1 s, left the many small programs
        of a run, each a fraction of a second, to compile again in every process).
    """
    if enabled is None:
        enabled = os.environ.get("VIDAX_NO_COMPILE_CACHE", "").lower() not in ("1", "true", "yes")
    if not enabled:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    folder = Path(path).expanduser() if path is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_secs or 0))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


# --- donation --------------------------------------------------------------------------------


def xla_only_options() -> dict[str, str] | None:
    """XLA options for a program with no Pallas kernel (the VAEs' units) on a TPU: libtpu's own scoped VMEM limit.

    The 64 MiB the attention kernels get process-wide (`tpu_vmem`) is read by XLA's own fusions too, and its v5e
    compiler then searches far longer for convolutions, for no faster program: one 96-channel 3x3x3 convolution
    over 4 frames of 480x832 compiles in 46.5 s against 8.8 s (deviceless on a 2-core host, the two alternating),
    and on a v5e ran in 19.5 and 19.6 ms (interleaved; bench/runtime/bench_vae_conv.py). None elsewhere (other
    backends refuse a TPU option) and where nothing raised the limit."""
    kib = scoped_vmem_kib()
    if platform() != "tpu" or kib is None or kib <= LIBTPU_DEFAULT_VMEM_KIB:
        return None
    return {"xla_tpu_scoped_vmem_limit_kib": str(LIBTPU_DEFAULT_VMEM_KIB)}


def compile_step(fn: Callable, *, donate: Sequence[int] = (0,), static: Sequence[int] = (),
                 options: Callable[[], dict[str, str] | None] | None = None, **jit_kwargs: Any):
    """`jax.jit(fn)` donating the positional arguments in `donate`, whose old values are dead.

    The rule for samplers and offload: the latents passed into a step, the hidden state passed
    into an offload chunk and a chunk's weights are never read again by the caller, so their
    buffers are donated and the output reuses them (no second copy of a 720p latent or of a
    chunk's weights). The caller must drop its reference: `x = step(x, ...)`. Backends that
    cannot donate (or a donated buffer whose shape fits no output) fall back to a copy silently.

    Args:
      fn: the repeated unit (a sampler step, a block chunk).
      donate: positions of the arguments to donate.
      static: positions of static arguments.
      options: called at each call, XLA compile options for the platform traced for (`xla_only_options`); None or
        a None result: none.
      **jit_kwargs: passed on to `jax.jit` (shardings).
    """
    jitted = jax.jit(fn, donate_argnums=tuple(donate), static_argnums=tuple(static), **jit_kwargs)
    with_options: dict[tuple, Any] = {}

    def call(*args, **kwargs):
        chosen = options() if options is not None else None
        target = jitted
        if chosen:
            key = tuple(sorted(chosen.items()))
            if key not in with_options:
                with_options[key] = jax.jit(fn, donate_argnums=tuple(donate), static_argnums=tuple(static),
                                            compiler_options=dict(chosen), **jit_kwargs)
            target = with_options[key]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
            return target(*args, **kwargs)

    call.jitted, call.options, call.__wrapped__ = jitted, options, fn
    return call


# --- precision -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Precision:
    """Dtypes per role (see docs/PRECISION.md); a family states its own in its config."""

    weights: Any = jnp.bfloat16
    activations: Any = jnp.bfloat16
    residual: Any = jnp.float32
    modulation: Any = jnp.float32
    matmul: str = "default"

    @contextlib.contextmanager
    def matmul_scope(self) -> Iterator[None]:
        """Matmul precision for the enclosed tracing (`"highest"` for fp32 parity tests)."""
        with jax.default_matmul_precision(self.matmul):
            yield


BF16 = Precision()
FP32 = Precision(weights=jnp.float32, activations=jnp.float32, matmul="highest")


configure_compile_cache()
raise_scoped_vmem()
