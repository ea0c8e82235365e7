"""EasyCache applied to a denoise pass, as ComfyUI's EasyCache node takes it, on the whole DiT call.

The DiT's input `x` (the part its output replaces: the noisy latents without concatenated conditioning
channels; LTX-2's video and audio token streams) and output are compared between steps on the prompt
branch (batch row 0 of a call, every 8th position of the last two axes, as ComfyUI subsamples); the
steps between the `start_percent` and `end_percent` points take the rule of `rules.py` (the
cumulative approximate output change against `reuse_threshold`); a skipped step returns, per call and
batch row, its input plus the cached output-minus-input of the last full step (each output stream its
own). Steps before `start_percent` run and keep the cached difference only; from `end_percent` on every
step runs and nothing is recorded. The prompt branch decides for every branch (ComfyUI's first cond),
whether the family batches the CFG pair in one DiT call or not. Statistics are taken as ComfyUI takes
them when the reference pipeline calls the DiT once per branch (the output's mean magnitude over the
prompt branch's first output stream).

The percents are placed on each family's noise levels as ComfyUI's model sampling of that model places
them (`percent_scale`, `rules.PercentScale`), at the shift the pass samples with.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.dit import forward
from vidax.zoo.compute.distributed import to_host
from vidax.zoo.errors import PipelineError
from vidax.zoo.step_caches.rules import EasyCacheConfig, EasyState, PercentScale, easycache_after_full, \
    easycache_decide, easycache_phase, step_point

SUBSAMPLE = 8  # ComfyUI's EasyCache node: every 8th position of the last two axes
JOINT_STREAMS = ("video", "audio")  # a DiT returning a tuple (LTX-2): the input fields its outputs replace


# --- where the percents fall: per family, as ComfyUI's model sampling of that model -------------


def _flow_shift(family: Any, s: Any) -> PercentScale:
    """The shift the family's generic stepper samples with: the dynamic one (`mu` from the token count)
    where the scheduler shifts dynamically, else `--shift` or the folder's."""
    from vidax.zoo.samplers import calculate_shift

    config = family.scheduler_config()
    if config.get("use_dynamic_shifting"):
        mu = calculate_shift(family.tokens(s), base_seq_len=config.get("base_image_seq_len", 256),
                             max_seq_len=config.get("max_image_seq_len", 4096),
                             base_shift=config.get("base_shift", 0.5), max_shift=config.get("max_shift", 1.15))
        linear = config.get("time_shift_type", "exponential") == "linear"
        return PercentScale("flow", float(mu) if linear else math.exp(mu), train_steps=_train_steps(config))
    shift = s.shift if s.shift is not None else config.get("flow_shift", config.get("shift", 1.0))
    return PercentScale("flow", float(shift), train_steps=_train_steps(config))


def _ltx2_shift(family: Any, s: Any) -> PercentScale:
    """LTX-2: `--shift` (static), else the dynamic shift of its token count with LTX2Pipeline's fallbacks
    (the family's `shift_mu`: no family module is imported here)."""
    if s.shift is not None:
        return PercentScale("flow", float(s.shift))
    return PercentScale("flow", math.exp(family.shift_mu(s)))


def _cosmos_rflow(family: Any, s: Any) -> PercentScale:
    """Cosmos-Predict2.5: the EDM sigma range of its scheduler (ComfyUI's defaults where it has none)."""
    config = family.scheduler_config()
    return PercentScale("rflow_edm", sigma_min=float(config.get("sigma_min", 0.002)),
                        sigma_max=float(config.get("sigma_max", 80.0)), train_steps=_train_steps(config))


def _discrete(family: Any, s: Any) -> PercentScale:
    """CogVideoX: the DDPM timestep table of its scheduler."""
    return PercentScale("discrete", train_steps=_train_steps(family.scheduler_config()))


def _train_steps(config: dict) -> int:
    return int(config.get("num_train_timesteps", 1000))


# the family's package -> its percent scale
PERCENT_SCALES = {"wan": _flow_shift, "hunyuan_video": _flow_shift, "hunyuan_video15": _flow_shift,
                  "cosmos3": _flow_shift, "ltx_video": _flow_shift, "ltx2": _ltx2_shift, "cosmos": _cosmos_rflow,
                  "cogvideox": _discrete}


def percent_scale(family: Any, s: Any) -> PercentScale:
    """Where `family`'s steps under settings `s` fall against EasyCache's percents; PipelineError for a
    family without one."""
    package = type(family).__module__.split(".")[-2]
    if package not in PERCENT_SCALES:
        raise PipelineError(f"--cache easycache: no percent-to-sigma mapping for {family.name} "
                            f"(families: {', '.join(sorted(PERCENT_SCALES))})")
    return PERCENT_SCALES[package](family, s)


# --- one pass's state and step ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EasyCacheRun:
    """The node's knobs and where its percents fall on the family's steps."""

    config: EasyCacheConfig
    scale: PercentScale


@dataclasses.dataclass
class EasyTrack:
    """The pass's EasyCache values: the rule's state, the prompt branch's last full input and output
    (subsampled), and per DiT call the cached output minus input (a tuple per output stream for LTX-2)."""

    rule: EasyState = dataclasses.field(default_factory=EasyState)
    active: bool = False  # ComfyUI's first cond is set at the first step inside the window
    x_prev: Any = None
    out_prev: Any = None
    diffs: tuple = ()
    # the last full active step's (output change or NaN, output mean |.|), read with the next decision
    pending: Any = None
    pending_input_change: float | None = None
    last_input_change: float | None = None


def _cut(x: jax.Array, out: jax.Array) -> jax.Array:
    """`x`'s leading part of `out`'s shape (the latents without Wan's / CogVideoX's conditioning channels)."""
    return x[tuple(slice(0, n) for n in out.shape)].astype(out.dtype)


def input_like(inputs: tuple, output: Any) -> Any:
    """The part of a DiT call's inputs that its output replaces (ComfyUI's `x`), in the output's structure:
    LTX-2's (video, audio) token streams of its `DiTInputs`; else the first input array covering the
    output's shape (Cosmos3 passes its text ids first), cut to it."""
    if isinstance(output, (tuple, list)):
        return tuple(_cut(getattr(inputs[0], name), out) for name, out in zip(JOINT_STREAMS, output))
    covers = lambda x: x.ndim == output.ndim and all(a >= b for a, b in zip(x.shape, output.shape))  # noqa: E731
    return _cut(next(x for x in inputs if isinstance(x, jax.Array) and covers(x)), output)


def _lead(tree: Any) -> jax.Array:
    """The first (video) stream of a call's output or matching input."""
    return jax.tree.leaves(tree)[0]


def _prompt_sub(x: jax.Array) -> jax.Array:
    return x[:1, ..., ::SUBSAMPLE, ::SUBSAMPLE].astype(jnp.float32)


def _zeros(like: Any) -> Any:
    return jax.tree.map(lambda leaf: jnp.zeros(leaf.shape, leaf.dtype), like)


@partial(jax.jit, static_argnums=(0,))
def _input_change(predict, diffs, x_prev, latents, timestep, cond, knobs):
    """The prompt branch's mean input change since the last full step, and each call's input part (the
    DiT does not run: each call returns zeros shaped as its cached difference)."""
    seen, calls = [], iter(diffs)

    def run(*inputs):
        diff = next(calls)
        seen.append(input_like(inputs, diff))
        return _zeros(diff)

    predict(run, latents, timestep, cond, knobs)
    return jnp.mean(jnp.abs(_prompt_sub(_lead(seen[0])) - x_prev))


@partial(jax.jit, static_argnums=(0,))
def _from_diffs(predict, diffs, latents, timestep, cond, knobs):
    """`predict` with call i's DiT output its input part plus `diffs[i]` (every output stream)."""
    calls = iter(diffs)

    def run(*inputs):
        diff = next(calls)
        return jax.tree.map(jnp.add, input_like(inputs, diff), diff)

    return predict(run, latents, timestep, cond, knobs)


def _full_recording(predict, run, latents, timestep, cond, knobs):
    """`predict` with the DiT, and per call its output minus its input part, and the prompt branch's
    (subsampled input, subsampled output, output mean |.|) of the first call."""
    made = []

    def recorded(*inputs):
        out = run(*inputs)
        made.append((input_like(inputs, out), out))
        return out

    prediction = predict(recorded, latents, timestep, cond, knobs)
    diffs = tuple(jax.tree.map(jnp.subtract, out, part) for part, out in made)
    part, out = (_lead(tree) for tree in made[0])
    norm = jnp.mean(jnp.abs(out[:1].astype(jnp.float32)))
    return prediction, diffs, (_prompt_sub(part), _prompt_sub(out), norm)


@partial(jax.jit, static_argnums=(0, 1))
def _full_resident(predict, dit, params, latents, timestep, cond, knobs):
    return _full_recording(predict, partial(forward, dit, params), latents, timestep, cond, knobs)


def _full(predict, denoiser, latents, timestep, cond, knobs):
    """`_full_recording` of a `LoadedDiT`: one compiled unit when resident, the host loop over streamed
    chunks with `--offload-chunk` (a skipped step never gets here, so it streams no weights)."""
    if denoiser.streamed is None:
        return _full_resident(predict, denoiser.dit, denoiser.params, latents, timestep, cond, knobs)
    run = partial(denoiser.streamed, denoiser.params, denoiser.host_blocks)
    return _full_recording(predict, run, latents, timestep, cond, knobs)


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


def easy_step(run: EasyCacheRun, track: EasyTrack, denoiser: Any, predict: Callable, timestep_host: float,
              latents, timestep, cond, knobs):
    """One step: (prediction, whether the DiT ran). At most one device-to-host read (`read_scalars`), on
    an active step after the first: the full step's own statistics wait on the device for the next one."""
    phase = easycache_phase(run.config, step_point(run.scale, timestep_host), run.scale)
    if phase == "past_end":
        return denoiser.predict(predict, latents, timestep, cond, knobs), True
    input_change = None
    if phase == "active":
        track.active = True
        skip = False
        if track.x_prev is not None:
            change = _input_change(predict, track.diffs, track.x_prev, latents, timestep, cond, knobs)
            skip = _decide(run.config, track, change)
            input_change = track.last_input_change
        else:
            skip, track.rule = easycache_decide(run.config, track.rule, None)
        if skip and track.diffs:
            return _from_diffs(predict, track.diffs, latents, timestep, cond, knobs), False
    out, track.diffs, (x_sub, out_sub, norm) = _full(predict, denoiser, latents, timestep, cond, knobs)
    if track.active:
        output_change = jnp.nan if track.out_prev is None else jnp.mean(jnp.abs(out_sub - track.out_prev))
        track.pending = jnp.stack([jnp.float32(output_change), norm.astype(jnp.float32)])
        track.pending_input_change = input_change
        track.x_prev, track.out_prev = x_sub, out_sub
    return out, True
