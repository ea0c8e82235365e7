"""LTX-Video's denoising passes and per-step guidance, from the settings (pure functions of them).

One pass, or the official multi-scale two (`plan_passes`: a first pass at `downscale_factor` of the size,
the second at twice that, each with its step grid, skipped steps, guidance lists and tone map); a pass's
step grid (`pass_schedule`: the official `RectifiedFlowScheduler`'s or `LTXConditionPipeline`'s); the
guidance at each step (`step_guides`: the pass's official lists keyed by `guidance_timesteps`, the
settings otherwise, the user's flags over both).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Mapping

import numpy as np

from vidax.zoo.ltx_video import latents as L
from vidax.zoo.ltx_video.config import SchedulerConfig
from vidax.zoo.errors import PipelineError

GUIDANCE_KEYS = ("guidance", "stg", "rescale", "guidance_timesteps", "skip_blocks", "cfg_star")


def floats(value, what: str) -> tuple[float, ...] | None:
    if value is None or isinstance(value, (list, tuple)):
        return None if value is None else tuple(float(v) for v in value)
    try:
        return tuple(float(v) for v in str(value).replace(" ", "").split(",") if v)
    except ValueError:
        raise PipelineError(f"{what} takes comma-separated numbers, got {value!r}") from None


def ints(value, what: str) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    try:
        return tuple(int(v) for v in str(value).replace(" ", "").split(",") if v)
    except ValueError:
        raise PipelineError(f"{what} takes comma-separated block indices, got {value!r}") from None


@dataclasses.dataclass(frozen=True)
class StepGuide:
    """Guidance at one step (the official lists resolved per timestep)."""

    guidance: float
    stg: float
    rescale: float
    skip: tuple[int, ...]
    cfg_star: bool


@dataclasses.dataclass(frozen=True)
class Pass:
    """One denoising pass: its size, grid and guidance."""

    height: int
    width: int
    steps: int | None  # None: `timesteps` given
    timesteps: tuple[float, ...] | None  # in 0..1000
    skip_initial: int = 0
    skip_final: int = 0
    guidance: tuple[StepGuide, ...] | Mapping | None = None  # resolved in `_guides`
    tone_map: float = 0.0
    second: bool = False


def plan_passes(s: Any, *, multi_scale: bool, first_size: tuple[int, int], user_timesteps: bool,
                user_steps: bool) -> list[Pass]:
    """The passes of a run with settings `s`.

    Args:
      multi_scale: two passes (the official multi-scale pipeline) or one.
      first_size: the first pass's (height, width).
      user_timesteps: `--timesteps` was given (it replaces the first pass's list).
      user_steps: `--steps` was given (it wins over the registry's timestep list, and rescales a pass's
        skipped steps).
    """
    given = floats(s.timesteps, "--timesteps")
    if not user_timesteps and user_steps:
        given = None  # --steps wins over the registry's timestep list
    if not multi_scale:  # one pass: the top-level grid, the first pass's guidance lists if any
        lists = {k: v for k, v in (s.first_pass or {}).items() if k in GUIDANCE_KEYS}
        return [Pass(s.height, s.width, None if given else s.steps, given, guidance=lists or None,
                     tone_map=s.tone_map_compression_ratio or 0.0)]
    h, w = first_size
    passes = []
    for second, (height, width, table) in enumerate(((h, w, s.first_pass or {}), (2 * h, 2 * w, s.second_pass or {}))):
        sigmas = table.get("timesteps")
        timesteps = tuple(float(x) * 1000.0 for x in sigmas) if sigmas is not None else None
        if not second and user_timesteps:
            timesteps = given  # --timesteps: the first pass's
        steps = None if timesteps else int(table.get("steps", s.steps))
        skips = [int(table.get("skip_initial_steps", 0)), int(table.get("skip_final_steps", 0))]
        if user_steps and timesteps is None and steps != s.steps:
            # --steps rescales the pass's grid: its skipped steps keep their share (dev: 3 / 30 final
            # steps of the first pass, 17 / 30 initial of the second), at least one step left
            skips = [round(k * s.steps / steps) for k in skips]
            while sum(skips) >= s.steps:
                skips[skips.index(max(skips))] -= 1
            steps = s.steps
        tone = s.tone_map_compression_ratio if s.tone_map_compression_ratio is not None else \
            float(table.get("tone_map_compression_ratio", 0.0))
        passes.append(Pass(height, width, steps, timesteps, skips[0], skips[1], table or None,
                           tone if second else 0.0, bool(second)))
    return passes


def pass_schedule(p: Pass, reference: str, scheduler: SchedulerConfig, tokens: int):
    """A pass's step grid: the official scheduler's (`tokens` for its resolution-dependent shift), else
    `LTXConditionPipeline`'s, less the pass's skipped initial and final steps. Raises ValueError for a
    grid the official scheduler refuses."""
    from vidax.zoo.samplers.schedules import Schedule

    if reference == "official":
        sigmas = None if p.timesteps is None else [t / 1000.0 for t in p.timesteps]
        return L.official_schedule(scheduler, tokens, num_steps=p.steps, timesteps=sigmas,
                                   skip_initial=p.skip_initial, skip_final=p.skip_final)
    schedule = L.condition_schedule(scheduler, p.steps, p.timesteps)
    n = schedule.num_steps
    if p.skip_initial or p.skip_final:
        keep = slice(p.skip_initial, n - p.skip_final)
        sigmas = np.append(schedule.sigmas[:-1][keep], np.float32(0))
        schedule = Schedule(timesteps=schedule.timesteps[keep], sigmas=sigmas)
    return schedule


def step_guides(s: Any, p: Pass, timesteps: np.ndarray, given: Mapping, *, official: bool,
                official_layout: bool) -> list[StepGuide]:
    """Per-step guidance: the pass's official lists keyed by `guidance_timesteps`, else the settings;
    `given` (the user's --guidance / --stg / --guidance-rescale / --stg-skip-blocks / --cfg-star, None
    where not given) wins over the lists.

    Args:
      official: the run follows the official pipeline (its rescale and CFG* lists apply).
      official_layout: an official checkpoint (its STG lists apply; diffusers folders run STG only when
        --stg is given).
    """
    table = dict(p.guidance or {})
    defaults = {"guidance": s.guidance, "stg": s.stg, "rescale": s.guidance_rescale,
                "skip_blocks": list(ints(s.stg_skip_blocks, "--stg-skip-blocks")), "cfg_star": s.cfg_star}
    if not official:  # the official-only knobs of a pass (STG is guarded below)
        table.pop("rescale", None)
        table.pop("cfg_star", None)
    marks = table.get("guidance_timesteps")
    guides = []
    for t in timesteps:
        sigma = float(t) / 1000.0
        index = 0
        if marks:
            hits = [i for i, m in enumerate(marks) if m <= sigma]
            index = hits[0] if hits else len(marks) - 1
        pick = partial(_pick, table, given, defaults, index)
        stg = float(pick("stg")) if official_layout or given["stg"] is not None else 0.0
        guides.append(StepGuide(float(pick("guidance")), stg, float(pick("rescale")),
                                tuple(int(b) for b in pick("skip_blocks")), bool(pick("cfg_star"))))
    return guides


def _pick(table: Mapping, given: Mapping, defaults: Mapping, index: int, key: str):
    """One guidance value at a step: the user's flag, else the pass's list entry (`index` by guidance
    timestep) or scalar, else the settings'."""
    if given[key] is not None:
        return given[key] if key != "skip_blocks" else list(ints(given[key], "--stg-skip-blocks"))
    if key not in table:
        return defaults[key]
    value = table[key]
    if key == "skip_blocks":
        return list(value[index]) if value and isinstance(value[0], (list, tuple)) else list(value)
    return value[index] if isinstance(value, (list, tuple)) else value
