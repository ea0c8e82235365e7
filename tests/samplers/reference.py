"""Shared harness: run a diffusers scheduler and one of our steppers on the same fake model.

The fake model is `v_i = 0.5·x + ε_i` with fixed per-step ε_i, so every step depends on the
latents (a wrong coefficient anywhere compounds) and the comparison needs no network.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np
import torch

from vidax.zoo.samplers import sample

SHAPE = (1, 4, 3, 4, 4)  # [B, C, F, H, W]
NUM_STEPS = 8
# Relative L2 error allowed per step: float32 round-off differs between torch and XLA by a few ulp
# per operation, and 8 steps of a multistep solver amplify that to ~1e-6 at most.
TRAJECTORY_RTOL = 1e-5


def fake_inputs(num_steps: int = NUM_STEPS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(SHAPE).astype(np.float32)
    eps = rng.standard_normal((num_steps, *SHAPE)).astype(np.float32)
    return latents, eps


def diffusers_trajectory(
    scheduler,
    latents: np.ndarray,
    eps: np.ndarray,
    *,
    timesteps=None,
    step: Callable | None = None,
) -> list[np.ndarray]:
    """Latents after every step of `scheduler` (whose `set_timesteps` the caller just ran)."""
    timesteps = scheduler.timesteps if timesteps is None else timesteps
    x = torch.from_numpy(latents.copy())
    out = []
    for i, t in enumerate(timesteps):
        model_output = 0.5 * x + torch.from_numpy(eps[i])
        if step is None:
            x = scheduler.step(model_output, t, x, return_dict=False)[0]
        else:
            x = step(i, t, model_output, x)
        out.append(x.numpy().copy())
    return out


def our_trajectory(stepper, latents: np.ndarray, eps: np.ndarray, *, key=None) -> list[np.ndarray]:
    eps = jnp.asarray(eps)
    out = []
    sample(
        lambda x, i, t: 0.5 * x + eps[i],
        stepper,
        jnp.asarray(latents),
        key=key,
        callback=lambda i, x: out.append(np.asarray(x)),
    )
    return out


def assert_trajectories_close(ours: list[np.ndarray], ref: list[np.ndarray], rtol: float = TRAJECTORY_RTOL) -> None:
    assert len(ours) == len(ref), (len(ours), len(ref))
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert np.all(np.isfinite(b)), f"reference step {i} is not finite"
        err = np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b)
        assert err <= rtol, f"step {i}: relative error {err:.3g} > {rtol:g}"


def assert_grid_equal(ours, ref, name: str) -> None:
    ref = np.asarray(ref.numpy() if isinstance(ref, torch.Tensor) else ref)
    np.testing.assert_allclose(np.asarray(ours, np.float64), ref.astype(np.float64), rtol=1e-6, atol=1e-6, err_msg=name)
