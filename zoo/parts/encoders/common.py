"""Pieces every encoder shares: embedding tables, activations, short-sequence attention, configs.

Text and image encoders run once per prompt over at most a few hundred tokens, so their attention
is the plain softmax(QKᵀ) here: it takes what `vidax.zoo.compute.attention.attention` does not (an
additive bias for T5, a causal mask for the decoders). Video self-attention never comes here.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.parts.configs import pick_fields  # noqa: F401  (the encoders' configs read through it)
from vidax.zoo.compute.layers import logical_param
from vidax.zoo.compute.mesh import DATA, TENSOR
from vidax.zoo.compute.runtime import encoder_runs_layer_by_layer

# The mesh placement of every encoder's logical axes (names absent here are replicated): Megatron
# tensor parallel over attention heads and feed-forward features, the batch (classifier-free
# guidance's two prompts) over data. Text tokens are never split: sequences are short.
ENCODER_SHARDING_RULES = (
    ("batch", DATA),
    ("heads", TENSOR),
    ("mlp", TENSOR),
)


class TextOutput(NamedTuple):
    last_hidden_state: jax.Array  # [B, S, D], after the final norm
    hidden_states: jax.Array  # [L+1, B, S, D]: transformers' tuple (embeddings, each layer's output, last normed)


def quick_gelu(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(1.702 * x)


# transformers' ACT2FN names -> functions (only those the supported encoders use)
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "quick_gelu": quick_gelu,
    "silu": jax.nn.silu,
}


def activation(name: str, where: str) -> Callable[[jax.Array], jax.Array]:
    if name not in ACTIVATIONS:
        raise ValueError(f"{where}: activation {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class Embed(nn.Module):
    """A lookup table `embedding` `[num, features]` (a torch `nn.Embedding`'s weight)."""

    num: int
    features: int
    axes: tuple[str | None, str | None] = ("vocab", "embed")

    @nn.compact
    def __call__(self, ids: jax.Array) -> jax.Array:
        table = logical_param(self, "embedding", (self.num, self.features), self.axes)
        return jnp.take(table, ids, axis=0)


def dense_attention(q, k, v, *, scale: float, bias=None, mask=None):
    """softmax(q kᵀ · scale + bias) v over short sequences, in fp32.

    Args:
      q, k, v: `[B, S, H, D]` (k/v may have fewer heads: grouped-query attention repeats them).
      scale: logit scale (T5 uses 1.0).
      bias: additive logits bias broadcastable to `[B, H, Sq, Sk]`, or None.
      mask: bool, broadcastable to `[B, H, Sq, Sk]`, True = attend; masked logits get the
        dtype's lowest value (as transformers does), so a fully masked row stays finite.
    """
    if k.shape[2] != q.shape[2]:
        k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)
        v = jnp.repeat(v, q.shape[2] // v.shape[2], axis=2)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32)).astype(q.dtype)


def padding_mask(attention_mask: jax.Array | None) -> jax.Array | None:
    """`[B, S]` 0/1 mask -> bool `[B, 1, 1, S]` over keys (None stays None)."""
    if attention_mask is None:
        return None
    return attention_mask.astype(bool)[:, None, None, :]


def scanned(block_cls, length: int, name: str | None, **kwargs):
    """`length` copies of `block_cls`, params stacked on a leading `layers` axis.

    Traced (inside `jax.jit`, or at init) it is one `nn.scan`. Called eagerly (`by_layer` on CPU) it is a host
    loop over one compiled layer, each call reading its layer's slice of the stack: XLA's CPU compiler hoists
    the cast of bf16 weights to the fp32 compute dtype out of a scan (or an unrolled loop), a whole-model fp32
    copy (18 GB of temporaries for UMT5-XXL's 10.8 GB of bf16 weights); one layer per program keeps it to one
    layer's. The block's `__call__(carry, *broadcast)` returns `(carry, per_layer_output)`.
    """
    return _layer_stack(block_cls, length)(name=name, **kwargs)


@functools.lru_cache(maxsize=None)
def _layer_stack(block_cls, length: int):
    lifted = nn.scan(
        block_cls,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=nn.broadcast,
        length=length,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )

    class LayerStack(lifted):
        def __call__(self, carry, *broadcast):
            if self.is_initializing() or _traced(carry, broadcast):
                recorded = _RECORDING.get()
                if recorded is not None and not self.is_initializing():
                    recorded.append(_layer_unit(self, block_cls, carry, broadcast))
                return super().__call__(carry, *broadcast)
            return _host_loop(self, block_cls, length, carry, broadcast)

    LayerStack.__name__ = LayerStack.__qualname__ = f"Scanned{block_cls.__name__}"
    return LayerStack


def _traced(carry, broadcast) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((carry, broadcast)))


def _block_kwargs(stack: nn.Module, block_cls) -> dict:
    """The block's own dataclass fields, as the stack was built with them (`config=...`)."""
    names = [f.name for f in dataclasses.fields(block_cls) if f.name not in ("parent", "name")]
    return {n: getattr(stack, n) for n in names if hasattr(stack, n)}


@functools.lru_cache(maxsize=None)
def _compiled_layer(block_cls, frozen_kwargs: tuple):
    """One layer as its own program (kept per block class and fields: a stack's layers share it)."""
    module = block_cls(parent=None, **dict(frozen_kwargs))
    return jax.jit(lambda params, carry, *broadcast: module.apply({"params": params}, carry, *broadcast))


def _host_loop(stack: nn.Module, block_cls, length: int, carry, broadcast):
    stacked = stack.variables["params"]
    layer = _compiled_layer(block_cls, tuple(sorted(_block_kwargs(stack, block_cls).items())))
    outputs = []
    for index in range(length):
        carry, out = layer(jax.tree.map(lambda leaf, i=index: leaf[i], stacked), carry, *broadcast)
        outputs.append(out)
    return carry, jax.tree.map(lambda *per_layer: jnp.stack(per_layer), *outputs)


# --- run layer by layer ----------------------------------------------------------------------------------


def by_layer(fn=None, *, static_argnums=(0,)):
    """An encoder's entry function (`fn(model, params, ...)`, the model static): called eagerly where
    `runtime.encoder_runs_layer_by_layer` says so (a large encoder on a CPU, fp32 weights on an accelerator), so
    that its layer stacks run as host loops over one compiled layer (`scanned`); else one compiled program."""
    if fn is None:
        return functools.partial(by_layer, static_argnums=static_argnums)
    jitted = jax.jit(fn, static_argnums=static_argnums)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if not _traced(args, ()) and encoder_runs_layer_by_layer(args[1]):  # (model, params, ...)
            return fn(*args, **kwargs)
        return jitted(*args, **kwargs)

    call.jitted = jitted
    return call


LayerUnit = NamedTuple("LayerUnit", [("fn", Callable), ("args", tuple)])

_RECORDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("vidax_layer_units", default=None)


@contextlib.contextmanager
def recording_layer_units():
    """Collect, while an encoder is traced, the one-layer unit each of its stacks runs as on CPU (the dry run
    compiles these units: what `by_layer` runs)."""
    units: list[LayerUnit] = []
    token = _RECORDING.set(units)
    try:
        yield units
    finally:
        _RECORDING.reset(token)


def _layer_unit(stack: nn.Module, block_cls, carry, broadcast) -> LayerUnit:
    layer = _compiled_layer(block_cls, tuple(sorted(_block_kwargs(stack, block_cls).items())))
    abstract = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)  # noqa: E731
    params = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape[1:], leaf.dtype), stack.variables["params"])
    return LayerUnit(layer, (params, *jax.tree.map(abstract, (carry, *broadcast))))
