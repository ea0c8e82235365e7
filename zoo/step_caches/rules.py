"""TeaCache's and EasyCache's decision rules as pure functions, their per-model data in `teacache.toml`.

These are the rules a step cache takes each step (wired by `tea.py` and `easy.py`),
tested against hand-computed values and the reference's coefficients.

- TeaCache (the reference algorithm, ali-vilab/TeaCache): the relative L1 change of the modulated
  input since the previous step, rescaled by a per-model polynomial, accumulates; a step is skipped
  (the last residual of all blocks added) while the sum stays under the threshold, and a full step
  resets it. Warm-up and final steps always run. One accumulator per CFG branch.
- EasyCache (as ComfyUI defines it): the input's mean change since the last full step, times the
  last measured output/input change rate, over the last output's mean magnitude, accumulates; a
  step reuses the cached output-minus-input while the sum stays under `reuse_threshold`. Only steps
  at or below the `start_percent` point take the rule; from the `end_percent` point on every step
  runs and nothing is recorded (`PercentScale`: where a family's percents fall, as ComfyUI's model
  sampling of that model places them). The prompt branch decides for all branches.
- MagCache's published per-step ratios (`magcache.toml`, from the MagCache reference code): per
  model the list as published and the DiT calls of a step it alternates over; `branch_ratios` gives
  each call its own slice (the rule itself lives in `step_cache`).
"""

from __future__ import annotations

import dataclasses
import tomllib
from functools import cache
from pathlib import Path

import numpy as np

COEFFICIENTS_FILE = Path(__file__).with_name("teacache.toml")


# --- TeaCache -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TeaCacheRule:
    """One model's TeaCache data: the rescaling polynomial (highest power first) and the steps that
    always run at the start and at the end."""

    coefficients: tuple[float, ...]
    warmup_steps: int
    final_steps: int


@cache
def teacache_rules() -> dict:
    """{model: {modulated input: TeaCacheRule}} from `teacache.toml`."""
    table = tomllib.loads(COEFFICIENTS_FILE.read_text())["teacache"]
    return {model: {name: TeaCacheRule(tuple(rule["coefficients"]), rule["warmup_steps"], rule["final_steps"])
                    for name, rule in inputs.items()} for model, inputs in table.items()}


def teacache_rule(model: str, modulated: str) -> TeaCacheRule:
    """The published rule of `model` for its `modulated` input ("e0", "e", "modulated"); KeyError naming
    the models and inputs there are."""
    rules = teacache_rules()
    if model not in rules or modulated not in rules[model]:
        have = ", ".join(f"{m} ({'/'.join(r)})" for m, r in rules.items())
        raise KeyError(f"no TeaCache coefficients for {model} {modulated} (published: {have})")
    return rules[model][modulated]


def relative_l1(current: np.ndarray, previous: np.ndarray) -> float:
    """mean |current - previous| / mean |previous|."""
    return float(np.abs(current - previous).mean() / np.abs(previous).mean())


def teacache_decide(rule: TeaCacheRule, threshold: float, accumulated: float, change: float | None,
                    step: int, steps: int) -> tuple[bool, float]:
    """(whether step `step` of `steps` runs the DiT, the accumulated rescaled change after it)."""
    if change is None or step < rule.warmup_steps or step >= steps - rule.final_steps:
        return True, 0.0
    accumulated = accumulated + float(np.polyval(rule.coefficients, change))
    if accumulated < threshold:
        return False, accumulated
    return True, 0.0


# --- EasyCache ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EasyCacheConfig:
    """ComfyUI's EasyCache node: `reuse_threshold`, `start_percent`, `end_percent` (its defaults)."""

    reuse_threshold: float = 0.2
    start_percent: float = 0.15
    end_percent: float = 0.95


@dataclasses.dataclass(frozen=True)
class EasyState:
    """The cumulative approximate change, the last output/input change rate, the last output's mean |.|."""

    cumulative: float = 0.0
    rate: float | None = None
    output_norm: float | None = None


@dataclasses.dataclass(frozen=True)
class PercentScale:
    """Where EasyCache's percents fall on a family's noise levels, as ComfyUI's model sampling of that model
    places them (`percent_to_sigma`), and which value of a step is compared with them.

    - "flow" (Wan, HunyuanVideo 1.0 / 1.5, LTX-Video, LTX-2, Cosmos3; ComfyUI's discrete-flow and Flux
      sampling): sigma `shift * t / (1 + (shift - 1) * t)` at `t = 1 - percent`; a dynamic shift `mu`
      enters as `shift = exp(mu)` (Flux's `exp(mu) / (exp(mu) + 1 / t - 1)` is the same curve). A step's
      sigma is its timestep / `train_steps`.
    - "rflow_edm" (Cosmos-Predict2.5; ComfyUI's Cosmos rectified-flow sampling): the EDM sigma
      log-linear between `sigma_min` and `sigma_max` at `1 - percent`; a step's EDM sigma is
      `s / (1 - s)` of its flow sigma `s` (timestep / `train_steps`), at most `sigma_max`.
    - "discrete" (CogVideoX; ComfyUI's discrete, v-prediction sampling): the sigma of timestep
      `(1 - percent) * (train_steps - 1)`; sigma rises strictly with the timestep, so the step's timestep
      is compared with that timestep.
    """

    kind: str = "flow"
    shift: float = 1.0
    sigma_min: float = 0.002
    sigma_max: float = 80.0
    train_steps: int = 1000


NEVER = 999999999.9  # ComfyUI's sigma "above every step" for percent 0 of its unbounded samplings


def flow_percent_to_sigma(percent: float, shift: float) -> float:
    """The sigma at `percent` of a flow schedule shifted by `shift` (ComfyUI's discrete-flow sampling)."""
    if percent <= 0.0:
        return 1.0
    if percent >= 1.0:
        return 0.0
    t = 1.0 - percent
    return t if shift == 1.0 else shift * t / (1 + (shift - 1) * t)


def percent_point(scale: PercentScale, percent: float) -> float:
    """`percent` on `scale`, in the units of `step_point`."""
    if scale.kind == "flow":
        return flow_percent_to_sigma(percent, scale.shift)
    if scale.kind == "rflow_edm":
        if percent <= 0.0:
            return NEVER
        if percent >= 1.0:
            return 0.0
        low, high = np.log(scale.sigma_min), np.log(scale.sigma_max)
        return float(np.exp(low + (1.0 - percent) * (high - low)))
    if percent <= 0.0:  # "discrete", in timesteps
        return NEVER
    return -1.0 if percent >= 1.0 else (1.0 - percent) * (scale.train_steps - 1)


def step_point(scale: PercentScale, timestep: float) -> float:
    """A step's value on `scale` from its timestep: flow sigma, EDM sigma, or the timestep itself."""
    if scale.kind == "discrete":
        return float(timestep)
    sigma = float(timestep) / scale.train_steps
    if scale.kind == "rflow_edm":  # ComfyUI's Cosmos sampling caps the EDM sigma at its maximum
        top = scale.sigma_max / (scale.sigma_max + 1)
        return scale.sigma_max if sigma >= top else sigma / (1.0 - sigma)
    return sigma


def easycache_phase(config: EasyCacheConfig, point: float, scale: PercentScale | float) -> str:
    """"before" (runs, recorded), "active" (the rule decides) or "past_end" (runs, nothing recorded) of a
    step at `point` (`step_point`); `scale` a `PercentScale` or a flow shift."""
    scale = scale if isinstance(scale, PercentScale) else PercentScale("flow", float(scale))
    if not point > percent_point(scale, config.end_percent):
        return "past_end"
    return "active" if point <= percent_point(scale, config.start_percent) else "before"


def easycache_decide(config: EasyCacheConfig, state: EasyState, input_change: float | None) -> tuple[bool, EasyState]:
    """(whether an active step reuses the cache, the state after the decision)."""
    if state.output_norm is None or state.rate is None or input_change is None:
        return False, state
    cumulative = state.cumulative + state.rate * input_change / state.output_norm
    if cumulative < config.reuse_threshold:
        return True, dataclasses.replace(state, cumulative=cumulative)
    return False, dataclasses.replace(state, cumulative=0.0)


def easycache_after_full(state: EasyState, input_change: float | None, output_change: float | None,
                         output_norm: float) -> EasyState:
    """The state after a full step: the output/input change rate (when both changes are known) and the
    new output's mean magnitude."""
    rate = state.rate
    if output_change is not None and state.output_norm is not None and input_change is not None:
        rate = output_change / input_change
    return dataclasses.replace(state, rate=rate, output_norm=output_norm)


# --- MagCache: the published ratios -------------------------------------------------------------

MAG_RATIOS_FILE = Path(__file__).with_name("magcache.toml")


@dataclasses.dataclass(frozen=True)
class MagRatioSet:
    """One published MagCache calibration: the reference's list as published (`ratios`, its leading
    padding included), the DiT calls of a step it alternates over (`interleave`; empty: one list for
    every call), the step count it was calibrated for and, where the reference keeps one set per
    video height, that height."""

    ratios: tuple[float, ...]
    interleave: tuple[str, ...]
    steps: int
    height: int | None = None


@cache
def magcache_ratio_sets() -> dict[str, tuple[MagRatioSet, ...]]:
    """{model: its published sets} from `magcache.toml`."""
    table = tomllib.loads(MAG_RATIOS_FILE.read_text())["magcache"]
    return {model: tuple(MagRatioSet(tuple(s["ratios"]), tuple(s["interleave"]), s["steps"], s.get("height"))
                         for s in sets) for model, sets in table.items()}


def magcache_ratio_set(model: str, height: int | None = None) -> MagRatioSet:
    """The published set of `model` for a video `height` (the nearest calibrated height where the
    reference keeps several); KeyError naming the models that have one."""
    sets = magcache_ratio_sets().get(model)
    if not sets:
        raise KeyError(f"no published MagCache ratios for {model} (published: {', '.join(magcache_ratio_sets())})")
    if height is None or len(sets) == 1:
        return sets[0]
    return min(sets, key=lambda s: abs(s.height - height))


def branch_ratios(published: MagRatioSet, branch: str) -> tuple[float, ...]:
    """The per-step ratios of one DiT call of a step (`branch`, a diffusers cache context name): its
    slice of an interleaved list (the reference's call counter indexes the list, and its accumulators
    alternate with the counter's parity), or the whole list where one serves every call."""
    if not published.interleave:
        return published.ratios
    if branch not in published.interleave:
        raise KeyError(f"the published ratios are per DiT call {'/'.join(published.interleave)}; "
                       f"this run calls it as {branch!r}")
    return published.ratios[published.interleave.index(branch)::len(published.interleave)]
