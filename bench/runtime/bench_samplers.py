"""Sampler step cost: index as data (one compile) vs index as a static argument (one compile per
step), and diffusers' torch scheduler on the same latents, for a 30-step trajectory.

    .venv/bin/python -m bench samplers
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.samplers import FlowEuler, UniPC, flow_match_schedule, jitted_step, unipc_flow_schedule
from vidax.zoo.samplers.loop import _step_and_check

SHAPE = (1, 16, 5, 30, 52)  # a Wan 480p latent cut to 5 frames (~125k values)
STEPS = 30


def _run(step, stepper, latents, eps, *, static: bool) -> float:
    state = stepper.init(latents)
    start = time.perf_counter()
    for i in range(STEPS):
        out = 0.5 * state["latents"] + eps
        index = i if static else jnp.int32(i)
        state, x, finite = step(stepper, state, out, index)
        bool(finite)
    jax.block_until_ready(state["latents"])
    return time.perf_counter() - start


def _diffusers_run(name: str, latents: np.ndarray, eps: np.ndarray) -> float | None:
    try:
        import torch
        from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler
    except ImportError:
        return None
    if name == "unipc":
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0)
        scheduler.set_timesteps(STEPS)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler(shift=7.0)
        scheduler.set_timesteps(STEPS)
    x, e = torch.from_numpy(latents), torch.from_numpy(eps)
    start = time.perf_counter()
    for t in scheduler.timesteps:
        x = scheduler.step(0.5 * x + e, t, x, return_dict=False)[0]
    return time.perf_counter() - start


def main() -> None:
    rng = np.random.default_rng(0)
    latents = rng.standard_normal(SHAPE).astype(np.float32)
    eps = rng.standard_normal(SHAPE).astype(np.float32)
    steppers = {
        "flow-euler": FlowEuler.from_schedule(flow_match_schedule(STEPS, shift=7.0)),
        "unipc-2": UniPC.from_schedule(unipc_flow_schedule(STEPS, shift=5.0)),
    }
    static_step = jax.jit(_step_and_check, static_argnums=3)
    print(f"latents {SHAPE}, {STEPS} steps, backend {jax.default_backend()}")
    print(f"{'stepper':<12} {'variant':<22} {'compiles':>8} {'1st run s':>10} {'2nd run s':>10} {'ms/step':>8}")
    for name, stepper in steppers.items():
        lat, e = jnp.asarray(latents), jnp.asarray(eps)
        for variant, step, static in (("index as data", jitted_step, False), ("index static", static_step, True)):
            before = step._cache_size()
            first = _run(step, stepper, lat, e, static=static)
            second = _run(step, stepper, lat, e, static=static)
            compiles = step._cache_size() - before
            print(f"{name:<12} {variant:<22} {compiles:>8} {first:>10.2f} {second:>10.2f} {1e3 * second / STEPS:>8.2f}")
        torch_s = _diffusers_run("unipc" if name.startswith("unipc") else "euler", latents, eps)
        if torch_s is not None:
            print(f"{name:<12} {'diffusers (torch CPU)':<22} {'-':>8} {torch_s:>10.2f} {'-':>10} {1e3 * torch_s / STEPS:>8.2f}")


if __name__ == "__main__":
    main()
