"""LTX-Video's own steppers (the family's `Family.stepper`), pytrees like `zoo/samplers`' steppers.

- `PerTokenEuler`: `LTXConditionPipeline` and the official pipeline. Every token has its own sigma
  (conditioning tokens start lower: `min(t, (1 − mask)·1000)`), each step takes a token from its sigma
  to the next lower schedule sigma along `−velocity` (`latents.per_token_step`), and hard-conditioned
  tokens are re-noised around their initial value before every step (`image_cond_noise_scale`,
  `latents.add_conditioning_noise`). That noise is the step's host-drawn noise (the base loop passes
  it as the `stochastic` stepper's per-step noise; the predictor gets the same array through its
  knobs, so the model sees the latents the step starts from).
- `KeepFirstFrame`: `LTXImageToVideoPipeline` steps only latent frames 1: (pipeline_ltx_image2video.py
  steps `latents[:, :, 1:]`); any elementwise stepper (Euler, UniPC, DPM++) run over every token with the
  first frame's tokens put back after each step gives the same trajectory.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.ltx_video import latents as L
from vidax.zoo.samplers.base import Counted, State, padded, stepper


@stepper(data=("sigmas", "timesteps"), fixed=("mask", "init_tokens"))
class PerTokenEuler(Counted):
    """Args:
      sigmas: the schedule's `num_steps + 1` sigmas (terminal 0 last).
      timesteps: the model's timesteps (σ·1000 as the reference feeds them).
      mask: the conditioning mask `[B, S]` (strength per token), None without conditioning.
      init_tokens: the tokens after conditioning `[B, S, C]` (hard-conditioned tokens are re-noised around them).
      noise_scale: `image_cond_noise_scale` (0: no re-noising).
    """

    sigmas: np.ndarray
    timesteps: np.ndarray
    mask: Any = None
    init_tokens: Any = None
    noise_scale: float = 0.0

    @property
    def stochastic(self) -> bool:
        """Draws noise every step (the base loop then hands `step` the step's host noise)."""
        return self.noise_scale > 0 and self.mask is not None and self.init_tokens is not None

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        return {"latents": latents}

    def model_input(self, latents: jax.Array, t, noise: jax.Array | None) -> jax.Array:
        """The latents the model sees at timestep `t` (re-noised conditioning tokens)."""
        if noise is None or not self.stochastic:
            return latents
        return L.add_conditioning_noise(t, self.init_tokens, latents, self.noise_scale, self.mask, noise)

    def token_timesteps(self, t, batch: int) -> jax.Array:
        """`[B, S]` per-token timesteps (`[B, 1]` without conditioning)."""
        if self.mask is None:
            return jnp.full((batch, 1), t, jnp.float32)
        return jnp.broadcast_to(L.condition_timestep(t, self.mask), (batch, self.mask.shape[1]))

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array,
             noise: jax.Array | None = None) -> tuple[State, jax.Array]:
        t = jnp.asarray(self.timesteps)[step_index]
        x = self.model_input(state["latents"].astype(jnp.float32), t, noise)
        ts = self.token_timesteps(t, x.shape[0])
        out = L.per_token_step(self.sigmas, t, x, model_output, ts, self.mask)
        latents = out.astype(state["latents"].dtype)
        return {"latents": latents}, latents


@stepper(data=(), fixed=("inner", "keep"))
class KeepFirstFrame:
    """`inner` over all tokens, the tokens where `keep` `[B, S, 1]` is 1 held at their value."""

    inner: Any
    keep: Any

    @property
    def timesteps(self) -> np.ndarray:
        return self.inner.timesteps

    @property
    def num_steps(self) -> int:
        return self.inner.num_steps

    def with_capacity(self) -> "KeepFirstFrame":
        """The inner stepper padded (`vidax.zoo.samplers.base.padded`); `keep` is per token, not per step."""
        return dataclasses.replace(self, inner=padded(self.inner))

    @property
    def stochastic(self) -> bool:
        return bool(getattr(self.inner, "stochastic", False))

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        return self.inner.init(latents, key)

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array,
             noise: jax.Array | None = None) -> tuple[State, jax.Array]:
        before = state["latents"]
        if noise is None:
            new, latents = self.inner.step(state, model_output, step_index)
        else:
            new, latents = self.inner.step(state, model_output, step_index, noise)
        latents = jnp.where(jnp.asarray(self.keep) > 0, before, latents).astype(before.dtype)
        return {**new, "latents": latents}, latents
