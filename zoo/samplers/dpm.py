"""DPM-Solver++ multistep (1S / 2M) for flow-prediction models.

Follows diffusers `DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", use_flow_sigmas=True,
prediction_type="flow_prediction")`. Flow parameterisation: α = 1 − σ, λ = log(α / σ); the history
holds the last two x0 predictions, newest last.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.samplers.base import Counted, State, as_f32, stepper
from vidax.zoo.samplers.errors import SamplerConfigError
from vidax.zoo.samplers.schedules import Schedule


def _alpha_lambda(sigma: jax.Array) -> tuple[jax.Array, jax.Array]:
    alpha = 1 - sigma
    return alpha, jnp.log(alpha) - jnp.log(sigma)


@stepper(data=("sigmas", "timesteps"))
class DPMSolverPP(Counted):
    """DPM-Solver++ of order 1 or 2 (2M), midpoint or heun second-order update.

    Args:
        sigmas: `num_steps + 1` flow sigmas (`dpm_flow_schedule`), terminal value last.
        timesteps: float32 timesteps fed to the model.
        order: 1 or 2.
        solver_type: "midpoint" (diffusers' default) or "heun".
        lower_order_final: first order for the last step(s) below 15 steps.
        euler_at_final: always take the last step with first order.
    """

    sigmas: np.ndarray
    timesteps: np.ndarray
    order: int = 2
    solver_type: Literal["midpoint", "heun"] = "midpoint"
    lower_order_final: bool = True
    euler_at_final: bool = False

    def __post_init__(self):
        if self.order not in (1, 2):
            raise SamplerConfigError(f"DPM-Solver++ order must be 1 or 2, got {self.order}")
        if self.solver_type not in ("midpoint", "heun"):
            raise SamplerConfigError(f"DPM-Solver++ solver_type must be midpoint or heun, got {self.solver_type!r}")

    @classmethod
    def from_schedule(cls, schedule: Schedule, **config) -> "DPMSolverPP":
        return cls(sigmas=as_f32(schedule.sigmas), timesteps=as_f32(schedule.timesteps), **config)

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        return {
            "latents": latents,
            "history": jnp.zeros((2, *latents.shape), jnp.float32),
            "lower_order_nums": jnp.zeros((), jnp.int32),
        }

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array) -> tuple[State, jax.Array]:
        sigmas = jnp.asarray(self.sigmas)
        sample = state["latents"].astype(jnp.float32)
        x0 = sample - sigmas[step_index] * model_output.astype(jnp.float32)
        history = jnp.stack([state["history"][1], x0])
        first_order = self._final_is_first_order(sigmas, step_index) | (state["lower_order_nums"] < 1)
        first_order |= self.order == 1
        latents = jax.lax.cond(
            first_order,
            lambda: self._first_order(sigmas, sample, x0, step_index),
            lambda: self._second_order(sigmas, sample, history, step_index),
        ).astype(state["latents"].dtype)
        new_state = {
            "latents": latents,
            "history": history,
            "lower_order_nums": jnp.minimum(state["lower_order_nums"] + 1, self.order),
        }
        return new_state, latents

    def _final_is_first_order(self, sigmas: jax.Array, step_index: jax.Array) -> jax.Array:
        # A step onto σ = 0 has λ = inf: only the first-order update is defined there.
        steps = self.num_steps  # traced where the schedule is padded: its terminal sigma is sigmas[steps]
        lower = jnp.asarray(self.euler_at_final) | (jnp.asarray(self.lower_order_final) & (steps < 15))
        return (step_index == steps - 1) & (lower | (sigmas[steps] == 0))

    def _first_order(self, sigmas, sample, x0, step_index):
        sigma_t, sigma_s = sigmas[step_index + 1], sigmas[step_index]
        alpha_t, lambda_t = _alpha_lambda(sigma_t)
        _, lambda_s = _alpha_lambda(sigma_s)
        h = lambda_t - lambda_s
        return sigma_t / sigma_s * sample - alpha_t * (jnp.exp(-h) - 1.0) * x0

    def _second_order(self, sigmas, sample, history, step_index):
        sigma_t, sigma_s0, sigma_s1 = sigmas[step_index + 1], sigmas[step_index], sigmas[step_index - 1]
        alpha_t, lambda_t = _alpha_lambda(sigma_t)
        _, lambda_s0 = _alpha_lambda(sigma_s0)
        _, lambda_s1 = _alpha_lambda(sigma_s1)
        m0, m1 = history[1], history[0]
        h, h_0 = lambda_t - lambda_s0, lambda_s0 - lambda_s1
        d0, d1 = m0, 1.0 / (h_0 / h) * (m0 - m1)
        x_t = sigma_t / sigma_s0 * sample - alpha_t * (jnp.exp(-h) - 1.0) * d0
        if self.solver_type == "midpoint":
            return x_t - 0.5 * (alpha_t * (jnp.exp(-h) - 1.0)) * d1
        return x_t + alpha_t * ((jnp.exp(-h) - 1.0) / h + 1.0) * d1
