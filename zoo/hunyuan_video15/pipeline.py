"""HunyuanVideo-1.5 text-to-video sampling and decoding (follows diffusers `HunyuanVideo15Pipeline`).

From text features (Qwen2.5-VL hidden states and ByT5 glyph features with their masks, for the
prompt and the negative prompt) to frames: flow-match Euler over the shifted linear sigmas, one
jitted DiT call per step on the [cond; uncond] batch with classifier-free guidance, then the VAE
decode (tiled, stage by stage). The text towers live in `vidax.zoo.encoders`.

    pipe = HunyuanVideo15Pipeline(dit, dit_params, vae, vae_params)
    latents = pipe.sample(text, initial_noise, settings)
    frames = pipe.decode(latents)            # [B, F, H, W, 3] in [0, 1]
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.dit import Params
from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE
from vidax.zoo.pipeline import PipelineError
from vidax.zoo.samplers import FlowEuler, flow_match_schedule, guide_batched, sample

# The reference pipeline's fixed sizes.
IMAGE_TOKENS = 729  # SigLIP semantic tokens (all zeros for text-to-video)
DEFAULT_ASPECT = (16, 9)  # width : height when the user gives no size


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleSettings:
    """One generation's sampling settings (MODELS.md defaults: 121 frames, 50 steps, guidance 6).

    Args:
        height, width: pixels, multiples of 16.
        frames: 4k + 1.
        steps: flow-match Euler steps.
        guidance: classifier-free guidance scale; ≤ 1 runs the prompt branch only.
        shift: the schedule's static shift (480p 5, 720p T2V 9, 720p I2V 7).
    """

    height: int
    width: int
    frames: int = 121
    steps: int = 50
    guidance: float = 6.0
    shift: float = 5.0

    def __post_init__(self):
        if self.height % 16 or self.width % 16:
            raise PipelineError(f"height and width must be multiples of 16, got {self.height}x{self.width}")
        if (self.frames - 1) % 4:
            raise PipelineError(f"frames must be 4k+1 (the VAE compresses time 4x after the first frame), got {self.frames}")

    def latent_shape(self, batch: int, channels: int) -> tuple[int, ...]:
        return (batch, channels, (self.frames - 1) // 4 + 1, self.height // 16, self.width // 16)

    @property
    def cfg(self) -> bool:
        return self.guidance > 1.0


@dataclasses.dataclass(frozen=True)
class TextFeatures:
    """Prompt features as the DiT takes them; masks are bool. Shapes `[B, T1, D1]`, `[B, T2, D2]`."""

    text: jax.Array
    text_mask: jax.Array
    text_2: jax.Array
    text_mask_2: jax.Array

    @staticmethod
    def concat(cond: "TextFeatures", uncond: "TextFeatures") -> "TextFeatures":
        return TextFeatures(*(jnp.concatenate([c, u], 0) for c, u in zip(dataclasses.astuple(cond), dataclasses.astuple(uncond))))


def default_size(target_size: int, aspect: tuple[int, int] = DEFAULT_ASPECT, patch: int = 16) -> tuple[int, int]:
    """(height, width) of the reference's size bucket closest to `aspect` at `target_size` (480p: 640)."""
    patches = round((target_size / patch) ** 2)
    buckets, wp, hp = [], patches, 1
    while wp > 0:  # every (w, h) patch grid of about `patches` cells with aspect ratio ≤ 4
        if max(wp, hp) / min(wp, hp) <= 4.0:
            buckets.append((wp * patch, hp * patch))
        if (hp + 1) * wp <= patches:
            hp += 1
        else:
            wp -= 1
    ratio = aspect[1] / aspect[0]  # the reference passes (height, width) = (9, 16) into a (w, h) list
    diffs = [round(h / w, 5) - ratio for h, w in buckets]
    candidates = [(i, d) for i, d in enumerate(diffs) if (d <= 0 if ratio >= 1 else d >= 0)]
    height, width = buckets[min(candidates, key=lambda pair: abs(pair[1]))[0]]
    return height, width


def schedule_for(settings: SampleSettings) -> FlowEuler:
    """The reference's grid: `sigmas = linspace(1, 0, steps + 1)[:-1]`, shifted statically."""
    base = np.linspace(1.0, 0.0, settings.steps + 1)[:-1]
    return FlowEuler.from_schedule(flow_match_schedule(settings.steps, shift=settings.shift, base_sigmas=base))


class HunyuanVideo15Pipeline:
    """Text-to-video sampling and decoding with converted HunyuanVideo-1.5 weights.

    Args:
        transformer: the DiT; `dit_params` its (placed) parameter tree.
        vae: the VAE; `vae_params` its parameter tree.
        vae_scaling: the VAE config's `scaling_factor` (latents are divided by it before decode).
    """

    def __init__(self, transformer: HunyuanVideo15Transformer, dit_params: Params, vae: HunyuanVideo15VAE,
                 vae_params: Params, vae_scaling: float | None = None):
        self.transformer, self.dit_params = transformer, dit_params
        self.vae, self.vae_params = vae, vae_params
        self.vae_scaling = vae.cfg.scaling_factor if vae_scaling is None else vae_scaling

    def sample(self, prompt: TextFeatures, latents: jax.Array, settings: SampleSettings,
               negative: TextFeatures | None = None, callback=None) -> jax.Array:
        """Denoise `latents` `[B, 32, F', H', W']` (initial noise) with the prompt's features.

        Args:
            prompt: the prompt's text features.
            latents: initial noise, `settings.latent_shape(...)`.
            settings: sizes, steps, guidance and shift.
            negative: the negative prompt's features; required when `settings.cfg`.
            callback: `callback(step_index, latents)` after each step.
        """
        if settings.cfg and negative is None:
            raise PipelineError(f"guidance {settings.guidance} > 1 needs the negative prompt's features")
        text = TextFeatures.concat(prompt, negative) if settings.cfg else prompt
        model_fn = partial(_velocity, self.transformer, self.dit_params, text, settings.guidance if settings.cfg else None)
        return sample(lambda x, i, t: model_fn(x, jnp.float32(t)), schedule_for(settings), latents, callback=callback)

    def decode(self, latents: jax.Array, tiling: bool = True) -> np.ndarray:
        """Frames `[B, F, H, W, 3]` float32 in [0, 1] (diffusers' `postprocess_video(output_type="np")`)."""
        video = self.vae.decode(self.vae_params, latents / self.vae_scaling, tiling=tiling)
        frames = jnp.clip(video.astype(jnp.float32) / 2 + 0.5, 0, 1)
        return np.asarray(jnp.moveaxis(frames, 1, -1))


@partial(jax.jit, static_argnums=(0, 3))
def _velocity(transformer: HunyuanVideo15Transformer, params: Params, text: TextFeatures, guidance: float | None,
              latents: jax.Array, timestep: jax.Array) -> jax.Array:
    """One DiT call (both CFG branches as one batch) and the guided velocity."""
    branches = 1 if guidance is None else 2
    x = jnp.concatenate([latents] * branches, axis=0)
    t = jnp.broadcast_to(timestep, (x.shape[0],)).astype(jnp.float32)
    x, image = t2v_inputs(transformer, x)
    out = transformer(params, x, t, text.text, text.text_mask, text.text_2, text.text_mask_2, image)
    return out if guidance is None else guide_batched(out, guidance)


def t2v_inputs(transformer: HunyuanVideo15Transformer, latents: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Text-to-video DiT inputs: latents plus zero condition latents and mask (65 channels), zero image tokens."""
    cfg = transformer.cfg
    b = latents.shape[0]
    zeros = jnp.zeros((b, cfg.in_channels - latents.shape[1], *latents.shape[2:]), latents.dtype)
    image = jnp.zeros((b, IMAGE_TOKENS, cfg.image_embed_dim), latents.dtype)
    return jnp.concatenate([latents, zeros], axis=1), image


jax.tree_util.register_dataclass(TextFeatures, data_fields=["text", "text_mask", "text_2", "text_mask_2"], meta_fields=[])

