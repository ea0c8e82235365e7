"""Step caches with the DiT's blocks streamed from host memory (`--offload-chunk`, `vidax.zoo.weights.offload`).

A streamed DiT is a host loop: embed and head compiled once each, the block chunks fetched and run one
after another. The caches that look inside the DiT run the same loop in parts, so that the weights a
step does not need never leave host memory:

- MagCache decides on the host before the step: a skipped step adds the cached residual between the
  embedding and the head and fetches no chunk; a full step streams every chunk as usual.
- TeaCache reads the modulated input of the first block, which may need a few of block 0's weights
  (its shift and scale table): only the leaves the family's hook reads are copied to the devices,
  once per denoiser, and kept there; a skipped step then fetches no chunk.
- The first-block cache runs block 0 every step, so block 0 alone is kept on the devices (cut from the
  first chunk's one fetch, and kept while the DiT's host blocks are the same); it brings the decision
  flags to the host (`distributed.to_host`: every process reads the same value) and streams the chunks
  only when a row runs (the first chunk again, for its other blocks, when it holds more than block 0).

Outside the block loop these steps run op by op on the host, as the streamed forward does.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp

from vidax.zoo.parts.block_split import recording_calls
from vidax.zoo.parts.dit import block_groups, scan_blocks


def _block_runners(streamed: Any, group: str) -> tuple[Callable, Callable]:
    """(block 0 of a fetched chunk, the chunk's blocks after it), compiled once per streamed DiT (kept on it,
    so that they go with it)."""
    runners = streamed.__dict__.setdefault("_split_runners", {})
    if group not in runners:
        block = next(g.block for g in block_groups(streamed.model) if g.name == group)
        first = jax.jit(lambda chunk, h, ctx: scan_blocks(block, jax.tree.map(lambda a: a[:1], chunk), h, ctx))
        after = jax.jit(lambda chunk, h, ctx: scan_blocks(block, jax.tree.map(lambda a: a[1:], chunk), h, ctx))
        runners[group] = (first, after)
    return runners[group]


def resident_first_block(streamed: Any, host: Any, group: str) -> Any:
    """Block 0 of `group` on the devices: the first chunk fetched once (placed as every chunk is) and cut to
    its first block there. Kept on the streamed DiT while its host chunks are the same objects (a new host
    tree, after a LoRA change, fetches again), so the steps of a pass, and later passes, fetch nothing for it."""
    first_chunk = host[group].chunks[0]
    kept = streamed.__dict__.get("_resident_first_block")
    if kept is None or kept[0] is not first_chunk:
        block = jax.tree.map(lambda a: a[:1], streamed._fetch(group, first_chunk))
        kept = streamed.__dict__["_resident_first_block"] = (first_chunk, block)
    return kept[1]


class StreamedParts:
    """`run_part(hidden, part)` of `block_split.forward_split` for one call of a streamed DiT: "first" runs
    the first group's block 0 from its resident copy (`resident_first_block`: no fetch); "rest" fetches the
    first chunk for its other blocks (when it has any) and streams every later chunk and group; "all"
    streams everything."""

    def __init__(self, streamed: Any, host: Any, ctx: Any):
        self.streamed, self.host, self.ctx = streamed, host, ctx
        self.groups = block_groups(streamed.model)

    def __call__(self, hidden: Any, part: str) -> Any:
        hidden = jax.tree.map(jnp.copy, hidden)  # the chunk runners donate their input: the caller keeps its own
        leading = self.groups[0].name
        if part == "first":
            block = resident_first_block(self.streamed, self.host, leading)
            return _block_runners(self.streamed, leading)[0](block, hidden, self.ctx)
        if part == "rest":
            if self.host[leading].sizes[0] > 1:
                first_chunk = self.streamed._fetch(leading, self.host[leading].chunks[0])
                hidden = _block_runners(self.streamed, leading)[1](first_chunk, hidden, self.ctx)
                del first_chunk
            hidden = self.streamed.run_group(leading, self.host[leading], hidden, self.ctx, start=1)
        else:
            hidden = self.streamed.run_group(leading, self.host[leading], hidden, self.ctx)
        for before, group in zip(self.groups, self.groups[1:]):
            hidden = self._between(before.name, hidden)
            hidden = self.streamed.run_group(group.name, self.host[group.name], hidden, self.ctx)
        return hidden

    def _between(self, name: str, hidden: Any) -> Any:
        between = self.streamed._between
        return hidden if between is None else between(name, hidden, self.ctx)


def streamed_forward_split(streamed: Any, params: Any, host: Any, *inputs: Any, blocks: Callable) -> Any:
    """`block_split.forward_split` for a `StreamedDiT`: embed, `blocks(hidden, run_part)`, head."""
    hidden, ctx = streamed._embed(params, *inputs)
    parts = StreamedParts(streamed, host, ctx)
    hidden = parts._between(parts.groups[-1].name, blocks(hidden, parts))
    return streamed._head(params, hidden, ctx)


def streamed_split_prediction(predict: Callable, denoiser: Any, step: Callable, states: tuple, latents, timestep,
                              cond, knobs):
    """`step_cache._split_prediction` for a streamed denoiser (a host loop): the prediction and, per DiT
    call, (its new state, its flags)."""
    run, made = recording_calls(partial(streamed_forward_split, denoiser.streamed, denoiser.params,
                                        denoiser.host_blocks), step, states)
    return predict(run, latents, timestep, cond, knobs), tuple(made)


# --- TeaCache: block 0's leaves its modulated input reads, kept resident ------------------------


@dataclasses.dataclass(frozen=True)
class FirstBlockReads:
    """What a streamed TeaCache measurement needs of the blocks: per block group `(name, tree structure,
    one-block leaf shapes, which leaves are given)` (static), and the given leaves of the first group's
    block 0 on the devices (those the family's `modulated_inputs` hook reads; often none)."""

    layout: tuple
    leaves: tuple


def _one_block_params(layout: tuple, params: Any, leaves: tuple) -> Any:
    """Inside a compiled unit: `params` plus a one-block stack per group, the given `leaves` where the layout
    says so and zeros elsewhere (never read: the compiler drops them, nothing is materialised)."""
    given, full = iter(leaves), dict(params)
    for name, treedef, shapes, mask in layout:
        stack = [next(given) if read else jnp.zeros(shape.shape, shape.dtype) for read, shape in zip(mask, shapes)]
        full[name] = jax.tree.unflatten(treedef, stack)
    return full


def _layout(denoiser: Any, reads_first: tuple[bool, ...] | None = None) -> tuple:
    layout = []
    for index, group in enumerate(block_groups(denoiser.dit)):
        leaves, treedef = jax.tree.flatten(denoiser.host_blocks[group.name].chunks[0])
        shapes = tuple(jax.ShapeDtypeStruct((1,) + leaf.shape[1:], leaf.dtype) for leaf in leaves)
        mask = reads_first if index == 0 and reads_first is not None else (False,) * len(leaves)
        layout.append((group.name, treedef, shapes, mask))
    return tuple(layout)
