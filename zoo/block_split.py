"""A DiT forward whose block stack is run in parts: the first block, the remaining ones, or all.

Step caches that look inside the DiT (first-block cache, MagCache) decide after the embedding or the
first block whether the remaining blocks run. `forward_split` is `vidax.zoo.dit.forward` with the
block loop handed to the caller as `blocks(hidden, run_part)`; `run_part(hidden, part)` runs the
part "first" (block 0), "rest" (blocks 1..) or "all" of the model's one block group, from the same
params the whole forward reads (a layer stack or per-layer trees: both are sliced, nothing copied
on the host). One mechanism for every family with one block group; a DiT with several groups
(HunyuanVideo 1.0's dual then single stream) is refused by name.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from vidax.zoo.dit import Params, block_groups, scan_blocks

PARTS = ("first", "rest", "all")


def split_stack(stacked: Params | tuple[Params, ...]) -> tuple[Any, Any]:
    """(block 0, blocks 1..) of a layer stack (leading axis) or of a tuple of per-layer trees."""
    if isinstance(stacked, tuple):
        return stacked[:1], stacked[1:]
    return jax.tree.map(lambda leaf: leaf[:1], stacked), jax.tree.map(lambda leaf: leaf[1:], stacked)


def splittable(model: Any) -> bool:
    """Whether `forward_split` reaches this DiT (one block group)."""
    return len(block_groups(model)) == 1


def forward_split(model: Any, params: Params, *inputs: Any, blocks: Callable) -> jax.Array:
    """`forward(model, params, *inputs)` with the blocks run by `blocks(hidden, run_part)` (see the module)."""
    (group,) = block_groups(model)
    hidden, ctx = model.embed(params, *inputs)
    first, rest = split_stack(params[group.name])
    stacks = {"first": first, "rest": rest, "all": params[group.name]}

    def run_part(h, part: str):
        return scan_blocks(group.block, stacks[part], h, ctx)

    hidden = blocks(hidden, run_part)
    if hasattr(model, "between_groups"):
        hidden = model.between_groups(group.name, hidden, ctx)
    return model.head(params, hidden, ctx)


# --- the modulated input of the first block (TeaCache's statistic) ------------------------------


def context_field(name: str) -> Callable:
    """A `modulated_inputs` entry that reads one field of the DiT's context (a time embedding)."""
    return lambda model, first, hidden, ctx: getattr(ctx, name)


def modulated_input(model: Any, params: Params, hidden: Any, ctx: Any, name: str) -> jax.Array:
    """The DiT's modulated input `name` before its first block, from `model.modulated_inputs[name]`
    (`(model, block 0's params, hidden, ctx) -> array`): the one hook a family declares for TeaCache."""
    from vidax.zoo.pipeline import PipelineError

    how = getattr(model, "modulated_inputs", {}).get(name)
    if how is None or not splittable(model):
        have = ", ".join(getattr(model, "modulated_inputs", {})) or "none"
        raise PipelineError(f"--cache teacache reads the modulated input {name!r} of the DiT's first block: "
                            f"{type(model).__name__} exposes {have} (use --cache taylorseer)")
    (group,) = block_groups(model)
    first, _ = split_stack(params[group.name])
    first = first[0] if isinstance(first, tuple) else jax.tree.map(lambda leaf: leaf[0], first)
    return how(model, first, hidden, ctx)
