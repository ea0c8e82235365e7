"""What every stepper shares: pytree registration and the per-step noise convention.

A stepper is a frozen keyword-only dataclass whose array fields (the schedule) are pytree data and
whose other fields are static configuration, so one jitted step serves every trajectory of the same
configuration and shapes, with the step index passed as a traced int32.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

State = dict[str, Any]


class Stepper(Protocol):
    timesteps: np.ndarray

    @property
    def num_steps(self) -> int: ...

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State: ...

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array) -> tuple[State, jax.Array]: ...


def stepper(*, data: tuple[str, ...]):
    """Class decorator: frozen kw-only dataclass, registered as a pytree with `data` fields as leaves."""

    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True, kw_only=True, eq=False)(cls)
        meta = tuple(f.name for f in dataclasses.fields(cls) if f.name not in data)
        return jax.tree_util.register_dataclass(cls, data_fields=list(data), meta_fields=list(meta))

    return wrap


def step_noise(key: jax.Array, step_index: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard normal noise for step `step_index`: the key folded with the index, float32."""
    return jax.random.normal(jax.random.fold_in(key, step_index), shape, jnp.float32)


def initial_noise(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """Initial latents for a trajectory (flow and DDPM schedulers here all start at unit variance)."""
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def as_f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)
