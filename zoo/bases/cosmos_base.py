"""What Cosmos-Predict2.5 and Cosmos3 do alike on the family contract (both families build on it).

Both run one DiT in its weights' dtype over normalised Wan VAE latents (Wan2.1's for Predict2.5,
Wan2.2's for Cosmos3), take `--image` or a `--video` clip as conditioning, and read their shift from
the folder's scheduler.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import ClassVar, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.parts.conditioning_media import read_clip
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Decoded, DiTPart, Family, Inputs, Settings
from vidax.zoo.errors import PipelineError
from vidax.zoo.parts.wan_vae import WanVAE, WanVAEConfig


def normalize(latents: jax.Array, mean, std) -> jax.Array:
    """VAE latents -> the DiT's: `(z - mean) * (1 / std)`, as `prepare_latents` (Cosmos3: `_encode_video`)
    writes it."""
    shape = (1, -1) + (1,) * (latents.ndim - 2)
    inv_std = 1.0 / jnp.asarray(std, jnp.float32).reshape(shape)
    return (latents - jnp.asarray(mean, jnp.float32).reshape(shape)) * inv_std


def denormalize(latents: jax.Array, mean, std) -> jax.Array:
    """The DiT's latents -> VAE latents before decode: `z / (1 / std) + mean`, as the pipeline writes it."""
    shape = (1, -1) + (1,) * (latents.ndim - 2)
    inv_std = 1.0 / jnp.asarray(std, jnp.float32).reshape(shape)
    return latents / inv_std + jnp.asarray(mean, jnp.float32).reshape(shape)


class CosmosBase(Family):
    """A Cosmos family: subclasses set `transformer_class` (built as `cls(dit_config, dtype=...)`), a
    `dit_config` property, and `makes` (what conditioning makes, in messages: "video" or "world")."""

    transformer_class: ClassVar[type]
    makes: ClassVar[str] = "video"
    frame_step = 1  # any count: the VAE encodes the first 4k+1 frames (Cosmos3's prompt says the count asked for)

    # --- configs ----------------------------------------------------------------------------

    @cached_property
    def vae_config(self) -> WanVAEConfig:
        return WanVAEConfig.from_hf_config(self.require_config("vae", "vae/config.json"))

    def heads(self) -> int:
        return self.dit_config.num_attention_heads

    def scheduler_shift(self) -> float | None:
        """The folder scheduler's `flow_shift` (or `shift`); None without one or with Karras sigmas."""
        scheduler = self.scheduler_config()
        shift = scheduler.get("flow_shift") if "flow_shift" in scheduler else scheduler.get("shift")
        return None if shift is None or scheduler.get("use_karras_sigmas") else float(shift)

    # --- settings and inputs ----------------------------------------------------------------

    def image_roles(self) -> dict[str, bool]:
        return {"image": False}

    def read_inputs(self, options) -> Inputs:
        """`--image` (image-to-X) or `--video` (video-to-X, its frames under `images["video"]`)."""
        video = (options.extra or {}).get("video")
        if video is not None and (options.image is not None or (options.images or {}).get("image") is not None):
            raise PipelineError(f"{self.name}: give --image (image-to-{self.makes}) or --video "
                                f"(video-to-{self.makes}), not both")
        inputs = super().read_inputs(options)
        if video is None:
            return inputs
        return dataclasses.replace(inputs, images={**inputs.images, "video": read_clip(video)})

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        v = self.vae_config
        return (1, v.z_dim, (s.frames - 1) // v.scale_factor_temporal + 1, s.height // v.scale_factor_spatial,
                s.width // v.scale_factor_spatial)

    # --- the VAE ----------------------------------------------------------------------------

    def encode_video(self, run: Run, video: np.ndarray) -> jax.Array:
        """Normalised latents of the conditioning video `[1, 3, F, H, W]` in [-1, 1] (its first 4k+1 frames: the
        reference's encoder leaves the rest out)."""
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        v = self.vae_config
        video = video[:, :, : (video.shape[2] - 1) // v.scale_factor_temporal * v.scale_factor_temporal + 1]
        latents = normalize(WanVAE(v).encode(params, jnp.asarray(video)), v.latents_mean, v.latents_std)
        latents.block_until_ready()
        run.done(params)
        return latents

    def decode_video(self, run: Run, s: Settings, latents: jax.Array) -> np.ndarray:
        """Video `[1, 3, F, H, W]` in [-1, 1] from the DiT's (normalised) latents."""
        v = self.vae_config
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        video = WanVAE(v).decode(params, denormalize(latents.astype(jnp.float32), v.latents_mean, v.latents_std))
        video = np.asarray(video)
        run.done(params)
        return video

    def decode(self, run: Run, s: Settings, latents: jax.Array) -> Decoded:
        """Frames `[F, H, W, 3]` float32 in [0, 1] (diffusers' `postprocess_video(output_type="np")`)."""
        video = self.decode_video(run, s, latents)
        return Decoded(np.clip(video[0] / 2 + 0.5, 0.0, 1.0).transpose(1, 2, 3, 0).astype(np.float32))

    # --- denoise ----------------------------------------------------------------------------

    def dit_parts(self, s: Settings) -> list[DiTPart]:
        return [self.component("transformer")]

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: Settings):
        # computes in its weights' dtype, as diffusers runs the transformer in its own
        return self.transformer_class(self.dit_config, dtype=jnp.dtype(tree["proj_out/kernel"].dtype))
