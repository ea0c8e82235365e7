"""EasyCache applied to a denoise pass, as ComfyUI's EasyCache node takes it, on the whole DiT call.

The DiT's input `x` (its first output-channels) and output are compared between steps on the prompt
branch (batch row 0 of a call, spatially subsampled by 8 as ComfyUI does); the steps between the
`start_percent` and `end_percent` sigmas take the rule of `step_cache_rules` (the cumulative
approximate output change against `reuse_threshold`); a skipped step returns, per call and batch
row, its input plus the cached output-minus-input of the last full step. Steps before
`start_percent` run and keep the cached difference only; from `end_percent` on every step runs and
nothing is recorded. The prompt branch decides for every branch (ComfyUI's first cond). Statistics
are taken as ComfyUI takes them when the reference pipeline calls the DiT once per branch (the
output's mean magnitude over the prompt branch's output).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.distributed import to_host
from vidax.zoo.step_cache_rules import EasyCacheConfig, EasyState, easycache_after_full, easycache_decide, \
    easycache_phase

SUBSAMPLE = 8  # ComfyUI's EasyCache node: every 8th position of the last two axes


@dataclasses.dataclass(frozen=True)
class EasyCacheRun:
    """The node's knobs and the flow shift its percents are mapped to sigmas with."""

    config: EasyCacheConfig
    shift: float


@dataclasses.dataclass
class EasyTrack:
    """The pass's EasyCache values: the rule's state, the prompt branch's last full input and output
    (subsampled), and per DiT call the cached output minus input."""

    rule: EasyState = dataclasses.field(default_factory=EasyState)
    active: bool = False  # ComfyUI's first cond is set at the first step inside the window
    x_prev: Any = None
    out_prev: Any = None
    diffs: tuple = ()
    # the last full active step's (output change or NaN, output mean |.|), read with the next decision
    pending: Any = None
    pending_input_change: float | None = None
    last_input_change: float | None = None


def _prompt_sub(x: jax.Array) -> jax.Array:
    return x[:1, ..., ::SUBSAMPLE, ::SUBSAMPLE].astype(jnp.float32)


@partial(jax.jit, static_argnums=(0,))
def _dit_inputs(predict, latents, timestep, cond, knobs):
    """Each DiT call's first input (the DiT does not run)."""
    seen = []

    def run(*inputs):
        seen.append(inputs[0])
        return jnp.zeros_like(inputs[0])

    predict(run, latents, timestep, cond, knobs)
    return tuple(seen)


@partial(jax.jit, static_argnums=(0,))
def _from_diffs(predict, diffs, latents, timestep, cond, knobs):
    """`predict` with call i's DiT output its input's first channels plus `diffs[i]`."""
    calls = iter(diffs)

    def run(*inputs):
        diff = next(calls)
        return (inputs[0][:, :diff.shape[1]] + diff).astype(diff.dtype)

    return predict(run, latents, timestep, cond, knobs)


def _mean_abs_change(a, b) -> jax.Array:
    return jnp.mean(jnp.abs(a - b))


def read_scalars(values: jax.Array) -> np.ndarray:
    """The step's one device-to-host transfer: the few statistics its decision needs, fused in one vector."""
    return to_host(values)


def _host(value) -> float | None:
    return None if np.isnan(value) else float(value)


def _decide(config: EasyCacheConfig, track: EasyTrack, input_change: jax.Array) -> bool:
    """Whether an active step reuses the cache: the last full step's output statistics (kept on the device
    until now) and this step's input change, read in one transfer, update the rule and decide."""
    pending = () if track.pending is None else (track.pending,)
    values = read_scalars(jnp.concatenate((jnp.reshape(input_change, (1,)).astype(jnp.float32),) + pending))
    if track.pending is not None:
        output_change, norm = _host(values[1]), float(values[2])
        track.rule = easycache_after_full(track.rule, track.pending_input_change, output_change, norm)
        track.pending = None
    track.last_input_change = float(values[0])
    skip, track.rule = easycache_decide(config, track.rule, track.last_input_change)
    return skip


def easy_step(run: EasyCacheRun, track: EasyTrack, denoiser: Any, predict: Callable, sigma: float,
              latents, timestep, cond, knobs):
    """One step: (prediction, whether the DiT ran). At most one device-to-host read (`read_scalars`), on
    an active step after the first: the full step's own statistics wait on the device for the next one."""
    from vidax.zoo.step_cache import predict_recording

    phase = easycache_phase(run.config, sigma, run.shift)
    if phase == "past_end":
        return denoiser.predict(predict, latents, timestep, cond, knobs), True
    inputs = _dit_inputs(predict, latents, timestep, cond, knobs)
    input_change = None
    if phase == "active":
        track.active = True
        skip = False
        if track.x_prev is not None:
            channels = track.diffs[0].shape[1]
            skip = _decide(run.config, track, _mean_abs_change(_prompt_sub(inputs[0][:, :channels]), track.x_prev))
            input_change = track.last_input_change
        else:
            skip, track.rule = easycache_decide(run.config, track.rule, None)
        if skip and len(track.diffs) == len(inputs):
            return _from_diffs(predict, track.diffs, latents, timestep, cond, knobs), False
    out, outputs = predict_recording(denoiser, predict, latents, timestep, cond, knobs)
    channels = outputs[0].shape[1]
    track.diffs = tuple(o - i[:, :channels].astype(o.dtype) for o, i in zip(outputs, inputs))
    if track.active:
        output = _prompt_sub(outputs[0])
        output_change = jnp.nan if track.out_prev is None else _mean_abs_change(output, track.out_prev)
        norm = jnp.mean(jnp.abs(outputs[0][:1].astype(jnp.float32)))
        track.pending = jnp.stack([jnp.float32(output_change), norm.astype(jnp.float32)])
        track.pending_input_change = input_change
        track.x_prev, track.out_prev = _prompt_sub(inputs[0][:, :channels]), output
    return out, True
