"""UniPC multistep in flow-prediction mode; follows diffusers `UniPCMultistepScheduler` (predict_x0).

Each step (a) converts the velocity to an x0 prediction, (b) corrects the latents the previous step
produced with that new prediction (UniC), (c) predicts the next latents (UniP) from up to `order`
past x0 predictions. The history is a fixed `[order, *latents.shape]` buffer, newest last, and the
per-step order (which lower-order warm-up and final steps shrink) is data, dispatched with
`lax.switch` to one branch per order so that every step shares one compiled program.

Flow parameterisation: α = 1 − σ, λ = log(α / σ).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.samplers.base import Counted, State, as_f32, stepper
from vidax.zoo.samplers.errors import SamplerConfigError
from vidax.zoo.samplers.schedules import Schedule


def _lambda(sigma: jax.Array) -> jax.Array:
    return jnp.log(1 - sigma) - jnp.log(sigma)


def _bh_coefficients(h: jax.Array, order: int, solver_type: str):
    """`hh`, `h_phi_1`, `B_h` and the b vector of the UniPC linear system (predict_x0: hh = −h)."""
    hh = -h
    h_phi_1 = jnp.expm1(hh)
    h_phi_k = h_phi_1 / hh - 1
    b_h = hh if solver_type == "bh1" else jnp.expm1(hh)
    b, factorial = [], 1
    for i in range(1, order + 1):
        b.append(h_phi_k * factorial / b_h)
        factorial *= i + 1
        h_phi_k = h_phi_k / hh - 1 / factorial
    return h_phi_1, b_h, jnp.stack(b)


def _differences(sigmas, history, anchor, lambda_s0, h, order, offset):
    """rk ratios and scaled differences `(m_k − m0) / rk` of the `order − 1` older predictions."""
    rks, d1s = [], []
    m0 = history[-1]
    for k in range(1, order):
        rk = (_lambda(sigmas[anchor - k - offset]) - lambda_s0) / h
        rks.append(rk)
        d1s.append((history[-(k + 1)] - m0) / rk)
    return jnp.stack(rks + [jnp.ones((), sigmas.dtype)]), d1s


def _weighted(rhos, d1s):
    total = rhos[0] * d1s[0]
    for rho, d1 in zip(rhos[1:], d1s[1:]):
        total = total + rho * d1
    return total


@stepper(data=("sigmas", "timesteps"))
class UniPC(Counted):
    """UniPC-`order` (bh1 or bh2) for a flow-prediction model.

    Args:
        sigmas: `num_steps + 1` flow sigmas (`unipc_flow_schedule`, `unipc_karras_flow_schedule`).
        timesteps: float32 timesteps fed to the model.
        order: solver order, 1 to 3.
        solver_type: "bh1" (small step counts) or "bh2" (diffusers' default).
        lower_order_final: lower the order over the last steps (stabler below ~15 steps).
        use_corrector: apply the UniC corrector at all.
        disable_corrector: step indices whose *output* is not corrected by the following step
            (diffusers' `disable_corrector` list).
    """

    sigmas: np.ndarray
    timesteps: np.ndarray
    order: int = 2
    solver_type: Literal["bh1", "bh2"] = "bh2"
    lower_order_final: bool = True
    use_corrector: bool = True
    disable_corrector: tuple[int, ...] = ()

    def __post_init__(self):
        if self.order not in (1, 2, 3):
            raise SamplerConfigError(f"UniPC order must be 1, 2 or 3, got {self.order}")
        if self.solver_type not in ("bh1", "bh2"):
            raise SamplerConfigError(f"UniPC solver_type must be 'bh1' or 'bh2', got {self.solver_type!r}")
        # A static (hashable) field: lists from a scheduler config become a tuple of ints.
        object.__setattr__(self, "disable_corrector", tuple(int(i) for i in self.disable_corrector))

    @classmethod
    def from_schedule(cls, schedule: Schedule, **config) -> "UniPC":
        """`UniPC(...)` on a schedule's grid, refusing configurations that divide by zero at its end."""
        if config.get("solver_type") == "bh1" and schedule.sigmas[-1] == 0:
            raise SamplerConfigError("UniPC bh1 divides by zero at a zero final sigma; use bh2 or final_sigma=sigma_min")
        if config.get("order", 2) > 1 and not config.get("lower_order_final", True) and schedule.sigmas[-1] == 0:
            raise SamplerConfigError("UniPC above order 1 needs lower_order_final=True to reach a zero final sigma")
        return cls(sigmas=as_f32(schedule.sigmas), timesteps=as_f32(schedule.timesteps), **config)

    def init(self, latents: jax.Array, key: jax.Array | None = None) -> State:
        return {
            "latents": latents,
            "history": jnp.zeros((self.order, *latents.shape), jnp.float32),  # x0 predictions, newest last
            "last_sample": jnp.zeros(latents.shape, jnp.float32),
            "lower_order_nums": jnp.zeros((), jnp.int32),
            "last_order": jnp.ones((), jnp.int32),
        }

    def step(self, state: State, model_output: jax.Array, step_index: jax.Array) -> tuple[State, jax.Array]:
        sigmas = jnp.asarray(self.sigmas)
        sample = state["latents"].astype(jnp.float32)  # solver state in fp32, latents keep their dtype
        x0 = sample - sigmas[step_index] * model_output.astype(jnp.float32)
        # 1. UniC: refine the previous step's output with this step's x0 prediction.
        if self.use_corrector:
            sample = jax.lax.cond(
                self._corrects(step_index),
                lambda: self._correct(sigmas, state, x0, sample, step_index),
                lambda: sample,
            )
        # 2. Push the new prediction into the history.
        history = jnp.concatenate([state["history"][1:], x0[None]], axis=0)
        this_order = self._order_at(step_index, state["lower_order_nums"])
        # 3. UniP: predict the next latents.
        branches = [lambda args, p=p: self._predict(sigmas, *args, order=p) for p in range(1, self.order + 1)]
        prediction = jax.lax.switch(this_order - 1, branches, (history, sample, step_index))
        latents = prediction.astype(state["latents"].dtype)
        new_state = {
            "latents": latents,
            "history": history,
            "last_sample": sample,
            "lower_order_nums": jnp.minimum(state["lower_order_nums"] + 1, self.order),
            "last_order": this_order,
        }
        return new_state, latents

    def _corrects(self, step_index: jax.Array) -> jax.Array:
        enabled = step_index > 0
        for disabled in self.disable_corrector:
            enabled &= step_index - 1 != disabled
        return enabled

    def _order_at(self, step_index: jax.Array, lower_order_nums: jax.Array) -> jax.Array:
        order = jnp.int32(self.order)
        if self.lower_order_final:
            order = jnp.minimum(order, self.num_steps - step_index)
        return jnp.minimum(order, lower_order_nums + 1).astype(jnp.int32)

    def _predict(self, sigmas, history, sample, step_index, *, order: int):
        sigma_t, sigma_s0 = sigmas[step_index + 1], sigmas[step_index]
        alpha_t = 1 - sigma_t
        lambda_s0 = _lambda(sigma_s0)
        h = _lambda(sigma_t) - lambda_s0
        rks, d1s = _differences(sigmas, history, step_index, lambda_s0, h, order, offset=0)
        h_phi_1, b_h, b = _bh_coefficients(h, order, self.solver_type)
        x_t = sigma_t / sigma_s0 * sample - alpha_t * h_phi_1 * history[-1]
        if order == 1:
            return x_t
        if order == 2:
            rhos = jnp.full((1,), 0.5, sample.dtype)
        else:
            powers = jnp.stack([rks**i for i in range(order)])
            rhos = jnp.linalg.solve(powers[:-1, :-1], b[:-1])
        return x_t - alpha_t * b_h * _weighted(rhos, d1s)

    def _correct(self, sigmas, state, x0, sample, step_index):
        branches = [lambda args, p=p: self._correct_order(sigmas, *args, order=p) for p in range(1, self.order + 1)]
        args = (state["history"], state["last_sample"], sample, x0, step_index)
        return jax.lax.switch(state["last_order"] - 1, branches, args)

    def _correct_order(self, sigmas, history, last_sample, sample, x0, step_index, *, order: int):
        sigma_t, sigma_s0 = sigmas[step_index], sigmas[step_index - 1]
        alpha_t = 1 - sigma_t
        lambda_s0 = _lambda(sigma_s0)
        h = _lambda(sigma_t) - lambda_s0
        rks, d1s = _differences(sigmas, history, step_index, lambda_s0, h, order, offset=1)
        h_phi_1, b_h, b = _bh_coefficients(h, order, self.solver_type)
        if order == 1:
            rhos = jnp.full((1,), 0.5, sample.dtype)
        else:
            rhos = jnp.linalg.solve(jnp.stack([rks**i for i in range(order)]), b)
        x_t = sigma_t / sigma_s0 * last_sample - alpha_t * h_phi_1 * history[-1]
        correction = rhos[-1] * (x0 - history[-1])
        if order > 1:
            correction = _weighted(rhos[:-1], d1s) + correction
        return (x_t - alpha_t * b_h * correction).astype(sample.dtype)
