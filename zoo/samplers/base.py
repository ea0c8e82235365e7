"""What every stepper shares: pytree registration, the step count, and the per-step noise convention.

A stepper is a frozen keyword-only dataclass whose array fields (the schedule) are pytree data and
whose other fields are static configuration, so one jitted step serves every trajectory of the same
configuration and shapes, with the step index passed as a traced int32. The sampling loop hands the
step `padded(stepper)`: the schedule arrays padded to a power-of-two capacity and the true step count
as data, so that 20, 30 and 50 steps share one compiled step too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

State = dict[str, Any]


# The smallest schedule capacity the compiled step is built for: every run of up to 64 steps shares it.
MIN_CAPACITY = 64


class Stepper(Protocol):
    timesteps: np.ndarray

    @property
    def num_steps(self) -> int: ...

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State: ...

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array) -> tuple[State, jax.Array]: ...


def capacity(num_steps: int) -> int:
    """The schedule length the compiled step is built for: a power of two, at least `MIN_CAPACITY`."""
    return max(MIN_CAPACITY, 1 << (num_steps - 1).bit_length())


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Counted:
    """The step count every stepper shares: the timesteps' length, or `step_count` where
    `with_capacity` lengthened the schedule (then a traced int32 inside the step)."""

    step_count: Any = None

    @property
    def num_steps(self):
        return len(self.timesteps) if self.step_count is None else self.step_count

    def with_capacity(self):
        """This stepper with its per-step arrays padded to `capacity(num_steps)` rows (repeating the
        last, which no step reads) and its true step count as data: one compiled step for every count
        up to the capacity."""
        if self.step_count is not None:
            return self
        steps = self.num_steps
        rows = capacity(steps) - steps

        def pad(values):
            values = np.asarray(values)
            return np.concatenate([values, np.repeat(values[-1:], rows, axis=0)])

        arrays = {name: jax.tree.map(pad, getattr(self, name)) for name in self.schedule_fields}
        return dataclasses.replace(self, **arrays, step_count=np.int32(steps))


def stepper(*, data: tuple[str, ...], fixed: tuple[str, ...] = ()):
    """Class decorator: frozen kw-only dataclass, registered as a pytree whose leaves are `data` (the
    per-step schedule arrays, indexed by step along their first axis, which `with_capacity` pads),
    `fixed` (other arrays) and the step count where the class has one (`Counted`)."""

    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True, kw_only=True, eq=False)(cls)
        names = tuple(f.name for f in dataclasses.fields(cls))
        leaves = (*data, *fixed, *(("step_count",) if "step_count" in names else ()))
        cls.schedule_fields = tuple(data)
        meta = tuple(name for name in names if name not in leaves)
        return jax.tree_util.register_dataclass(cls, data_fields=list(leaves), meta_fields=list(meta))

    return wrap


def padded(stepper_: Any) -> Any:
    """The stepper as the compiled step takes it: `with_capacity()` where it has one, else as it is."""
    with_capacity = getattr(stepper_, "with_capacity", None)
    return stepper_ if with_capacity is None else with_capacity()


def step_noise(key: jax.Array, step_index: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard normal noise for step `step_index`: the key folded with the index, float32."""
    return jax.random.normal(jax.random.fold_in(key, step_index), shape, jnp.float32)


def initial_noise(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """Initial latents for a trajectory (flow and DDPM schedulers here all start at unit variance)."""
    return jax.random.normal(key, shape, jnp.float32).astype(dtype)


def as_f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)
