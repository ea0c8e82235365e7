"""Flow-matching Euler steppers: deterministic (FlowMatchEuler) and ancestral for rectified flow (LTX).

The model predicts a velocity `v = ε − x0`; a latent at noise level σ is `x = (1 − σ)·x0 + σ·ε`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.samplers.base import Counted, State, as_f32, step_noise, stepper
from vidax.zoo.samplers.errors import SamplerConfigError
from vidax.zoo.samplers.schedules import Schedule


@stepper(data=("sigmas", "timesteps"))
class FlowEuler(Counted):
    """Euler along the predicted velocity; follows diffusers `FlowMatchEulerDiscreteScheduler.step`.

    Args:
        sigmas: `num_steps + 1` sigmas (from a `flow_match_schedule`), terminal value last.
        timesteps: what the model is fed at each step (float32; not used by the update).
    """

    sigmas: np.ndarray
    timesteps: np.ndarray

    @classmethod
    def from_schedule(cls, schedule: Schedule) -> "FlowEuler":
        return cls(sigmas=as_f32(schedule.sigmas), timesteps=as_f32(schedule.timesteps))

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        return {"latents": latents}

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array) -> tuple[State, jax.Array]:
        sigmas = jnp.asarray(self.sigmas)
        dt = sigmas[step_index + 1] - sigmas[step_index]
        # The state keeps the latents' dtype so that every step traces the same types.
        latents = (state["latents"].astype(jnp.float32) + dt * model_output).astype(state["latents"].dtype)
        return {"latents": latents}, latents


@stepper(data=("sigmas", "timesteps"))
class FlowEulerAncestral(Counted):
    """Euler-ancestral for rectified flow with `eta`; follows diffusers `LTXEulerAncestralRFScheduler`.

    Steps down to `σ_down` deterministically, then re-noises to `σ_next` with fresh noise scaled by
    `eta` (eta 0 is plain Euler in x0 form). Step i's noise is `step_noise(key, i, shape)` from the
    key given to `init`, or the `noise` passed to `step`.

    Args:
        sigmas: `num_steps + 1` sigmas, the last normally 0.
        timesteps: host timesteps fed to the model.
        eta: 0 deterministic, 1 full ancestral re-noising.
        s_noise: scale of the injected noise.
    """

    sigmas: np.ndarray
    timesteps: np.ndarray
    eta: float = 1.0
    s_noise: float = 1.0

    @classmethod
    def from_schedule(cls, schedule: Schedule, *, eta: float = 1.0, s_noise: float = 1.0) -> "FlowEulerAncestral":
        return cls(sigmas=as_f32(schedule.sigmas), timesteps=as_f32(schedule.timesteps), eta=eta, s_noise=s_noise)

    @property
    def stochastic(self) -> bool:
        return self.eta > 0.0 and self.s_noise > 0.0

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        if self.stochastic and key is None:
            raise SamplerConfigError(f"ancestral sampling with eta={self.eta} needs a jax.random key")
        return {"latents": latents, "key": jax.random.key(0) if key is None else key}

    def step(
        self, state: State, model_output: jax.Array, step_index: jax.Array, noise: jax.Array | None = None
    ) -> tuple[State, jax.Array]:
        sigmas = jnp.asarray(self.sigmas)
        sigma, sigma_next = sigmas[step_index], sigmas[step_index + 1]
        sample = state["latents"].astype(jnp.float32)
        denoised = sample - sigma * model_output.astype(jnp.float32)
        sigma_down = sigma_next * (1.0 + (sigma_next / sigma - 1.0) * self.eta)
        alpha_next, alpha_down = 1.0 - sigma_next, 1.0 - sigma_down
        ratio = sigma_down / sigma
        x = ratio * sample + (1.0 - ratio) * denoised
        if self.stochastic:
            if noise is None:
                noise = step_noise(state["key"], step_index, sample.shape)
            variance = sigma_next**2 - sigma_down**2 * alpha_next**2 / (alpha_down**2 + 1e-12)
            renoise = jnp.sqrt(jnp.maximum(variance, 0.0))
            x = alpha_next / (alpha_down + 1e-12) * x + noise * renoise * self.s_noise
        x = jnp.where(jnp.abs(sigma_next) < 1e-8, denoised, x)  # the last step lands on x0
        latents = x.astype(state["latents"].dtype)
        return {**state, "latents": latents}, latents
