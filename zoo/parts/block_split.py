"""A DiT forward whose block stack is run in parts: the first block, the remaining ones, or all.

Step caches that look inside the DiT (first-block cache, MagCache) decide after the embedding or the
first block whether the remaining blocks run. `forward_split` is `vidax.zoo.parts.dit.forward` with the
block loop handed to the caller as `blocks(hidden, run_part)`; `run_part(hidden, part)` runs the
part "first" (block 0 of the first group), "rest" (every block after it, through every later group)
or "all", from the same params the whole forward reads (a layer stack or per-layer trees: both are
sliced, nothing copied on the host). A DiT with several groups (HunyuanVideo 1.0's dual then single
stream) is one run of blocks to the caches, as diffusers' hooks see the blocks of all its
`transformer_blocks`-like lists in order: its first block is the first group's first, and the state
after "rest" is the last group's output (the between-groups step of every group but the last runs
inside it).
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from vidax.zoo.parts.dit import Params, block_groups, scan_blocks

PARTS = ("first", "rest", "all")


def split_stack(stacked: Params | tuple[Params, ...]) -> tuple[Any, Any]:
    """(block 0, blocks 1..) of a layer stack (leading axis) or of a tuple of per-layer trees."""
    if isinstance(stacked, tuple):
        return stacked[:1], stacked[1:]
    return jax.tree.map(lambda leaf: leaf[:1], stacked), jax.tree.map(lambda leaf: leaf[1:], stacked)


def splittable(model: Any) -> bool:
    """Whether `forward_split` reaches this DiT (block groups, the first non-empty)."""
    return len(block_groups(model)) >= 1


def _between(model: Any, name: str, hidden: Any, ctx: Any) -> Any:
    return model.between_groups(name, hidden, ctx) if hasattr(model, "between_groups") else hidden


def forward_split(model: Any, params: Params, *inputs: Any, blocks: Callable) -> jax.Array:
    """`forward(model, params, *inputs)` with the blocks run by `blocks(hidden, run_part)` (see the module)."""
    groups = block_groups(model)
    hidden, ctx = model.embed(params, *inputs)
    first, rest = split_stack(params[groups[0].name])
    leading = {"first": first, "rest": rest, "all": params[groups[0].name]}

    def run_part(h, part: str):
        h = scan_blocks(groups[0].block, leading[part], h, ctx)
        if part == "first":
            return h
        for before, group in zip(groups, groups[1:]):
            h = scan_blocks(group.block, params[group.name], _between(model, before.name, h, ctx), ctx)
        return h

    hidden = blocks(hidden, run_part)
    return model.head(params, _between(model, groups[-1].name, hidden, ctx), ctx)


# --- the modulated input of the first block (TeaCache's statistic) ------------------------------


def context_field(name: str) -> Callable:
    """A `modulated_inputs` entry that reads one field of the DiT's context (a time embedding)."""
    return lambda model, first, hidden, ctx: getattr(ctx, name)


def modulated_input(model: Any, params: Params, hidden: Any, ctx: Any, name: str) -> jax.Array:
    """The DiT's modulated input `name` before its first block, from `model.modulated_inputs[name]`
    (`(model, block 0's params, hidden, ctx) -> array`): the one hook a family declares for TeaCache."""
    from vidax.zoo.errors import PipelineError

    how = getattr(model, "modulated_inputs", {}).get(name)
    if how is None or not splittable(model):
        have = ", ".join(getattr(model, "modulated_inputs", {})) or "none"
        raise PipelineError(f"--cache teacache reads the modulated input {name!r} of the DiT's first block: "
                            f"{type(model).__name__} exposes {have} (use --cache taylorseer)")
    group = block_groups(model)[0]
    first, _ = split_stack(params[group.name])
    first = first[0] if isinstance(first, tuple) else jax.tree.map(lambda leaf: leaf[0], first)
    return how(model, first, hidden, ctx)


def recording_calls(forward: Callable, step: Callable, states: tuple) -> tuple[Callable, list]:
    """`(run, made)`: `run(*inputs)` is `forward(*inputs, blocks=...)` with each DiT call's blocks run by
    `step(state, hidden, run_part)`, the call's state taken from `states` in call order (None past their
    end: a fresh cache); each call appends `(its new state, its flags)` to `made`. One closure for the
    resident forward (`forward_split`) and the streamed one (`vidax.zoo.step_caches.streamed.streamed_forward_split`)."""
    made = []

    def run(*inputs):
        state = states[len(made)] if len(made) < len(states) else None

        def blocks(h0, run_part):
            h_n, new_state, flags = step(state, h0, run_part)
            made.append((new_state, flags))
            return h_n

        return forward(*inputs, blocks=blocks)

    return run, made
