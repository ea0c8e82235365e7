"""Step caches: steps that skip DiT work, decided as diffusers' cache hooks decide them.

Each method is a small frozen config plus pure functions of its state; `StepCache` applies one to a
`denoise` pass (`vidax.zoo.generator.denoise`), keeping one state per DiT call of a step and a log of which
steps ran the full DiT per CFG branch (the sidecar's `step_cache_steps`).

- TaylorSeer (diffusers `TaylorSeerCacheConfig(use_lite_mode=True, taylor_factors_dtype=float32)`):
  the whole DiT output of a call is extrapolated from finite differences of the outputs of the steps
  that ran. The decision is a function of the step index alone.
- First-block cache (`FirstBlockCacheConfig`): the first block always runs; the relative mean change
  of its residual against the last full step's decides whether the remaining blocks run or their
  cached residual is added. The decision is taken on the device (`lax.cond`): no host value; with
  blocks streamed from host memory (`--offload-chunk`, `vidax.zoo.step_caches.streamed`) the flags come to
  the host, which fetches the remaining blocks only for a step that runs them.
- MagCache (`MagCacheConfig`): accumulated magnitude-ratio error of given per-step ratios decides,
  on the host and ahead of the DiT, whether all blocks run or the last residual is added; no device
  value at all. `calibrate` runs every step and records the ratios.

Decisions are taken as the family's diffusers pipeline takes them: where it calls the DiT once per
CFG branch (Wan's `cache_context("cond")` / `("uncond")`) each branch (a row of vidax's batched pair)
has its own statistic and decision; where it batches both (`"cond_uncond"`) one statistic over the
pair decides for both. A change of denoiser (Wan2.2 A14B's expert switch) starts from a fresh state,
as the second expert's own hooks do.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp

import numpy as np

from vidax.zoo.parts.block_split import forward_split, recording_calls, splittable
from vidax.zoo.parts.dit import forward
from vidax.zoo.compute.distributed import to_host
from vidax.zoo.errors import PipelineError
from vidax.zoo.step_caches.streams import output_streams, video_stream, with_streams

BATCHED_PAIR = "cond_uncond"  # the cache context of a reference that batches the CFG pair in one DiT call
METHODS = ("taylorseer", "first-block", "magcache", "teacache", "easycache")
# GenerateOptions fields of the cache knobs -> the methods that read each (for one-line misuse errors)
KNOBS = {"cache_interval": ("taylorseer",), "cache_warmup": ("taylorseer",), "cache_order": ("taylorseer",),
         "cache_stop": ("taylorseer",), "cache_threshold": ("first-block", "magcache", "teacache", "easycache"),
         "cache_max_skip": ("magcache",), "cache_retention": ("magcache",), "mag_ratios": ("magcache",),
         "cache_calibrate": ("magcache",), "cache_coefficients": ("teacache",),
         "cache_use_ret_steps": ("teacache",), "cache_start_percent": ("easycache",),
         "cache_end_percent": ("easycache",)}


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
    """One denoiser's TaylorSeer state: calls seen, the step of the last full run, and per output array
    of a step (every DiT call's outputs flattened: LTX-2's DiT returns video and audio) its factors and
    dtype, with `structure` the tree that puts them back into per-call outputs."""

    calls: int = 0
    last_update: int | None = None
    factors: tuple[tuple[jax.Array, ...], ...] = ()
    dtypes: tuple[Any, ...] = ()
    structure: Any = None


def taylor_state_after(config: TaylorSeerConfig, state: TaylorState, outputs: tuple[jax.Array, ...]) -> TaylorState:
    """The state after a step that ran the full DiT and made `outputs` (one per DiT call, each an array
    or a tuple of them): every output array is extrapolated on its own, under the one decision."""
    step = state.calls
    delta = None if state.last_update is None else step - state.last_update
    leaves, structure = jax.tree.flatten(outputs)
    previous = lambda i: state.factors[i] if delta and i < len(state.factors) else None  # noqa: E731
    factors = tuple(taylor_update(previous(i), out, delta, config.max_order) for i, out in enumerate(leaves))
    return TaylorState(step + 1, step, factors, tuple(out.dtype for out in leaves), structure)


def taylor_outputs(state: TaylorState) -> tuple:
    """Each DiT call's outputs extrapolated to the current step (`state.calls`)."""
    offset = state.calls - state.last_update
    leaves = [taylor_extrapolate(f, offset).astype(d) for f, d in zip(state.factors, state.dtypes)]
    return jax.tree.unflatten(state.structure, leaves)


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


# --- first-block cache: the statistic and one step inside the DiT ---------------------------


@dataclasses.dataclass(frozen=True)
class FirstBlockCacheConfig:
    """diffusers `FirstBlockCacheConfig` (vidax flag: --cache-threshold)."""

    threshold: float = 0.05


def first_block_change(residual: jax.Array, previous: jax.Array, per_row: bool) -> jax.Array:
    """mean |residual - previous| / mean |previous| of the first block's residuals: `[rows]` per batch
    row (one per CFG branch) or `[1]` over the whole batch."""
    axes = tuple(range(1, residual.ndim)) if per_row else None
    change = jnp.mean(jnp.abs(residual - previous), axis=axes) / jnp.mean(jnp.abs(previous), axis=axes)
    return jnp.reshape(change, (-1,))


def _rows(flags: jax.Array, leaf: jax.Array) -> jax.Array:
    """Row flags `[rows]` (or `[1]`) shaped to broadcast over a `[B, ...]` leaf."""
    return jnp.reshape(flags, (-1,) + (1,) * (leaf.ndim - 1))


@dataclasses.dataclass(frozen=True)
class FirstBlockStep:
    """One call's first-block-cache step inside the DiT (static: one compiled unit per value)."""

    threshold: float
    per_row: bool
    on_host: bool = False  # streamed blocks: the flags come to the host, the rest is fetched only to run

    def __call__(self, state, h0, run_part):
        h1 = run_part(h0, "first")
        residual = (video_stream(h1) - video_stream(h0)).astype(jnp.float32)
        rows = residual.shape[0] if self.per_row else 1
        if state is None:  # nothing cached yet: the whole DiT
            h_n = run_part(h1, "rest")
            return h_n, (residual, jax.tree.map(jnp.subtract, h_n, h1)), jnp.ones((rows,), bool)
        previous, tail = state
        full = first_block_change(residual, previous, self.per_row) > self.threshold
        cached = jax.tree.map(jnp.add, h1, tail)
        if self.on_host:  # every process reads the same flags (a collective when they are sharded)
            rest = run_part(h1, "rest") if bool(np.any(to_host(full))) else cached
        else:
            rest = jax.lax.cond(jnp.any(full), lambda h: run_part(h, "rest"), lambda h: cached, h1)
        # per row; a leaf without batch rows (LTX-2's block counter) is the same on both sides
        pick = lambda a, b: jnp.where(_rows(full, a), a, b) if a.ndim else a  # noqa: E731
        h_n = jax.tree.map(pick, rest, cached)
        new_tail = jax.tree.map(pick, jax.tree.map(jnp.subtract, rest, h1), tail)
        return h_n, (pick(residual, previous), new_tail), full


# --- MagCache: the decision on the host, one step inside the DiT ------------------------------


@dataclasses.dataclass(frozen=True)
class MagCacheConfig:
    """diffusers `MagCacheConfig` (vidax flags: --cache-threshold, --cache-max-skip, --cache-retention,
    --mag-ratios, --cache-calibrate); `num_inference_steps` is the pass's step count. `shipped_for`:
    without `mag_ratios`, the model whose published ratios (`magcache.toml`) apply, per DiT call."""

    threshold: float = 0.06
    max_skip_steps: int = 3
    retention_ratio: float = 0.2
    mag_ratios: tuple[float, ...] | None = None
    calibrate: bool = False
    shipped_for: str | None = None


def nearest_interp(ratios: np.ndarray, length: int) -> np.ndarray:
    """`ratios` resampled to `length` steps by nearest index (round half to even, float32), as diffusers."""
    ratios = np.asarray(ratios, np.float32)
    if length == 1:
        return ratios[-1:]
    scale = np.float32((len(ratios) - 1) / (length - 1))
    return ratios[np.round(np.arange(length, dtype=np.float32) * scale).astype(np.int64)]


@dataclasses.dataclass(frozen=True)
class MagState:
    """One denoiser's MagCache accumulators (float32, as the reference keeps them) and whether a
    residual is cached."""

    step: int = 0
    ratio: np.float32 = np.float32(1.0)
    error: np.float32 = np.float32(0.0)
    skipped: int = 0
    cached: bool = False


def magcache_decide(config: MagCacheConfig, ratios: np.ndarray | None, steps: int,
                    state: MagState) -> tuple[bool, MagState]:
    """(whether this step runs every block, the accumulators after the decision)."""
    if config.calibrate or state.step < int(config.retention_ratio * steps + 0.5):
        return True, state
    scale = ratios[state.step] if state.step < len(ratios) else np.float32(1.0)
    ratio = np.float32(state.ratio * scale)
    error = np.float32(state.error + np.abs(np.float32(1.0) - ratio))
    skipped = state.skipped + 1
    if state.cached and error <= config.threshold and skipped <= config.max_skip_steps:
        return False, dataclasses.replace(state, ratio=ratio, error=error, skipped=skipped)
    return True, dataclasses.replace(state, ratio=np.float32(1.0), error=np.float32(0.0), skipped=0)


def decision_ratios(config: MagCacheConfig, rows: tuple[str, ...], steps: int,
                    height: int | None = None) -> tuple[np.ndarray | None, ...]:
    """Per decision row (a DiT call of a step: `rows`, its cache context names) its ratios over `steps`
    steps: the given ones for every row, as diffusers applies one list to each context; or each call's
    own published list, nearest-interpolated on its own as the reference does (None: calibrating)."""
    from vidax.zoo.step_caches.rules import branch_ratios, magcache_ratio_set

    if config.mag_ratios is not None:
        return (nearest_interp(np.asarray(config.mag_ratios), steps),) * len(rows)
    if config.shipped_for is None:
        return (None,) * len(rows)
    published = magcache_ratio_set(config.shipped_for, height)
    try:
        return tuple(nearest_interp(np.asarray(branch_ratios(published, row)), steps) for row in rows)
    except KeyError as err:
        raise PipelineError(f"--cache magcache: {err.args[0]} (pass --mag-ratios FILE.npy)") from None


def magcache_advance(state: MagState, computed: bool, steps: int) -> MagState:
    """The state after a step: the next index; a full pass of `steps` starts over."""
    if state.step + 1 >= steps:
        return MagState()
    return dataclasses.replace(state, step=state.step + 1, cached=state.cached or computed)


def magnitude_ratio(residual: jax.Array, previous: jax.Array, per_row: bool) -> jax.Array:
    """Calibration: mean over tokens of |residual| / (|previous| + 1e-8), norms over features."""
    ratio = jnp.linalg.norm(residual, axis=-1) / (jnp.linalg.norm(previous, axis=-1) + 1e-8)
    axes = tuple(range(1, ratio.ndim)) if per_row else None
    return jnp.reshape(jnp.mean(ratio, axis=axes), (-1,))


@dataclasses.dataclass(frozen=True)
class MagStep:
    """One call's MagCache step inside the DiT: every block (`compute`) or the input plus the last
    residual of each output stream (the video; LTX-2's audio too); other streams (text) pass through, as
    the reference's skipped blocks pass them. `compute`: per decision row (one, or one per CFG branch of
    the batch); where the rows differ the blocks run and the skipping rows take the cached residual."""

    compute: tuple[bool, ...]
    calibrate: bool
    per_row: bool

    def __call__(self, state, h0, run_part):
        streams = output_streams(h0)
        if not any(self.compute):
            return with_streams(h0, {k: v + state[k] for k, v in streams.items()}), state, jnp.zeros((1,), bool)
        h_n = run_part(h0, "all")
        residual = {k: out - streams[k] for k, out in output_streams(h_n).items()}
        if not all(self.compute):  # one branch reuses its residual while the other computes
            runs = {k: _rows(jnp.repeat(jnp.asarray(self.compute), v.shape[0] // len(self.compute)), v)
                    for k, v in streams.items()}
            outs = {k: jnp.where(runs[k], out, streams[k] + state[k]) for k, out in output_streams(h_n).items()}
            residual = {k: jnp.where(runs[k], r, state[k]) for k, r in residual.items()}
            h_n = with_streams(h_n, outs)
        if self.calibrate:  # the ratio of the video stream's residuals
            video = next(iter(residual))
            ratio = jnp.ones((1,)) if state is None else magnitude_ratio(residual[video], state[video], self.per_row)
            return h_n, residual, ratio
        return h_n, residual, jnp.ones((1,), bool)


@partial(jax.jit, static_argnums=(0, 1, 2))
def _split_prediction(predict, dit, step, params, states, latents, timestep, cond, knobs):
    """`predict` with each DiT call's blocks run by `step(state, hidden, run_part)`; returns the
    prediction and, per call, (its new state, its flags)."""
    run, made = recording_calls(partial(forward_split, dit, params), step, states)
    return predict(run, latents, timestep, cond, knobs), tuple(made)


# --- one denoise pass's cache ------------------------------------------------------------------


class StepCache:
    """A cache method applied to one `denoise` pass: the current denoiser's state (fresh when the
    step's denoiser changes) and, per step, whether the full DiT ran per CFG branch.

    Args:
      config: the method's config (`TaylorSeerConfig`, `FirstBlockCacheConfig`, `MagCacheConfig`).
      branches: the diffusers `cache_context` names of a step's DiT calls (Wan guided: "cond",
        "uncond", one per batch row; a batched pair: "cond_uncond").
      steps: the pass's step count (MagCache's `num_inference_steps`).
      calibrate_to: MagCache calibration: where the ratios are written at the pass's end.
    """

    def __init__(self, config, branches: tuple[str, ...], steps: int, calibrate_to: Any = None,
                 percents: Any = None, timesteps: Any = None, height: int | None = None):
        self.config, self.branches, self.steps, self.calibrate_to = config, branches, steps, calibrate_to
        self.percents = percents  # EasyCache: where its percents fall on the pass's steps (a PercentScale)
        self.timesteps = timesteps  # the pass's host timesteps (EasyCache's sigma without a device read)
        # one statistic per batch row (Wan's per-branch calls) unless the reference batches a pair ("cond_uncond")
        self.per_row = len(branches) > 1 and BATCHED_PAIR not in branches
        self.ratios = None  # MagCache: per decision row (`decision_ratios`), one row unless `per_row`
        if isinstance(config, MagCacheConfig):
            self.ratios = decision_ratios(config, branches if self.per_row else branches[:1], steps, height)
        self.expert: int | None = None
        self.log: list[dict] = []

    def _fresh(self):
        from vidax.zoo.step_caches.tea import TeaCacheConfig, TeaState

        from vidax.zoo.step_caches.easy import EasyTrack
        from vidax.zoo.step_caches.rules import EasyCacheConfig

        if isinstance(self.config, TeaCacheConfig):
            return TeaState()
        if isinstance(self.config, EasyCacheConfig):
            return EasyTrack()
        if isinstance(self.config, TaylorSeerConfig):
            return TaylorState()
        # inside the DiT: (MagCache accumulators per decision row, per-call states)
        return (MagState(),) * len(self.ratios or (None,)), ()

    def predict(self, denoiser: Any, predict: Callable, expert: int, step: int, latents, timestep, cond, knobs):
        if expert != self.expert:  # a new denoiser starts from nothing (its own hooks in diffusers)
            self.expert, self.state = expert, self._fresh()
        if isinstance(self.config, TaylorSeerConfig):
            out, full = self._taylorseer(denoiser, predict, latents, timestep, cond, knobs)
        elif self._name() == "easycache":
            out, full = self._easycache(denoiser, predict, step, latents, timestep, cond, knobs)
        elif self._name() == "teacache":
            from vidax.zoo.step_caches.tea import tea_step

            if BATCHED_PAIR in self.branches and len(self.branches) > 1:  # one batch, several reference statistics
                raise PipelineError(f"--cache teacache: this model's one DiT batch holds the reference's cache "
                                    f"contexts {', '.join(self.branches)}; run without STG / modality guidance")
            out, self.state, full, change = tea_step(self.config, self.state, denoiser, predict, self.per_row,
                                                     self.steps, latents, timestep, cond, knobs, step)
            self.log.append({"step": step, "expert": expert, "full_dit": full, "change": change})
            return out
        else:
            out, full = self._inside(denoiser, predict, latents, timestep, cond, knobs)
        self.log.append({"step": step, "expert": expert, "full_dit": full})
        return out

    def _easycache(self, denoiser, predict, step, latents, timestep, cond, knobs):
        from vidax.zoo.step_caches.easy import EasyCacheRun, easy_step

        if self.percents is None:
            raise PipelineError("--cache easycache places its percents on the model's noise levels: this pass "
                                "has none (use --cache taylorseer)")
        host = timestep if self.timesteps is None else self.timesteps[step]  # the host copy: no device read
        return easy_step(EasyCacheRun(self.config, self.percents), self.state, denoiser, predict,
                         float(np.float32(host)), latents, timestep, cond, knobs)

    def _taylorseer(self, denoiser, predict, latents, timestep, cond, knobs):
        state = self.state
        full = taylorseer_computes(self.config, state.calls)
        if full:
            out, outputs = predict_recording(denoiser, predict, latents, timestep, cond, knobs)
            self.state = taylor_state_after(self.config, state, outputs)
        else:
            out = _replayed(predict, taylor_outputs(state), latents, timestep, cond, knobs)
            self.state = dataclasses.replace(state, calls=state.calls + 1)
        return out, full

    def _inside(self, denoiser, predict, latents, timestep, cond, knobs):
        """First-block cache and MagCache: the DiT's blocks in parts (resident, or streamed chunk by chunk)."""
        if not splittable(denoiser.dit):
            raise PipelineError(f"--cache {self._name()} runs the DiT's blocks in two parts: "
                                f"{type(denoiser.dit).__name__} has no block groups (use --cache taylorseer)")
        if isinstance(self.config, FirstBlockCacheConfig) and BATCHED_PAIR in self.branches and len(self.branches) > 1:
            raise PipelineError(f"--cache first-block: this model's one DiT batch holds the reference's cache contexts "
                                f"{', '.join(self.branches)}, each deciding on its own statistic there; run without "
                                f"STG / modality guidance, or use --cache taylorseer or magcache")
        mag, calls = self.state
        if isinstance(self.config, MagCacheConfig):
            decided = [magcache_decide(self.config, row, self.steps, s) for row, s in zip(self.ratios, mag)]
            compute, mag = tuple(c for c, _ in decided), tuple(s for _, s in decided)
            step = MagStep(compute, self.config.calibrate, self.per_row)
        else:
            step, compute = FirstBlockStep(self.config.threshold, self.per_row, denoiser.streamed is not None), None
        if denoiser.streamed is not None:  # a skipped MagCache step fetches no chunk (vidax.zoo.step_caches.streamed)
            from vidax.zoo.step_caches.streamed import streamed_split_prediction

            out, made = streamed_split_prediction(predict, denoiser, step, calls, latents, timestep, cond, knobs)
        else:
            out, made = _split_prediction(predict, denoiser.dit, step, denoiser.params, calls, latents, timestep,
                                          cond, knobs)
        calls = tuple(new for new, _ in made)
        if compute is not None:
            self.state = (tuple(magcache_advance(s, c, self.steps) for s, c in zip(mag, compute)), calls)
            return out, (compute, made[0][1] if self.config.calibrate else None)
        self.state = (mag, calls)
        return out, made[0][1]

    def _name(self) -> str:
        from vidax.zoo.step_caches.rules import EasyCacheConfig

        names = {FirstBlockCacheConfig: "first-block", MagCacheConfig: "magcache", TaylorSeerConfig: "taylorseer",
                 EasyCacheConfig: "easycache"}
        return names.get(type(self.config), "teacache")

    def finish(self, stage: str) -> list[dict]:
        """The pass's log for the sidecar (device flags read once, here) and, calibrating, the ratios written."""
        entries, ratios = [], []
        for entry in self.log:
            full = entry["full_dit"]
            if isinstance(full, tuple):  # MagCache: (decision, calibration ratio or None)
                full, ratio = full
                if ratio is not None:
                    ratios.append(float(to_host(ratio)[0]))
            flags = np.broadcast_to(to_host(full), (len(self.branches),))  # every process: a collective if sharded
            entries.append({"stage": stage, "step": entry["step"], "expert": entry["expert"],
                            "full_dit": {b: bool(f) for b, f in zip(self.branches, flags)}})
            if "change" in entry:  # TeaCache: the measured relative L1 change (null on a first step)
                changes = np.broadcast_to(entry["change"], (len(self.branches),))
                entries[-1]["change"] = {b: None if np.isnan(c) else float(c) for b, c in zip(self.branches, changes)}
        if ratios:
            for entry, ratio in zip(entries, ratios):
                entry["mag_ratio"] = ratio
            if self.calibrate_to is not None:
                _write_ratios(self.calibrate_to, np.asarray(ratios, np.float32))
        return entries


def _write_ratios(path: Any, ratios: np.ndarray) -> None:
    """Calibrated ratios to `path` (process 0 of a multi-process run), whole or not at all."""
    from vidax.zoo.compute.distributed import is_writer

    if not is_writer():
        return
    path = Path(path)
    partial_file = path.with_name(path.name + ".partial.npy")
    np.save(partial_file, ratios)
    partial_file.replace(path)


def config_from_options(options: Any):
    """The cache config of a request (None without --cache); PipelineError for a misuse, one line."""
    method = options.cache
    given = sorted(field for field in KNOBS if getattr(options, field, None) is not None)
    if method is None:
        if given:
            raise PipelineError(f"{', '.join(_flag(f) for f in given)} need --cache (one of {', '.join(METHODS)})")
        return None
    if method not in METHODS:
        raise PipelineError(f"unknown --cache {method!r} (choose from {', '.join(METHODS)})")
    foreign = [field for field in given if method not in KNOBS[field]]
    if foreign:
        raise PipelineError(f"--cache {method} takes no {', '.join(_flag(f) for f in foreign)}")
    configs = {"taylorseer": _taylorseer_config, "first-block": _first_block_config, "magcache": _magcache_config,
               "teacache": _teacache_config, "easycache": _easycache_config}
    return configs[method](options)


def _taylorseer_config(options) -> TaylorSeerConfig:
    defaults = TaylorSeerConfig()
    config = TaylorSeerConfig(
        cache_interval=_pick(options.cache_interval, defaults.cache_interval),
        disable_cache_before_step=_pick(options.cache_warmup, defaults.disable_cache_before_step),
        disable_cache_after_step=options.cache_stop,
        max_order=_pick(options.cache_order, defaults.max_order))
    _check_taylorseer(config)
    return config


def _first_block_config(options) -> FirstBlockCacheConfig:
    config = FirstBlockCacheConfig(_pick(options.cache_threshold, FirstBlockCacheConfig.threshold))
    if config.threshold < 0:
        raise PipelineError(f"--cache-threshold must be 0 or more, got {config.threshold}")
    return config


def _magcache_config(options) -> MagCacheConfig:
    from vidax.zoo.step_caches.rules import magcache_ratio_sets

    defaults = MagCacheConfig()
    calibrate = options.cache_calibrate is not None
    shipped = options.mag_ratios is None and not calibrate  # the model's published ratios, or none to use
    if shipped and options.model not in magcache_ratio_sets():
        raise PipelineError(f"--cache magcache needs --mag-ratios FILE.npy: no published ratios for {options.model} "
                            f"(shipped for {', '.join(magcache_ratio_sets())}; --cache-calibrate FILE.npy writes them)")
    ratios = None if options.mag_ratios is None else _read_ratios(options.mag_ratios)
    config = MagCacheConfig(threshold=_pick(options.cache_threshold, defaults.threshold),
                            max_skip_steps=_pick(options.cache_max_skip, defaults.max_skip_steps),
                            retention_ratio=_pick(options.cache_retention, defaults.retention_ratio),
                            mag_ratios=ratios, calibrate=calibrate, shipped_for=options.model if shipped else None)
    if config.max_skip_steps < 0 or not 0 <= config.retention_ratio <= 1 or config.threshold < 0:
        raise PipelineError("--cache-max-skip and --cache-threshold must be 0 or more, --cache-retention from 0 to 1")
    return config


def _teacache_config(options):
    from vidax.zoo.step_caches.tea import teacache_config

    if options.cache_threshold is None or options.cache_threshold < 0:
        raise PipelineError("--cache teacache needs --cache-threshold T, 0 or more (the reference's rel_l1_thresh)")
    try:
        return teacache_config(options.cache_threshold, options.cache_coefficients or options.model,
                               bool(options.cache_use_ret_steps))
    except ValueError as err:
        raise PipelineError(f"--cache teacache: {err}") from None


def _easycache_config(options):
    from vidax.zoo.step_caches.rules import EasyCacheConfig

    defaults = EasyCacheConfig()
    config = EasyCacheConfig(reuse_threshold=_pick(options.cache_threshold, defaults.reuse_threshold),
                             start_percent=_pick(options.cache_start_percent, defaults.start_percent),
                             end_percent=_pick(options.cache_end_percent, defaults.end_percent))
    if config.reuse_threshold < 0 or not 0 <= config.start_percent <= config.end_percent <= 1:
        raise PipelineError("--cache-threshold must be 0 or more, 0 <= --cache-start-percent <= "
                            "--cache-end-percent <= 1")
    return config


def _read_ratios(path) -> tuple[float, ...]:
    try:
        ratios = np.load(path)
    except (OSError, ValueError) as err:
        raise PipelineError(f"--mag-ratios {path}: not a readable .npy ({err})") from None
    if ratios.ndim != 1 or len(ratios) == 0 or not np.all(np.isfinite(ratios)):
        raise PipelineError(f"--mag-ratios {path}: want a 1-D array of finite per-step ratios, "
                            f"got shape {ratios.shape}")
    return tuple(float(r) for r in ratios.astype(np.float32))


def _check_taylorseer(config: TaylorSeerConfig) -> None:
    if config.cache_interval < 1:
        raise PipelineError(f"--cache-interval must be at least 1, got {config.cache_interval}")
    if config.disable_cache_before_step < 1:  # step 0 would extrapolate from nothing (diffusers raises)
        raise PipelineError(f"--cache-warmup must be at least 1 step, got {config.disable_cache_before_step}")
    if config.max_order < 0:
        raise PipelineError(f"--cache-order must be 0 or more, got {config.max_order}")
    if config.disable_cache_after_step is not None and config.disable_cache_after_step < 0:
        raise PipelineError(f"--cache-stop must be 0 or more, got {config.disable_cache_after_step}")


def step_cache_for(options: Any, branches: tuple[str, ...], steps: int, percents: tuple | None = None,
                   timesteps: Any = None) -> StepCache | None:
    """A fresh cache for one denoise pass of `steps` steps (None without --cache); `percents`: the pass's
    (family, settings), where EasyCache's window falls (`easy.percent_scale`), or that
    `PercentScale` itself (a loop outside a family: the bench); `timesteps`: the
    pass's timesteps on the host."""
    from vidax.zoo.step_caches.rules import EasyCacheConfig

    config = config_from_options(options)
    if config is None:
        return None
    scale = None
    if isinstance(config, EasyCacheConfig) and percents is not None:
        from vidax.zoo.step_caches.easy import percent_scale
        from vidax.zoo.step_caches.rules import PercentScale

        scale = percents if isinstance(percents, PercentScale) else percent_scale(*percents)
    height = getattr(percents[1], "height", None) if isinstance(percents, tuple) else None  # (family, settings)
    return StepCache(config, branches, steps, options.cache_calibrate, scale, timesteps, height)


def _pick(value, default):
    return default if value is None else value


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")
