"""The training objectives, their noise levels, and one optimiser step.

Noise levels σ in [0, 1) (`sample_sigmas`) follow musubi-tuner's `get_noisy_model_input_and_timesteps`
(`hv_train_network.py`; its Wan, HunyuanVideo and LTX trainers inherit it):

- `uniform`: σ ~ U(0, 1);
- `shift` (musubi-tuner's recommendation for Wan: `--timestep_sampling shift --discrete_flow_shift 3.0`):
  σ = sigmoid(sigmoid_scale · N(0, 1)), then shifted as the sampler shifts, σ ← shift·σ / (1 + (shift − 1)·σ).

A range [low, high) (a Wan2.2 A14B expert's share of the noise levels) keeps the distribution's shape within it
(musubi-tuner's `--min_timestep/--max_timestep` with `--preserve_distribution_shape`), drawn exactly by the
inverse CDF instead of by rejection.

The losses (`Flow`, `VPrediction`): the flow-matching loss of the Wan, HunyuanVideo and LTX trainers (x_t =
(1 − σ)·x0 + σ·noise, target noise − x0, the DiT at timestep σ·1000: musubi-tuner feeds σ·1000 + 1, vidax the
sampler's own scale as diffusers' training scripts do), and CogVideoX's v-prediction on a DDPM schedule as
diffusers' `train_cogvideox_lora.py` computes it (t = ⌊σ·T⌋, x_t = √ᾱ·x0 + √(1 − ᾱ)·noise, the prediction turned
into x0 = √ᾱ·x_t − √(1 − ᾱ)·v and compared with x0, weighted by 1 / (1 − ᾱ)).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.scipy.special import ndtr, ndtri

from vidax.train.lora import Lora, lora_blocks, with_lora
from vidax.zoo.parts.dit import forward

SAMPLINGS = ("shift", "uniform")
# what `jax.checkpoint` keeps of each block for the backward pass besides its input: nothing (recompute it all);
# also the outputs of the attention kernels (a TPU's Pallas calls: their backward then reruns only the
# projections); nothing, with each block's input moved to host memory until the backward pass reads it; or both
# moved there (the attention kernels' outputs of every block do not fit a 16 GB chip beside the rest at 480p)
REMAT = {"full": None, "attention": "pallas", "offload": "offload", "attention_offload": "pallas_offload"}


@dataclasses.dataclass(frozen=True)
class Flow:
    """Flow matching: x_t = (1 − σ)·x0 + σ·noise, velocity target noise − x0, timestep σ·1000."""

    def noised(self, x0, noise, sigmas):
        s = sigmas.reshape(-1, *(1,) * (x0.ndim - 1))
        return (1.0 - s) * x0 + s * noise, sigmas * 1000.0

    def compare(self, out, x0, noise, noisy, sigmas):
        """(prediction, target, per-row weight) in fp32."""
        return out, noise - x0, jnp.ones(x0.shape[:1], jnp.float32)


@dataclasses.dataclass(frozen=True)
class VPrediction:
    """CogVideoX's DDPM v-prediction (module docstring); `alphas_cumprod` the scheduler's ᾱ table."""

    alphas_cumprod: tuple[float, ...]

    def _alpha(self, sigmas):
        table = jnp.asarray(self.alphas_cumprod, jnp.float32)
        t = jnp.minimum(jnp.floor(sigmas * len(table)), len(table) - 1).astype(jnp.int32)
        return t, table[t]

    def noised(self, x0, noise, sigmas):
        t, a = self._alpha(sigmas)
        a = a.reshape(-1, *(1,) * (x0.ndim - 1))
        return jnp.sqrt(a) * x0 + jnp.sqrt(1.0 - a) * noise, t.astype(jnp.float32)

    def compare(self, out, x0, noise, noisy, sigmas):
        _, a = self._alpha(sigmas)
        b = a.reshape(-1, *(1,) * (x0.ndim - 1))
        return jnp.sqrt(b) * noisy - jnp.sqrt(1.0 - b) * out, x0, 1.0 / (1.0 - a)


@dataclasses.dataclass(frozen=True)
class Objective:
    """How noise levels are drawn, the loss, and how the blocks run (hashable: a jit static).

    Args:
      scale: the LoRA's alpha / rank.
      sampling, shift, sigmoid_scale: the noise levels (module docstring).
      low, high: the range of σ drawn (an A14B expert's share; 0, 1: all).
      loss: `Flow()` or `VPrediction(alphas_cumprod)`.
      checkpoint: recompute each block's activations in the backward pass (`jax.checkpoint`).
      carry_dtype: the hidden state's dtype between blocks ("bfloat16" halves what the backward keeps; None:
        the model's).
      remat: what the checkpoint keeps besides each block's input (`REMAT`).
      stream: the base blocks live in host memory, brought to the device block by block (`lora_blocks`).
    """

    scale: float
    sampling: str = "shift"
    shift: float = 3.0
    sigmoid_scale: float = 1.0
    low: float = 0.0
    high: float = 1.0
    loss: Any = Flow()
    checkpoint: bool = True
    carry_dtype: str | None = None
    remat: str = "full"
    stream: bool = False

    def __post_init__(self):
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"timestep sampling must be one of {', '.join(SAMPLINGS)}, got {self.sampling!r}")
        if not 0.0 <= self.low < self.high <= 1.0:
            raise ValueError(f"the noise-level range must be within [0, 1], got [{self.low}, {self.high})")
        if self.remat not in REMAT:
            raise ValueError(f"remat must be one of {', '.join(REMAT)}, got {self.remat!r}")


def shifted(sigma, objective: Objective):
    return objective.shift * sigma / (1.0 + (objective.shift - 1.0) * sigma)


def _unshifted_normal(sigma, objective: Objective):
    """The N(0, 1) draw that `shift` sampling turns into `sigma` (its inverse; ±inf at 0 and 1)."""
    g = sigma / (objective.shift - (objective.shift - 1.0) * sigma)
    return jnp.log(g / (1.0 - g)) / objective.sigmoid_scale


def sample_sigmas(key: jax.Array, batch: int, objective: Objective) -> jax.Array:
    """`[batch]` noise levels in [low, high) drawn as `objective.sampling` says (module docstring)."""
    whole = objective.low == 0.0 and objective.high == 1.0
    if objective.sampling == "uniform":
        return objective.low + (objective.high - objective.low) * jax.random.uniform(key, (batch,), jnp.float32)
    if whole:
        z = jax.random.normal(key, (batch,), jnp.float32)
    else:  # the normal draw truncated to the range's preimage, by its inverse CDF
        lo, hi = (ndtr(_unshifted_normal(jnp.float32(v), objective)) for v in (objective.low, objective.high))
        z = ndtri(lo + (hi - lo) * jax.random.uniform(key, (batch,), jnp.float32))
    sigma = shifted(jax.nn.sigmoid(objective.sigmoid_scale * z), objective)
    return sigma if whole else jnp.clip(sigma, objective.low, jnp.nextafter(jnp.float32(objective.high), 0.0))


def range_share(objective: Objective, low: float, high: float) -> float:
    """The probability that a σ drawn over [0, 1) lands in [low, high) (an A14B expert's share of the steps)."""
    if objective.sampling == "uniform":
        return high - low
    cdf = lambda v: float(ndtr(_unshifted_normal(jnp.float32(v), objective)))  # noqa: E731
    return cdf(high) - cdf(low)


def remat_policy(objective: Objective) -> Callable | None:
    kind = REMAT[objective.remat]
    if kind == "pallas":
        return lambda prim, *_, **__: prim.name == "pallas_call"
    if kind == "offload" and host_memory() is not None:
        from vidax.train.lora import BLOCK_INPUT

        return jax.checkpoint_policies.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=[BLOCK_INPUT], offload_src="device",
            offload_dst="pinned_host")
    if kind == "pallas_offload":
        return _attention_offload if host_memory() is not None else (lambda prim, *_, **__: prim.name == "pallas_call")
    return None


def _attention_offload(prim, *_, **params):
    """Each block's input and its attention kernels' outputs moved to host memory for the backward pass, the rest
    recomputed (JAX's policy values are not public: `jax.checkpoint_policies` builds them from the same module)."""
    from jax._src.interpreters import partial_eval as pe

    from vidax.train.lora import BLOCK_INPUT

    if prim.name == "pallas_call" or (prim.name == "name" and params.get("name") == BLOCK_INPUT):
        return pe.Offloadable(src="device", dst="pinned_host")
    return pe.Recompute


_TARGET: list = []  # a device to compile for instead of this process's (`targeting`: a chip this host lacks)


class targeting:
    """While active, `host_memory` and `device_memory` answer for `device` (an ahead-of-time compile's target)."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        _TARGET.append(self.device)

    def __exit__(self, *exc):
        _TARGET.pop()


def host_memory(device=None):
    """The device's pinned host memory kind, or None where the backend has none (CPU: nothing to offload)."""
    device = device or (_TARGET[-1] if _TARGET else jax.devices()[0])
    try:
        kinds = {m.kind for m in device.addressable_memories()}
    except Exception:  # a backend without memory kinds
        return None
    return "pinned_host" if "pinned_host" in kinds and device.platform != "cpu" else None


def device_memory(device=None):
    """A sharding of the device's own memory, where the backend has memory kinds (None on CPU)."""
    from jax.sharding import SingleDeviceSharding

    device = device or (_TARGET[-1] if _TARGET else jax.devices()[0])
    return SingleDeviceSharding(device, memory_kind="device") if host_memory(device) else None


def dit_loss(model, inputs, objective: Objective, base: Any, lora: Lora, batch: dict, noise: jax.Array,
             sigmas: jax.Array) -> jax.Array:
    """The objective's loss of the DiT with its LoRA, merged block by block (fp32).

    Args:
      inputs: the family's DiT-input builder (`vidax.train.families`): `inputs(x0, noisy, timestep, sigmas, batch)
        -> (DiT arguments, loss mask or None)`, `inputs.output(out, x0) -> [B, C, F, H, W]`.
      batch: `latents` (clean x0 `[B, C, F, H, W]`, normalised as the pipeline's VAE step leaves them) and the
        family's conditions (text features, image conditions), each `[B, ...]`.
      noise: `[B, C, F, H, W]` standard normal; sigmas: `[B]` noise levels in [0, 1).
    """
    x0 = batch["latents"].astype(jnp.float32)
    noisy, timestep = objective.loss.noised(x0, noise, sigmas)
    args, mask = inputs(x0, noisy, timestep, sigmas, batch)
    carry = objective.carry_dtype and jnp.dtype(objective.carry_dtype)
    run = lora_blocks(objective.scale, objective.checkpoint, carry, remat_policy(objective),
                      device_memory() if objective.stream else None)
    out = inputs.output(forward(model, with_lora(base, lora), *args, run_blocks=run), x0).astype(jnp.float32)
    pred, target, weight = objective.loss.compare(out, x0, noise, noisy, sigmas)
    error = jnp.square(pred - target) * weight.reshape(-1, *(1,) * (x0.ndim - 1))
    if mask is None:
        return jnp.mean(error)
    mask = jnp.broadcast_to(mask, error.shape)
    return jnp.sum(error * mask) / jnp.maximum(jnp.sum(mask), 1.0)


loss_and_grad = jax.value_and_grad(dit_loss, argnums=4)


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


@partial(jax.jit, static_argnums=(0, 1, 2, 3), donate_argnums=(5, 6))
def train_step(model, inputs, objective: Objective, adamw: AdamW, base: Any, lora: Lora, opt_state: Any,
               batch: dict, key: jax.Array):
    """One AdamW step on the LoRA; returns (lora, opt_state, loss). `base` stays frozen."""
    noise, sigmas = step_noise(key, batch["latents"].shape, objective)
    loss, grads = loss_and_grad(model, inputs, objective, base, lora, batch, noise, sigmas)
    updates, opt_state = adamw.transform().update(grads, opt_state, lora)
    return optax.apply_updates(lora, updates), opt_state, loss


@partial(jax.jit, static_argnums=(0, 1, 2))
def eval_loss(model, inputs, objective: Objective, base: Any, lora: Lora, batch: dict, noise: jax.Array,
              sigmas: jax.Array) -> jax.Array:
    """The loss at given noise and noise levels, no gradient (validation)."""
    return dit_loss(model, inputs, objective, base, lora, batch, noise, sigmas)
