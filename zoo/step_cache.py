"""Step caches: steps that skip the DiT, decided as diffusers' cache hooks decide them.

A cache method is a small frozen config plus pure functions: whether a step runs the full DiT
(`taylorseer_computes`), and how its state changes (`taylor_update`) and stands in for the DiT when
it does not (`taylor_extrapolate`). `StepCache` applies one to a `denoise` pass: it keeps the state
of each DiT call of a step and takes each step's decision before the DiT runs.

    cache = step_cache_for(options, branches)          # None without --cache
    out = cache.predict(denoiser, predict, expert, step, latents, t, cond, knobs)

TaylorSeer (diffusers `TaylorSeerCacheConfig(use_lite_mode=True, taylor_factors_dtype=float32)`):
the whole DiT output of each call is extrapolated from finite differences of the outputs of the
steps that ran. Its decision is a function of the step index alone (no device-to-host value), so a
batched CFG pair (Wan's two `cache_context` calls run by vidax as one batch) decides alike for both
branches, and the pair's stacked state is the two branches' states side by side. A change of
denoiser (Wan2.2 A14B's expert switch) starts from a fresh state, as the second expert's own hooks do.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp

from vidax.zoo.dit import forward
from vidax.zoo.pipeline import PipelineError

METHODS = ("taylorseer",)
# GenerateOptions fields of the cache knobs -> the method that reads each (for one-line misuse errors)
KNOBS = {"cache_interval": "taylorseer", "cache_warmup": "taylorseer", "cache_order": "taylorseer",
         "cache_stop": "taylorseer"}


# --- TaylorSeer: the decision and the state, as pure functions --------------------------------


@dataclasses.dataclass(frozen=True)
class TaylorSeerConfig:
    """diffusers `TaylorSeerCacheConfig` fields (vidax flags: --cache-interval, --cache-warmup,
    --cache-order, --cache-stop); the defaults are diffusers'."""

    cache_interval: int = 5
    disable_cache_before_step: int = 3
    disable_cache_after_step: int | None = None
    max_order: int = 1


def taylorseer_computes(config: TaylorSeerConfig, step: int) -> bool:
    """Whether call `step` (0-based, counted per denoiser and branch) runs the full DiT: every step
    before `disable_cache_before_step`, then one step in `cache_interval` (the first one after
    warm-up + 1, as diffusers counts), and every step from `disable_cache_after_step` on."""
    before, stop = config.disable_cache_before_step, config.disable_cache_after_step
    warmup = step < before
    refresh = (step - before - 1) % config.cache_interval == 0
    cooldown = stop is not None and step >= stop
    return warmup or refresh or cooldown


def taylor_update(factors: tuple[jax.Array, ...] | None, features: jax.Array, delta_step: int,
                  max_order: int) -> tuple[jax.Array, ...]:
    """New Taylor factors (order 0 = `features`, in float32) from the previous ones: divided
    differences over `delta_step` steps, up to `max_order` (fewer while the history is short)."""
    new = [features.astype(jnp.float32)]
    previous = () if factors is None else factors
    for order in range(min(max_order, len(previous))):
        if previous[order].shape != new[order].shape:
            break
        new.append((new[order] - previous[order]) / delta_step)
    return tuple(new)


def taylor_extrapolate(factors: tuple[jax.Array, ...], offset: int) -> jax.Array:
    """The Taylor series of `factors` `offset` steps after the last update."""
    out = jnp.zeros_like(factors[0])
    for order, factor in enumerate(factors):
        out = out + factor * (offset**order / math.factorial(order))
    return out


@dataclasses.dataclass(frozen=True)
class TaylorState:
    """One denoiser's TaylorSeer state: calls seen, the step of the last full run, and per DiT call
    of a step its factors and output dtype."""

    calls: int = 0
    last_update: int | None = None
    factors: tuple[tuple[jax.Array, ...], ...] = ()
    dtypes: tuple[Any, ...] = ()


def taylor_state_after(config: TaylorSeerConfig, state: TaylorState, outputs: tuple[jax.Array, ...]) -> TaylorState:
    """The state after a step that ran the full DiT and made `outputs` (one per DiT call)."""
    step = state.calls
    delta = None if state.last_update is None else step - state.last_update
    factors = tuple(taylor_update(state.factors[i] if delta and i < len(state.factors) else None, out, delta, config.max_order)
                    for i, out in enumerate(outputs))
    return TaylorState(step + 1, step, factors, tuple(out.dtype for out in outputs))


# --- running the denoiser with a recorded or replayed DiT ------------------------------------


def _recording(predict: Callable, run: Callable, latents, timestep, cond, knobs):
    """`predict` with `run` (the DiT), and every DiT output it made, in call order."""
    outputs = []

    def recorded(*inputs):
        out = run(*inputs)
        outputs.append(out)
        return out

    return predict(recorded, latents, timestep, cond, knobs), tuple(outputs)


@partial(jax.jit, static_argnums=(0, 1))
def _recorded_resident(predict, dit, params, latents, timestep, cond, knobs):
    return _recording(predict, partial(forward, dit, params), latents, timestep, cond, knobs)


@partial(jax.jit, static_argnums=(0,))
def _replayed(predict, values, latents, timestep, cond, knobs):
    """`predict` with the DiT's outputs given: its i-th call returns `values[i]` (no weights read)."""
    calls = iter(values)
    return predict(lambda *inputs: next(calls), latents, timestep, cond, knobs)


def predict_recording(denoiser: Any, predict: Callable, latents, timestep, cond, knobs):
    """A `LoadedDiT`'s prediction and its DiT outputs (resident: one compiled unit; streamed: host loop)."""
    if denoiser.streamed is None:
        return _recorded_resident(predict, denoiser.dit, denoiser.params, latents, timestep, cond, knobs)
    run = partial(denoiser.streamed, denoiser.params, denoiser.host_blocks)
    return _recording(predict, run, latents, timestep, cond, knobs)


# --- one denoise pass's cache ------------------------------------------------------------------


class StepCache:
    """A cache method applied to one `denoise` pass: the state of the current denoiser, reset when
    the step's denoiser changes, and a log of which steps ran the full DiT per CFG branch.

    Args:
      config: the method's config (`TaylorSeerConfig`).
      branches: the diffusers `cache_context` names of a step's DiT calls (Wan guided: "cond",
        "uncond"; a batched pair: "cond_uncond"), for the log.
    """

    def __init__(self, config: TaylorSeerConfig, branches: tuple[str, ...]):
        self.config, self.branches = config, branches
        self.expert: int | None = None
        self.state = TaylorState()
        self.log: list[dict] = []

    def predict(self, denoiser: Any, predict: Callable, expert: int, step: int, latents, timestep, cond, knobs):
        if expert != self.expert:  # a new denoiser starts from nothing (its own hooks in diffusers)
            self.expert, self.state = expert, TaylorState()
        state = self.state
        full = taylorseer_computes(self.config, state.calls)
        if full:
            out, outputs = predict_recording(denoiser, predict, latents, timestep, cond, knobs)
            self.state = taylor_state_after(self.config, state, outputs)
        else:
            offset = state.calls - state.last_update
            values = tuple(taylor_extrapolate(f, offset).astype(d) for f, d in zip(state.factors, state.dtypes))
            out = _replayed(predict, values, latents, timestep, cond, knobs)
            self.state = dataclasses.replace(state, calls=state.calls + 1)
        self.log.append({"step": step, "expert": expert, "full_dit": {b: full for b in self.branches}})
        return out


def config_from_options(options: Any) -> TaylorSeerConfig | None:
    """The cache config of a request (None without --cache); PipelineError for a misuse, one line."""
    method = options.cache
    given = {field for field in KNOBS if getattr(options, field, None) is not None}
    if method is None:
        if given:
            raise PipelineError(f"{', '.join(_flag(f) for f in sorted(given))} need --cache (one of {', '.join(METHODS)})")
        return None
    if method not in METHODS:
        raise PipelineError(f"unknown --cache {method!r} (choose from {', '.join(METHODS)})")
    defaults = TaylorSeerConfig()
    config = TaylorSeerConfig(
        cache_interval=_pick(options.cache_interval, defaults.cache_interval),
        disable_cache_before_step=_pick(options.cache_warmup, defaults.disable_cache_before_step),
        disable_cache_after_step=options.cache_stop,
        max_order=_pick(options.cache_order, defaults.max_order))
    _check_taylorseer(config)
    return config


def _check_taylorseer(config: TaylorSeerConfig) -> None:
    if config.cache_interval < 1:
        raise PipelineError(f"--cache-interval must be at least 1, got {config.cache_interval}")
    if config.disable_cache_before_step < 1:  # step 0 would extrapolate from nothing (diffusers raises)
        raise PipelineError(f"--cache-warmup must be at least 1 step, got {config.disable_cache_before_step}")
    if config.max_order < 0:
        raise PipelineError(f"--cache-order must be 0 or more, got {config.max_order}")
    if config.disable_cache_after_step is not None and config.disable_cache_after_step < 0:
        raise PipelineError(f"--cache-stop must be 0 or more, got {config.disable_cache_after_step}")


def step_cache_for(options: Any, branches: tuple[str, ...]) -> StepCache | None:
    """A fresh cache for one denoise pass (None without --cache)."""
    config = config_from_options(options)
    return None if config is None else StepCache(config, branches)


def _pick(value, default):
    return default if value is None else value


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")
