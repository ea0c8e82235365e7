"""Cosmos3's pure pipeline pieces (follow diffusers `Cosmos3OmniPipeline`, vision generation).

One denoising step of the reference, for normalised Wan2.2 latents `x` `[1, 48, T, H/16, W/16]`
whose conditioning frames hold the clean conditioning latents (written in once, at the start):

    t        = int(sigma_i * 1000)                  # the scheduler's int64 timesteps (truncated)
    v        = DiT(ids, x, t, noisy) * noisy         # zero on conditioning frames
    guided   = v_uncond + g * (v_cond - v_uncond)    # guidance 6 by default (not Predict2.5's form)
    x        = scheduler.step(guided, x)             # zero velocity keeps the conditioning frames

Image-to-video conditions latent frame 0 (the image, repeated over every frame and encoded as one
video); video-to-video the latent frames `condition_frame_indexes` (default 0, 1) of the clip's
first (or last) `4 * max(index) + 1` frames, the rest padded with its last frame. The reference adds
no noise to conditioning frames.

Checkpoints with `use_native_flow_schedule` (Edge) pass explicit sigmas `linspace(1 - 1/1000, 0)` to
the scheduler (`native_flow_sigmas`); the others use its own spacing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.bases.cosmos_base import denormalize, normalize  # noqa: F401 (Cosmos3 normalises as Predict2.5)

TEMPORAL, SPATIAL = 4, 16  # Wan2.2 VAE compression

# The latents' normalisation is Predict2.5's (`_encode_video`, and its inverse before decode): `normalize`,
# `denormalize` from the shared Cosmos base.


def latent_shape(frames: int, height: int, width: int, channels: int = 48) -> tuple[int, ...]:
    """`[1, C, (frames - 1) // 4 + 1, height // 16, width // 16]`; the pipeline runs one sample (the DiT
    zero-pads latents whose height or width is odd to its 2x2 patches)."""
    if height % SPATIAL or width % SPATIAL:
        raise ValueError(f"height and width must be multiples of {SPATIAL}, got {height}x{width}")
    return 1, channels, (frames - 1) // TEMPORAL + 1, height // SPATIAL, width // SPATIAL


def condition_frames(latent_frames: int, mode: str, condition_frame_indexes=(0, 1)) -> np.ndarray:
    """The per-latent-frame conditioning mask `[T]` (1 = clean): text-to-video none, image-to-video
    frame 0, video-to-video the given indexes (those inside the timeline)."""
    mask = np.zeros(latent_frames, np.float32)
    if mode == "i2v":
        mask[0] = 1
    elif mode == "v2v":
        mask[[i for i in condition_frame_indexes if 0 <= i < latent_frames]] = 1
    elif mode != "t2v":
        raise ValueError(f"mode must be t2v, i2v or v2v, got {mode!r}")
    return mask


def image_video(image: np.ndarray, num_frames: int) -> np.ndarray:
    """Image-to-video's VAE input `[1, 3, num_frames, H, W]`: the image on every frame.

    Args:
      image: `[3, H, W]` in [-1, 1] at the generation size (the reference's cover-resize, center
        crop and 8-bit rounding are the caller's preprocessing).
    """
    return np.broadcast_to(image[None, :, None], (1, 3, num_frames) + image.shape[1:]).astype(np.float32)


def video_video(frames: np.ndarray, num_frames: int, condition_frame_indexes=(0, 1), keep: str = "first") -> np.ndarray:
    """Video-to-video's VAE input `[1, 3, num_frames, H, W]`: the clip's first (or last)
    `4 * max(index) + 1` frames, then its last kept frame repeated.

    Args:
      frames: `[3, T, H, W]` in [-1, 1] at the generation size.
    """
    count = max(condition_frame_indexes) * TEMPORAL + 1
    clip = frames[:, :count] if keep == "first" else frames[:, -count:]
    fill = min(clip.shape[1], num_frames)
    video = np.empty((1, 3, num_frames) + frames.shape[2:], np.float32)
    video[0, :, :fill] = clip[:, :fill]
    video[0, :, fill:] = clip[:, fill - 1:fill]
    return video


def initial_latents(clean: jax.Array, noise: jax.Array, mask: np.ndarray) -> jax.Array:
    """`mask * x0 + (1 - mask) * noise` per latent frame (`prepare_latents`)."""
    m = jnp.asarray(mask, jnp.float32)[None, None, :, None, None]
    return m * clean + (1 - m) * noise


def vision_timestep(sigma) -> np.ndarray:
    """The DiT's timestep for a flow sigma: the scheduler's `int64(sigma * 1000)` (truncated), as a float."""
    return np.trunc(np.asarray(sigma, np.float64) * 1000.0).astype(np.float32)


def native_flow_sigmas(num_steps: int, num_train_timesteps: int = 1000) -> np.ndarray:
    """The sigmas `use_native_flow_schedule` checkpoints hand the scheduler."""
    return np.linspace(1.0 - 1.0 / num_train_timesteps, 0.0, num_steps + 1)[:-1]


def guide(cond: jax.Array, uncond: jax.Array, scale: float) -> jax.Array:
    """`uncond + g * (cond - uncond)`; the reference skips the negative branch when g == 1."""
    return uncond + scale * (cond - uncond)
