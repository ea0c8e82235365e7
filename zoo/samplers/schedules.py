"""Noise schedules as pure functions: step grids of timesteps and sigmas, and DDPM alpha tables.

Every function reproduces the grid a diffusers scheduler builds in `set_timesteps` for the same
configuration (named in each docstring), computed in float64 on the host and returned as the
dtypes diffusers ends with (sigmas float32, timesteps float32 or int64), so pipelines feed the
model exactly the timesteps its reference pipeline would.

Flow-matching sigmas run from ~1 (pure noise) to 0 and carry one extra terminal entry:
`sigmas` has `num_steps + 1` values, `timesteps` has `num_steps`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np

from vidax.zoo.samplers.errors import SamplerConfigError

Spacing = Literal["linspace", "leading", "trailing"]
TimeShift = Literal["exponential", "linear"]


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """A step grid: `timesteps[i]` is fed to the model at step i, `sigmas[i] -> sigmas[i + 1]` is its step."""

    timesteps: np.ndarray
    sigmas: np.ndarray

    @property
    def num_steps(self) -> int:
        return len(self.timesteps)


# --- shifts ---------------------------------------------------------------------------------------


def calculate_shift(
    seq_len: int,
    *,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """`mu` for dynamic shifting: linear in the token count between (base, max) seq len and shift."""
    slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return seq_len * slope + (base_shift - slope * base_seq_len)


def static_shift(sigmas: np.ndarray, shift: float) -> np.ndarray:
    """`shift·σ / (1 + (shift − 1)·σ)`: spends more steps at high noise when shift > 1."""
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def time_shift(sigmas: np.ndarray, mu: float, *, kind: TimeShift = "exponential", power: float = 1.0) -> np.ndarray:
    """Resolution-dependent shift by `mu` (exponential: `e^mu / (e^mu + (1/σ − 1)^power)`)."""
    scale = math.exp(mu) if kind == "exponential" else mu
    return scale / (scale + (1 / sigmas - 1) ** power)


def stretch_to_terminal(sigmas: np.ndarray, terminal: float) -> np.ndarray:
    """Stretch a decreasing schedule so that its last value is `terminal` (LTX's `shift_terminal`)."""
    one_minus = 1 - sigmas
    return 1 - one_minus / (one_minus[-1] / (1 - terminal))


def karras_sigmas(num_steps: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> np.ndarray:
    """Karras et al. (2022) sigmas from `sigma_max` down to `sigma_min`, evenly spaced in σ^(1/rho)."""
    ramp = np.linspace(0, 1, num_steps)
    max_inv, min_inv = sigma_max ** (1 / rho), sigma_min ** (1 / rho)
    return (max_inv + ramp * (min_inv - max_inv)) ** rho


def linear_quadratic_sigmas(
    num_steps: int, threshold_noise: float = 0.025, linear_steps: int | None = None
) -> np.ndarray:
    """LTX's linear-then-quadratic schedule (`num_steps` sigmas from 1 down, no terminal 0)."""
    if num_steps < 2:
        return np.ones(1)
    linear_steps = num_steps // 2 if linear_steps is None else linear_steps
    quadratic_steps = num_steps - linear_steps
    step_diff = linear_steps - threshold_noise * num_steps
    quad_coef = step_diff / (linear_steps * quadratic_steps**2)
    lin_coef = threshold_noise / linear_steps - 2 * step_diff / quadratic_steps**2
    const = quad_coef * linear_steps**2
    linear = [i * threshold_noise / linear_steps for i in range(linear_steps)]
    quadratic = [quad_coef * i**2 + lin_coef * i + const for i in range(linear_steps, num_steps)]
    return 1.0 - np.asarray(linear + quadratic, np.float64)


# --- flow matching --------------------------------------------------------------------------------


def _train_sigma_range(num_train_timesteps: int, shift: float | None) -> tuple[float, float]:
    """(σ_max, σ_min) of the training grid, in float32 as FlowMatchEulerDiscreteScheduler keeps them."""
    train = np.arange(num_train_timesteps, 0, -1, dtype=np.float32) / np.float32(num_train_timesteps)
    if shift is not None:
        train = (np.float32(shift) * train / (np.float32(1) + np.float32(shift - 1) * train)).astype(np.float32)
    return float(train[0]), float(train[-1])


def flow_match_schedule(
    num_steps: int,
    *,
    shift: float = 1.0,
    mu: float | None = None,
    shift_terminal: float | None = None,
    base_sigmas: np.ndarray | None = None,
    time_shift_type: TimeShift = "exponential",
    num_train_timesteps: int = 1000,
) -> Schedule:
    """Grid of diffusers' `FlowMatchEulerDiscreteScheduler.set_timesteps`.

    Args:
        num_steps: number of sampling steps.
        shift: static shift (ignored when `mu` is given).
        mu: dynamic shift from `calculate_shift` (the scheduler's `use_dynamic_shifting=True`).
        shift_terminal: stretch the grid so its last non-zero sigma equals this (LTX).
        base_sigmas: unshifted sigmas a pipeline passes (`sigmas=`), e.g. `linspace(1, 1/n, n)`;
            default the scheduler's own linspace over its training range.
        time_shift_type: the dynamic shift's formula.
        num_train_timesteps: the training grid size (timestep = σ × this).
    """
    if base_sigmas is None:
        sigma_max, sigma_min = _train_sigma_range(num_train_timesteps, None if mu is not None else shift)
        ts = np.linspace(sigma_max * num_train_timesteps, sigma_min * num_train_timesteps, num_steps)
        sigmas = ts / num_train_timesteps
    else:
        sigmas = np.asarray(base_sigmas, np.float32)  # diffusers shifts given sigmas in float32
    sigmas = time_shift(sigmas, mu, kind=time_shift_type) if mu is not None else static_shift(sigmas, shift)
    if shift_terminal:
        sigmas = stretch_to_terminal(sigmas, shift_terminal)
    sigmas = sigmas.astype(np.float32)
    timesteps = (sigmas * np.float32(num_train_timesteps)).astype(np.float32)
    return Schedule(timesteps=timesteps, sigmas=np.append(sigmas, np.float32(0)))


def unipc_flow_schedule(
    num_steps: int,
    *,
    shift: float = 1.0,
    mu: float | None = None,
    shift_terminal: float | None = None,
    final_sigma: Literal["zero", "sigma_min"] = "zero",
    num_train_timesteps: int = 1000,
    base_sigmas: np.ndarray | None = None,
) -> Schedule:
    """Grid of diffusers' `UniPCMultistepScheduler` with `use_flow_sigmas=True` (Wan, Cosmos3).

    `base_sigmas`: the unshifted sigmas a pipeline passes to `set_timesteps(sigmas=...)` (Cosmos3-Edge's
    native flow schedule); the shift then applies to them as to the default grid.
    """
    if base_sigmas is not None:
        sigmas = np.asarray(base_sigmas, np.float64).copy()
        if len(sigmas) != num_steps:
            raise ValueError(f"{len(sigmas)} base sigmas for {num_steps} steps")
    else:
        sigmas = np.linspace(1, 1 / num_train_timesteps, num_steps + 1)[:-1]
    sigmas = time_shift(sigmas, mu) if mu is not None else static_shift(sigmas, shift)
    if shift_terminal:
        sigmas = stretch_to_terminal(sigmas, shift_terminal)
    if abs(sigmas[0] - 1) < 1e-6:  # σ = 1 exactly makes λ = log(α/σ) = −inf at the first step
        sigmas[0] -= 1e-6
    return _int_timestep_schedule(sigmas, final_sigma, num_train_timesteps)


def unipc_karras_flow_schedule(
    num_steps: int,
    *,
    sigma_min: float,
    sigma_max: float,
    final_sigma: Literal["zero", "sigma_min"] = "zero",
    num_train_timesteps: int = 1000,
) -> Schedule:
    """Grid of `UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True)` (Cosmos-Predict2.5).

    Karras spacing over the EDM σ range, mapped to flow sigmas by `σ / (σ + 1)`.
    """
    edm = karras_sigmas(num_steps, sigma_min, sigma_max)
    return _int_timestep_schedule(edm / (edm + 1), final_sigma, num_train_timesteps)


def dpm_flow_schedule(num_steps: int, *, shift: float = 1.0, num_train_timesteps: int = 1000) -> Schedule:
    """Grid of diffusers' `DPMSolverMultistepScheduler` with `use_flow_sigmas=True`."""
    rising = 1.0 - np.linspace(1, 1 / num_train_timesteps, num_steps + 1)
    sigmas = np.flip(static_shift(rising, shift))[:-1].copy()
    return _int_timestep_schedule(sigmas, "zero", num_train_timesteps)


def _int_timestep_schedule(sigmas: np.ndarray, final_sigma: str, num_train_timesteps: int) -> Schedule:
    """The multistep solvers' convention: integer (truncated) timesteps, a terminal sigma appended."""
    if final_sigma not in ("zero", "sigma_min"):
        raise SamplerConfigError(f"final_sigma must be 'zero' or 'sigma_min', got {final_sigma!r}")
    timesteps = (sigmas * num_train_timesteps).astype(np.int64)
    last = 0.0 if final_sigma == "zero" else sigmas[-1]
    return Schedule(timesteps=timesteps, sigmas=np.append(sigmas, last).astype(np.float32))


# --- DDPM (CogVideoX) -----------------------------------------------------------------------------


def scaled_linear_betas(
    num_train_timesteps: int = 1000, beta_start: float = 0.00085, beta_end: float = 0.012
) -> np.ndarray:
    """Betas linear in sqrt space (Stable Diffusion's and CogVideoX's `scaled_linear`)."""
    return np.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=np.float64) ** 2


def snr_shift(alphas_cumprod: np.ndarray, scale: float) -> np.ndarray:
    """CogVideoX's `snr_shift_scale`: divides the SNR at every timestep by `scale`."""
    return alphas_cumprod / (scale + (1 - scale) * alphas_cumprod)


def rescale_zero_terminal_snr(alphas_cumprod: np.ndarray) -> np.ndarray:
    """Lin et al. (2023): shift and scale sqrt(ᾱ) so the last timestep has zero SNR, the first unchanged."""
    root = np.sqrt(alphas_cumprod)
    first, last = root[0], root[-1]
    return ((root - last) * (first / (first - last))) ** 2


def cogvideox_alphas_cumprod(
    *,
    num_train_timesteps: int = 1000,
    beta_start: float = 0.00085,
    beta_end: float = 0.012,
    snr_shift_scale: float = 3.0,
    rescale_betas_zero_snr: bool = True,
) -> np.ndarray:
    """ᾱ table of diffusers' `CogVideoXDDIMScheduler` / `CogVideoXDPMScheduler` (scaled_linear betas)."""
    alphas_cumprod = np.cumprod(1.0 - scaled_linear_betas(num_train_timesteps, beta_start, beta_end))
    alphas_cumprod = snr_shift(alphas_cumprod, snr_shift_scale)
    return rescale_zero_terminal_snr(alphas_cumprod) if rescale_betas_zero_snr else alphas_cumprod


def ddim_timesteps(
    num_steps: int, spacing: Spacing, *, num_train_timesteps: int = 1000, steps_offset: int = 0
) -> np.ndarray:
    """Integer timesteps of DDIM-family schedulers (`timestep_spacing` linspace / leading / trailing)."""
    if num_steps > num_train_timesteps:
        raise SamplerConfigError(f"{num_steps} steps exceed the {num_train_timesteps} training timesteps")
    if spacing == "linspace":
        return np.linspace(0, num_train_timesteps - 1, num_steps).round()[::-1].astype(np.int64)
    if spacing == "leading":
        ratio = num_train_timesteps // num_steps
        return (np.arange(num_steps) * ratio).round()[::-1].astype(np.int64) + steps_offset
    if spacing == "trailing":
        ratio = num_train_timesteps / num_steps
        return np.round(np.arange(num_train_timesteps, 0, -ratio)).astype(np.int64) - 1
    raise SamplerConfigError(f"timestep spacing must be linspace, leading or trailing, got {spacing!r}")
