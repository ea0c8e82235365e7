"""DDIM and CogVideoX's DPM for DDPM-trained models (v- or ε-prediction).

Both step from timestep t to t − num_train_timesteps // num_steps, as diffusers'
`DDIMScheduler` / `CogVideoXDDIMScheduler` / `CogVideoXDPMScheduler` do, with ᾱ = 1 past the
start (`set_alpha_to_one`). Every per-step coefficient depends only on the schedule, so it is
computed once on the host in float64 and the jitted step only gathers row `step_index`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.samplers.base import Counted, State, as_f32, step_noise, stepper
from vidax.zoo.samplers.errors import SamplerConfigError

Prediction = Literal["v_prediction", "epsilon"]


def _alpha_pairs(alphas_cumprod, timesteps, num_train_timesteps, final_alpha_cumprod):
    """(ᾱ_t, ᾱ_prev) per step, float64, with prev = t − num_train // num_steps."""
    alphas_cumprod = np.asarray(alphas_cumprod, np.float64)
    timesteps = np.asarray(timesteps, np.int64)
    prev = timesteps - num_train_timesteps // len(timesteps)
    alpha_prev = np.where(prev >= 0, alphas_cumprod[np.maximum(prev, 0)], final_alpha_cumprod)
    return alphas_cumprod[timesteps], alpha_prev, prev


def _x0_coefficients(alpha_t: np.ndarray, prediction_type: str) -> dict[str, np.ndarray]:
    if prediction_type not in ("v_prediction", "epsilon"):
        raise SamplerConfigError(f"prediction_type must be v_prediction or epsilon, got {prediction_type!r}")
    return {"sqrt_alpha": as_f32(alpha_t**0.5), "sqrt_beta": as_f32((1 - alpha_t) ** 0.5)}


def _predict_x0(coef, sample, model_output, i, prediction_type):
    sqrt_alpha, sqrt_beta = coef["sqrt_alpha"][i], coef["sqrt_beta"][i]
    if prediction_type == "v_prediction":
        return sqrt_alpha * sample - sqrt_beta * model_output
    return (sample - sqrt_beta * model_output) / sqrt_alpha


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class _AlphaTableStepper(Counted):
    """A stepper whose per-step coefficients come from an ᾱ table over its timesteps (`create`)."""

    coef: dict[str, np.ndarray]
    timesteps: np.ndarray
    prediction_type: Prediction = "v_prediction"

    @classmethod
    def create(
        cls,
        alphas_cumprod: np.ndarray,
        timesteps: np.ndarray,
        *,
        prediction_type: Prediction = "v_prediction",
        final_alpha_cumprod: float = 1.0,
        num_train_timesteps: int = 1000,
    ):
        """A stepper over `timesteps` of the ᾱ table.

        Args:
            alphas_cumprod: the ᾱ table (e.g. `cogvideox_alphas_cumprod()`).
            timesteps: integer timesteps (`ddim_timesteps`).
            prediction_type: what the model predicts.
            final_alpha_cumprod: ᾱ beyond the first timestep (1.0 for `set_alpha_to_one`).
            num_train_timesteps: size of the training grid.
        """
        alpha_t, alpha_prev, prev = _alpha_pairs(alphas_cumprod, timesteps, num_train_timesteps, final_alpha_cumprod)
        coef = _x0_coefficients(alpha_t, prediction_type)
        coef.update(cls.coefficients(alpha_t, alpha_prev, prev))
        return cls(coef=coef, timesteps=as_f32(timesteps), prediction_type=prediction_type)

    @staticmethod
    def coefficients(alpha_t: np.ndarray, alpha_prev: np.ndarray, prev: np.ndarray) -> dict[str, np.ndarray]:
        """The stepper's own per-step coefficients (float64 in, float32 out)."""
        raise NotImplementedError


@stepper(data=("coef", "timesteps"))
class DDIM(_AlphaTableStepper):
    """Deterministic DDIM (eta 0) as `x_prev = a·x + b·x0`; follows diffusers `CogVideoXDDIMScheduler`.

    Build with `DDIM.create(alphas_cumprod, timesteps)`.
    """

    @staticmethod
    def coefficients(alpha_t: np.ndarray, alpha_prev: np.ndarray, prev: np.ndarray) -> dict[str, np.ndarray]:
        a = ((1 - alpha_prev) / (1 - alpha_t)) ** 0.5
        return {"a": as_f32(a), "b": as_f32(alpha_prev**0.5 - alpha_t**0.5 * a)}

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        return {"latents": latents}

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array) -> tuple[State, jax.Array]:
        coef = jax.tree.map(jnp.asarray, self.coef)
        sample = state["latents"].astype(jnp.float32)
        x0 = _predict_x0(coef, sample, model_output.astype(jnp.float32), step_index, self.prediction_type)
        latents = (coef["a"][step_index] * sample + coef["b"][step_index] * x0).astype(state["latents"].dtype)
        return {"latents": latents}, latents


@stepper(data=("coef", "timesteps"))
class CogVideoXDPM(_AlphaTableStepper):
    """CogVideoX's stochastic second-order DPM-Solver; follows diffusers `CogVideoXDPMScheduler`.

    Step i's noise is `step_noise(key, i, shape)`; the first step and a step onto ᾱ = 1 are first order.
    Build with `CogVideoXDPM.create(alphas_cumprod, timesteps)`.
    """

    @staticmethod
    def coefficients(alpha_t: np.ndarray, alpha_prev: np.ndarray, prev: np.ndarray) -> dict[str, np.ndarray]:
        alpha_back = np.concatenate([[0.5], alpha_t[:-1]])  # placeholder at step 0, which is first order
        # Zero terminal SNR (ᾱ = 0) and ᾱ_prev = 1 give infinite λ; the coefficients stay finite.
        with np.errstate(divide="ignore", invalid="ignore"):
            lam, lam_next, lam_back = (0.5 * np.log(a / (1 - a)) for a in (alpha_t, alpha_prev, alpha_back))
            h = lam_next - lam
            r = (lam - lam_back) / h
            return dict(
                mult1=as_f32(((1 - alpha_prev) / (1 - alpha_t)) ** 0.5 * np.exp(-h)),
                mult2=as_f32(np.expm1(-2 * h) * alpha_prev**0.5),
                mult3=as_f32(1 + 1 / (2 * r)),
                mult4=as_f32(1 / (2 * r)),
                mult_noise=as_f32((1 - alpha_prev) ** 0.5 * (1 - np.exp(-2 * h)) ** 0.5),
                second_order=(np.arange(len(prev)) > 0) & (prev >= 0),
            )

    stochastic = True  # noise every step (`sample(..., step_noise=...)` or a key)

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        if key is None:
            raise SamplerConfigError("CogVideoX DPM sampling injects noise every step: pass a jax.random key")
        return {"latents": latents, "old_x0": jnp.zeros(latents.shape, jnp.float32), "key": key}

    def step(
        self, state: State, model_output: jax.Array, step_index: jax.Array, noise: jax.Array | None = None
    ) -> tuple[State, jax.Array]:
        coef = jax.tree.map(jnp.asarray, self.coef)
        row = {name: value[step_index] for name, value in coef.items()}
        sample = state["latents"].astype(jnp.float32)
        x0 = _predict_x0(coef, sample, model_output.astype(jnp.float32), step_index, self.prediction_type)
        noise = step_noise(state["key"], step_index, sample.shape) if noise is None else noise
        denoised = jnp.where(row["second_order"], row["mult3"] * x0 - row["mult4"] * state["old_x0"], x0)
        latents = row["mult1"] * sample - row["mult2"] * denoised + row["mult_noise"] * noise
        latents = latents.astype(state["latents"].dtype)
        return {**state, "latents": latents, "old_x0": x0}, latents
