"""The sampling loop: a short host loop over one jitted step, with a NaN/Inf stop after each step."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.samplers.base import State, Stepper, padded
from vidax.zoo.samplers.errors import NonFiniteLatentsError

# model_fn(latents, step_index, timestep) -> model output with the latents' shape.
ModelFn = Callable[[jax.Array, int, float], jax.Array]
Callback = Callable[[int, jax.Array], None]
# step_noise(step_index, shape) -> the noise a stochastic stepper injects at that step (host-drawn)
StepNoise = Callable[[int, tuple[int, ...]], np.ndarray]


def _step_and_check(stepper: Stepper, state: State, model_output: jax.Array, step_index: jax.Array,
                    noise: jax.Array | None = None):
    if noise is None:
        state, latents = stepper.step(state, model_output, step_index)
    else:
        state, latents = stepper.step(state, model_output, step_index, noise)
    return state, latents, jnp.all(jnp.isfinite(latents))


# The stepper is a pytree argument (schedule as data, configuration as static structure), padded
# to a power-of-two schedule length with its step count as data, and the step index is traced, so a
# whole trajectory — and every trajectory of the same configuration and shapes, whatever its step
# count up to the capacity — reuses one compiled step (a warm process asked for 10 steps after a
# run of 50 compiles nothing). The old state (latents, solver history) is dead after a
# step, so its buffers are donated to the new one.
jitted_step = jax.jit(_step_and_check, donate_argnames="state")


def sample(
    model_fn: ModelFn,
    stepper: Stepper,
    latents: jax.Array,
    *,
    key: jax.Array | None = None,
    callback: Callback | None = None,
    step_noise: StepNoise | None = None,
) -> jax.Array:
    """Run `stepper` from `latents` to the end of its schedule.

    Args:
        model_fn: `model_fn(latents, step_index, timestep)` returns the model's prediction
            (velocity, v or noise, as the stepper expects), guidance already applied.
        stepper: a configured stepper (`FlowEuler`, `UniPC`, ...).
        latents: initial latents (given, or from `initial_noise(key, shape)`).
        key: random key for stochastic steppers (ancestral Euler, CogVideoX DPM).
        callback: called as `callback(step_index, latents)` after each step.
        step_noise: the stochastic steppers' per-step noise drawn by the caller (pipelines draw it
            from the run's seed on the host, so a seed names the same video on every backend);
            replaces `key`.

    Raises:
        NonFiniteLatentsError: a step produced NaN or Inf; names the step and its timestep.
    """
    # the state is donated step by step: copy it once so the caller's latents and key stay valid
    if step_noise is not None and key is None:
        key = jax.random.key(0)  # unused: the steppers take the given noise instead
    state = jax.tree.map(lambda x: jnp.array(x, copy=True), stepper.init(latents, key))
    timesteps = np.asarray(stepper.timesteps)
    compiled_for = padded(stepper)
    for i in range(stepper.num_steps):
        model_output = model_fn(state["latents"], i, float(timesteps[i]))
        if any(model_output is leaf for leaf in jax.tree.leaves(state)):  # e.g. an identity model_fn
            model_output = jnp.array(model_output, copy=True)  # the state is about to be donated
        noise = None if step_noise is None else jnp.asarray(step_noise(i, tuple(state["latents"].shape)))
        state, latents, finite = jitted_step(compiled_for, state, model_output, jnp.int32(i), noise)
        if not bool(finite):
            raise NonFiniteLatentsError(
                f"sampling step {i + 1}/{stepper.num_steps} (timestep {timesteps[i]:g}) produced NaN or Inf latents"
            )
        if callback is not None:
            callback(i, latents)
    return state["latents"]
