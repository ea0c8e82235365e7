"""TeaCache applied to a denoise pass: the rule of `rules.py` fed the DiT's modulated input.

Each step first embeds the DiT's inputs (no block runs) and measures, per DiT call and per CFG branch
(batch row) where the reference pipeline calls the DiT per branch, or over the whole call where it
batches both, the relative L1 change of the first block's modulated input since the previous step
(`vidax.zoo.parts.block_split.modulated_input`). That one small vector per call comes to the host; the
published polynomial and the accumulators decide there, as the TeaCache reference does with
`.item()`. Then the step runs every block for the rows that compute, and adds the last residual of
all blocks (output minus input of the block stack) for the rows that skip: of the video stream, and of
LTX-2's audio stream, which its DiT returns as well.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.block_split import forward_split, modulated_input, splittable
from vidax.zoo.parts.dit import block_groups, forward
from vidax.zoo.compute.distributed import to_host
from vidax.zoo.errors import PipelineError
from vidax.zoo.step_caches.streamed import FirstBlockReads, _layout, _one_block_params, streamed_split_prediction
from vidax.zoo.step_caches.streams import output_streams, with_streams
from vidax.zoo.step_caches.rules import TeaCacheRule, teacache_decide, teacache_rules

MODES = {True: "e0", False: None}  # use_ret_steps: Wan's time projection; else the set's other input


@dataclasses.dataclass(frozen=True)
class TeaCacheConfig:
    """The TeaCache reference's knobs: `rel_l1_thresh` (--cache-threshold), the published coefficient
    set (--cache-coefficients, default the run's model) and `use_ret_steps` (--cache-use-ret-steps)."""

    threshold: float
    coefficients: str
    modulated: str
    rule: TeaCacheRule


def teacache_config(threshold: float, coefficients: str, use_ret_steps: bool) -> TeaCacheConfig:
    """The config, or ValueError naming what is published (the caller words it as one line)."""
    published = teacache_rules()
    if coefficients not in published:
        raise ValueError(f"no TeaCache coefficients for {coefficients} (published: {', '.join(published)}; "
                         f"--cache-coefficients picks one)")
    inputs = published[coefficients]
    names = ["e0"] if use_ret_steps else [name for name in inputs if name != "e0"]
    if not names or names[0] not in inputs:
        raise ValueError(f"TeaCache coefficients {coefficients} have no "
                         f"{'use_ret_steps (e0)' if use_ret_steps else 'plain'} set (they have {', '.join(inputs)})")
    return TeaCacheConfig(threshold, coefficients, names[0], inputs[names[0]])


def relative_l1_rows(current: jax.Array, previous: jax.Array, per_row: bool) -> jax.Array:
    """mean |current - previous| / mean |previous|: `[rows]` per batch row or `[1]` over the call."""
    axes = tuple(range(1, current.ndim)) if per_row else None
    change = jnp.mean(jnp.abs(current - previous), axis=axes) / jnp.mean(jnp.abs(previous), axis=axes)
    return jnp.reshape(change, (-1,))


@partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _modulated_changes(predict, dit, name, per_row, params, previous, latents, timestep, cond, knobs):
    """Per DiT call of the step: (its modulated input, its change since `previous`; NaN without one).
    The blocks and head do not run (the call returns zeros of the DiT output's shape)."""
    made = []

    def run(*inputs):
        hidden, ctx = dit.embed(params, *inputs)
        current = modulated_input(dit, params, hidden, ctx, name).astype(jnp.float32)
        rows = current.shape[0] if per_row else 1
        before = previous[len(made)] if len(made) < len(previous) else None
        change = jnp.full((rows,), jnp.nan) if before is None else relative_l1_rows(current, before, per_row)
        made.append((current, change))
        shapes = jax.eval_shape(partial(forward, dit, params), *inputs)  # an array, or LTX-2's (video, audio)
        return jax.tree.map(lambda shape: jnp.zeros(shape.shape, shape.dtype), shapes)

    predict(run, latents, timestep, cond, knobs)
    return tuple(made)


def _rows_like(flags: tuple[bool, ...], leaf: jax.Array) -> jax.Array:
    return jnp.reshape(jnp.asarray(flags), (-1,) + (1,) * (leaf.ndim - 1))


def tea_blocks(computes: tuple[bool, ...], residual: Any, h0: Any, run_part: Callable, streams: Callable,
               with_streams: Callable) -> tuple[Any, Any]:
    """(the block stack's output, the new residuals) for rows that compute (`computes`, per row or one
    for the call) and rows that add the last `residual` of each output stream (`streams(hidden)`: the
    video tokens; LTX-2's audio too, as its DiT returns both); the text passes a skipped row unchanged."""
    before = streams(h0)
    if not any(computes):
        return with_streams(h0, {k: v + residual[k] for k, v in before.items()}), residual
    h_n = run_part(h0, "all")
    after = streams(h_n)
    fresh = {k: after[k] - before[k] for k in after}
    if all(computes):
        return h_n, fresh
    keep = lambda k: _rows_like(computes, fresh[k])  # noqa: E731
    mixed = {k: jnp.where(keep(k), after[k], before[k] + residual[k]) for k in after}
    return with_streams(h_n, mixed), {k: jnp.where(keep(k), fresh[k], residual[k]) for k in after}


@partial(jax.jit, static_argnums=(0, 1, 2))
def _tea_prediction(predict, dit, computes, params, residuals, latents, timestep, cond, knobs):
    """`predict` with each DiT call's blocks run or skipped per `computes[call]`; the new residuals."""
    made = []

    def run(*inputs):
        index = len(made)

        def blocks(h0, run_part):
            h_n, residual = tea_blocks(computes[index], residuals[index] if residuals else None, h0, run_part,
                                       output_streams, with_streams)
            made.append(residual)
            return h_n

        return forward_split(dit, params, *inputs, blocks=blocks)

    return predict(run, latents, timestep, cond, knobs), tuple(made)


@dataclasses.dataclass
class TeaState:
    """One denoiser's TeaCache state: steps seen, per call and row the accumulated rescaled change,
    per call the previous modulated input and the last residual of the blocks."""

    step: int = 0
    accumulated: tuple[tuple[float, ...], ...] = ()
    previous: tuple[jax.Array, ...] = ()
    residuals: tuple[jax.Array, ...] = ()
    first_block: Any = None  # streamed blocks: block 0's leaves the measurement reads (streamed.py)


def tea_step(config: TeaCacheConfig, state: TeaState, denoiser: Any, predict: Callable, per_row: bool,
             steps: int, latents, timestep, cond, knobs, pass_step: int | None = None):
    """One step: (prediction, new state, per-row flags of call 0, per-row changes of call 0).

    `pass_step` is the step's index in the pass: a denoiser that starts mid-pass (Wan2.2's second
    expert, whose `state` is fresh) counts its warm-up from its own first step, and the pass's last
    `final_steps` run whichever denoiser takes them."""
    if not splittable(denoiser.dit):
        raise PipelineError(f"--cache teacache runs the DiT's blocks as one part: {type(denoiser.dit).__name__} "
                            f"has no block groups (use --cache taylorseer)")
    if denoiser.streamed is not None:  # streamed blocks: a skipped step fetches no chunk (streamed.py)
        first = state.first_block or first_block_reads(denoiser, config.modulated, per_row, predict,
                                                                latents, timestep, cond, knobs)
        state = dataclasses.replace(state, first_block=first)
        measured = streamed_modulated_changes(predict, denoiser, config.modulated, per_row, first,
                                                       state.previous, latents, timestep, cond, knobs)
    else:
        measured = _modulated_changes(predict, denoiser.dit, config.modulated, per_row, denoiser.params,
                                      state.previous, latents, timestep, cond, knobs)
    changes = [to_host(change).astype(np.float64) for _, change in measured]  # the step's one device-to-host value
    computes, accumulated = [], []
    own_steps = steps - (state.step if pass_step is None else pass_step) + state.step  # this denoiser's count
    for call, change in enumerate(changes):
        before = state.accumulated[call] if call < len(state.accumulated) else (0.0,) * len(change)
        decided = [teacache_decide(config.rule, config.threshold, acc, None if np.isnan(c) else float(c),
                                   state.step, own_steps) for acc, c in zip(before, change)]
        computes.append(tuple(full for full, _ in decided))
        accumulated.append(tuple(acc for _, acc in decided))
    if denoiser.streamed is not None:
        out, residuals = streamed_tea_prediction(predict, denoiser, tuple(computes), state.residuals,
                                                          latents, timestep, cond, knobs)
    else:
        out, residuals = _tea_prediction(predict, denoiser.dit, tuple(computes), denoiser.params, state.residuals,
                                         latents, timestep, cond, knobs)
    new = TeaState(state.step + 1, tuple(accumulated), tuple(current for current, _ in measured), residuals,
                   state.first_block)
    return out, new, np.asarray(computes[0]), changes[0]


# --- TeaCache on a streamed denoiser (`--offload-chunk`) ---------------------------------------------------


def first_block_reads(denoiser: Any, name: str, per_row: bool, predict: Callable, latents, timestep, cond,
                      knobs) -> FirstBlockReads:
    """Block 0's leaves the measurement of modulated input `name` reads (its jaxpr, dead code eliminated),
    copied once from the first chunk in host memory to the devices; the rest of the blocks stay there."""
    from jax.interpreters import partial_eval

    everything = _layout(denoiser, (True,) * len(jax.tree.leaves(denoiser.host_blocks[block_groups(
        denoiser.dit)[0].name].chunks[0])))

    def measured(*leaves):
        params = _one_block_params(everything, denoiser.params, leaves)
        return _modulated_changes(predict, denoiser.dit, name, per_row, params, (), latents, timestep, cond, knobs)

    closed = jax.make_jaxpr(measured)(*everything[0][2])
    _, reads = partial_eval.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    layout = _layout(denoiser, tuple(reads))
    return FirstBlockReads(layout, _fetch_block0_leaves(denoiser, layout[0]))


def _fetch_block0_leaves(denoiser: Any, first: tuple) -> tuple:
    """The read leaves of block 0, each fetched as the first chunk's leaf is placed and cut to block 0
    on the devices (the chunk's other blocks of that leaf are dropped at once)."""
    name, _, _, mask = first
    host = jax.tree.leaves(denoiser.host_blocks[name].chunks[0])
    shardings = denoiser.streamed.device_shardings.get(name)
    targets = jax.tree.leaves(shardings) if shardings is not None else [
        jax.sharding.SingleDeviceSharding(jax.local_devices()[0], memory_kind="device")] * len(host)
    return tuple(jax.device_put(leaf, target)[:1] for leaf, target, read in zip(host, targets, mask) if read)


@partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _streamed_changes(predict, dit, name, per_row, layout, params, leaves, previous, latents, timestep, cond, knobs):
    full = _one_block_params(layout, params, leaves)
    return _modulated_changes(predict, dit, name, per_row, full, previous, latents, timestep, cond, knobs)


def streamed_modulated_changes(predict, denoiser, name, per_row, reads: FirstBlockReads, previous, latents,
                               timestep, cond, knobs):
    """`_modulated_changes` for a streamed denoiser: no chunk fetched."""
    return _streamed_changes(predict, denoiser.dit, name, per_row, reads.layout, denoiser.params, reads.leaves,
                             previous, latents, timestep, cond, knobs)


def streamed_tea_prediction(predict, denoiser, computes, residuals, latents, timestep, cond, knobs):
    """`_tea_prediction` for a streamed denoiser: a call whose rows all skip fetches no chunk."""
    def step(state, h0, run_part):
        call_computes, residual = state
        h_n, new = tea_blocks(call_computes, residual, h0, run_part, output_streams, with_streams)
        return h_n, new, None

    states = tuple(zip(computes, residuals or (None,) * len(computes)))
    out, made = streamed_split_prediction(predict, denoiser, step, states, latents, timestep, cond, knobs)
    return out, tuple(new for new, _ in made)
