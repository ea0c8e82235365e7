"""The contract every family's diffusion transformer follows, and the block runner.

A family transformer is split into three parts so that the runtime, not the family, decides how
the repeated blocks run (scanned resident weights, streamed offload chunks, tensor/sequence
parallel):

    hidden, ctx = model.embed(params, *inputs)        # patchify, time/text embeddings, RoPE tables
    hidden = run_blocks(model.block, params["blocks"], hidden, ctx)
    out = model.head(params, hidden, ctx)             # final norm/modulation, unpatchify

`params["blocks"]` holds every block's weights stacked on a leading layer axis (the spec's
`stack` op writes them that way); `model.block` is a single-block linen module whose params are
one slice of that stack. `ctx` is any pytree the blocks need besides the hidden state
(timestep modulation, text tokens, RoPE tables, masks); it is broadcast to every block.
Families with two block kinds (HunyuanVideo 1.0: dual then single) expose `block_groups`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import flax
import flax.linen as nn
import jax

Params = dict[str, Any]


class StackedDiT(Protocol):
    block: nn.Module

    def embed(self, params: Params, *inputs: Any) -> tuple[jax.Array, Any]: ...

    def head(self, params: Params, hidden: jax.Array, ctx: Any) -> jax.Array: ...


def scan_blocks(block: nn.Module, stacked: Params, hidden: jax.Array, ctx: Any) -> jax.Array:
    """Run `block` once per slice of `stacked` (leading axis = layer) with `lax.scan`.

    Compiles one block body whatever the depth (bench/bench_compile.py: 40 layers compile as
    fast as 2; an unrolled loop takes ~20x longer). Under a mesh (`runtime.use_mesh`) the hidden
    state `[B, S, D]` is kept split as ("batch", "seq", "act_embed") between blocks.
    """

    def body(h, layer_params):
        return _constrain_hidden(block.apply({"params": layer_params}, h, ctx)), None

    hidden, _ = jax.lax.scan(body, _constrain_hidden(hidden), stacked)
    return hidden


def _constrain_hidden(hidden: Any) -> Any:
    """Token-major hidden states are sequence-split under sequence parallel (no-op without a mesh).

    The hidden state may also be a pytree (HunyuanVideo's dual stream); its blocks place it themselves.
    """
    if not isinstance(hidden, jax.Array) or hidden.ndim != 3:
        return hidden
    from vidax.zoo.sharding import constrain  # sharding imports the runtime; keep dit.py light

    return constrain(hidden, ("batch", "seq", "act_embed"))


def forward(model: StackedDiT, params: Params, *inputs: Any, run_blocks=scan_blocks) -> jax.Array:
    """Whole-model forward pass; `run_blocks` is swapped for the offload runner when streaming."""
    hidden, ctx = model.embed(params, *inputs)
    hidden = run_blocks(model.block, params["blocks"], hidden, ctx)
    return model.head(params, hidden, ctx)


def param_shapes(init_params: Callable[[jax.Array], Params]) -> dict[str, tuple[int, ...]]:
    """Flat `{"a/b/kernel": shape}` of a model's full tree from an abstract run of its `init_params`
    (nothing allocated): the translator's expected tree and the memory planner's sizes."""
    tree = jax.eval_shape(init_params, jax.random.key(0))
    return {path: tuple(leaf.shape) for path, leaf in flax.traverse_util.flatten_dict(tree, sep="/").items()}
