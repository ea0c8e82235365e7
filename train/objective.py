"""The flow-matching objective of the Wan trainers, its noise levels, and one optimiser step.

Noise levels (`sample_sigmas`) follow musubi-tuner's `hv_train_network.py`,
`get_noisy_model_input_and_timesteps` (its `wan_train_network.py` inherits it):

- `uniform`: σ ~ U(0, 1);
- `shift` (musubi-tuner's recommendation for Wan: `--timestep_sampling shift --discrete_flow_shift 3.0`):
  σ = sigmoid(sigmoid_scale · N(0, 1)), then shifted as the sampler shifts, σ ← shift·σ / (1 + (shift − 1)·σ).

Then x_t = (1 − σ)·x0 + σ·noise, the target is the velocity noise − x0, and the loss is the mean squared
error of the DiT's prediction at timestep σ·1000 (musubi-tuner feeds σ·1000 + 1; vidax feeds the
sampler's own scale, σ·1000, as diffusers' Wan training scripts do).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax

from vidax.train.lora import Lora, lora_blocks, with_lora
from vidax.zoo.parts.dit import forward

SAMPLINGS = ("shift", "uniform")


@dataclasses.dataclass(frozen=True)
class Objective:
    """How noise levels are drawn, and the LoRA scale the forward applies (hashable: a jit static)."""

    scale: float
    sampling: str = "shift"
    shift: float = 3.0
    sigmoid_scale: float = 1.0
    checkpoint: bool = True
    # the hidden state's dtype between blocks ("bfloat16" halves what the backward keeps; None: the model's)
    carry_dtype: str | None = None

    def __post_init__(self):
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"timestep sampling must be one of {', '.join(SAMPLINGS)}, got {self.sampling!r}")


def sample_sigmas(key: jax.Array, batch: int, objective: Objective) -> jax.Array:
    """`[batch]` noise levels in (0, 1) drawn as `objective.sampling` says (module docstring)."""
    if objective.sampling == "uniform":
        return jax.random.uniform(key, (batch,), jnp.float32)
    sigma = jax.nn.sigmoid(objective.sigmoid_scale * jax.random.normal(key, (batch,), jnp.float32))
    return objective.shift * sigma / (1.0 + (objective.shift - 1.0) * sigma)


def flow_loss(model, objective: Objective, base: Any, lora: Lora, latents: jax.Array, noise: jax.Array,
              sigmas: jax.Array, text: jax.Array) -> jax.Array:
    """MSE between the DiT's velocity at x_t and noise − x0 (fp32), the LoRA merged block by block.

    Args:
      latents: clean latents x0 `[B, C, F, H, W]` (normalised as the pipeline's VAE step leaves them).
      noise: `[B, C, F, H, W]` standard normal.
      sigmas: `[B]` noise levels in [0, 1].
      text: text embeddings `[B, T, text_dim]`.
    """
    s = sigmas.reshape(-1, *(1,) * (latents.ndim - 1))
    noisy = (1.0 - s) * latents + s * noise
    target = noise - latents
    run = lora_blocks(objective.scale, objective.checkpoint, objective.carry_dtype and jnp.dtype(objective.carry_dtype))
    pred = forward(model, with_lora(base, lora), noisy, sigmas * 1000.0, text, None, run_blocks=run)
    return jnp.mean(jnp.square(pred.astype(jnp.float32) - target.astype(jnp.float32)))


loss_and_grad = jax.value_and_grad(flow_loss, argnums=3)


@dataclasses.dataclass(frozen=True)
class AdamW:
    """optax's AdamW with torch.optim.AdamW's defaults (betas 0.9 / 0.999, eps 1e-8, weight decay 0.01)."""

    lr: float = 1e-4
    weight_decay: float = 0.01

    def transform(self) -> optax.GradientTransformation:
        return optax.adamw(self.lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=self.weight_decay)

    def init(self, lora: Lora) -> Any:
        return self.transform().init(lora)


def step_noise(key: jax.Array, shape: tuple[int, ...], objective: Objective) -> tuple[jax.Array, jax.Array]:
    """(noise, σ) of one step, from its own key: a step's randomness depends on the seed and step alone."""
    k_noise, k_sigma = jax.random.split(key)
    return jax.random.normal(k_noise, shape, jnp.float32), sample_sigmas(k_sigma, shape[0], objective)


@partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(4, 5))
def train_step(model, objective: Objective, adamw: AdamW, base: Any, lora: Lora,
               opt_state: Any, latents: jax.Array, text: jax.Array, key: jax.Array):
    """One AdamW step on the LoRA; returns (lora, opt_state, loss). `base` stays frozen."""
    noise, sigmas = step_noise(key, latents.shape, objective)
    loss, grads = loss_and_grad(model, objective, base, lora, latents, noise, sigmas, text)
    updates, opt_state = adamw.transform().update(grads, opt_state, lora)
    return optax.apply_updates(lora, updates), opt_state, loss
