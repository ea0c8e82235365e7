"""Cosmos-Predict2.5's pure pipeline pieces (follow diffusers `Cosmos2_5_PredictBasePipeline`).

One denoising step of the reference, for latents `x` `[B, 16, F', H', W']` (normalised Wan2.1
latents), conditioning latents `c` (zeros for text-to-video) and the mask `m` (1 on the first
`n` latent frames):

    timestep  = m_frame * 1e-4 + (1 - m_frame) * sigma_i        # [B, F'], sigma_i = scheduler.sigmas[i]
    v         = DiT(m * c + (1 - m) * x, m, timestep, text)     # the DiT sees clean conditioning frames
    v         = gt + v * (1 - m),  gt = (x_0 - c) * m           # x_0: the INITIAL noise, fixed before the loop
    guided    = v_cond + g * (v_cond - v_uncond)                # not uncond + g * (cond - uncond)
    x         = scheduler.step(guided, x)                       # the step sees x, not the mixed input

Image-to-video conditions on one latent frame (the image, then black frames, encoded as one video);
video-to-video on `num_latent_conditional_frames` (1 or 2) latent frames, i.e. the clip's last
`4 * (n - 1) + 1` pixel frames padded with its last frame. The reference adds no noise to the
conditioning frames (their timestep is 1e-4), so no augmentation input is needed here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

CONDITIONAL_FRAME_TIMESTEP = 1e-4  # the pipeline's `conditional_frame_timestep` default
TEMPORAL, SPATIAL = 4, 8  # Wan2.1 VAE compression


def latent_shape(batch: int, frames: int, height: int, width: int, channels: int = 16) -> tuple[int, ...]:
    """`[B, C, (frames - 1) // 4 + 1, height // 8, width // 8]` (the pipeline's `prepare_latents`)."""
    if height % 16 or width % 16:  # the pipeline's check_inputs
        raise ValueError(f"height and width must be multiples of 16, got {height}x{width}")
    return batch, channels, (frames - 1) // TEMPORAL + 1, height // SPATIAL, width // SPATIAL


def conditional_latent_frames(num_frames_in: int) -> int:
    """Latent frames the pipeline keeps clean for `num_frames_in` conditioning pixel frames (0: none)."""
    return 0 if num_frames_in == 0 else (num_frames_in - 1) // TEMPORAL + 1


def condition_mask(shape: tuple[int, ...], num_cond_latent_frames: int | list[int]) -> tuple[np.ndarray, np.ndarray]:
    """`(indicator [B, 1, F', 1, 1], mask [B, 1, F', H', W'])`: 1 on each sample's first conditioning
    frames (`create_condition_mask`)."""
    b, _, f, h, w = shape
    counts = [num_cond_latent_frames] * b if isinstance(num_cond_latent_frames, int) else list(num_cond_latent_frames)
    indicator = (np.arange(f)[None, :] < np.asarray(counts)[:, None]).astype(np.float32).reshape(b, 1, f, 1, 1)
    return indicator, np.broadcast_to(indicator, (b, 1, f, h, w)).copy()


def frame_timesteps(indicator: jax.Array, sigma: jax.Array,
                    conditional_frame_timestep: float = CONDITIONAL_FRAME_TIMESTEP) -> jax.Array:
    """The DiT's per-latent-frame timestep `[B, F']`: 1e-4 on conditioning frames, the step's sigma elsewhere.

    Args:
      indicator: `[B, 1, F', 1, 1]` from `condition_mask`.
      sigma: the step's sigma (`scheduler.sigmas[i]`, in [0, 1]; not `timesteps[i] / 1000`), scalar or `[B]`.
      conditional_frame_timestep: negative means "no per-frame timesteps": every frame gets sigma.
    """
    b, f = indicator.shape[0], indicator.shape[2]
    sigma = jnp.broadcast_to(jnp.asarray(sigma, jnp.float32).reshape(-1, 1), (b, 1))
    if conditional_frame_timestep < 0:
        return jnp.broadcast_to(sigma, (b, f))
    ind = indicator.reshape(b, f)
    return ind * conditional_frame_timestep + (1 - ind) * sigma


def model_input(latents: jax.Array, cond_latents: jax.Array, mask: jax.Array) -> jax.Array:
    """What the DiT sees: clean conditioning frames, the current latents elsewhere."""
    return mask * cond_latents + (1 - mask) * latents


def conditioned_velocity(pred: jax.Array, initial_latents: jax.Array, cond_latents: jax.Array,
                         mask: jax.Array) -> jax.Array:
    """The reference's velocity on conditioning frames: `(x_0 - c) * m`, with `x_0` the latents the
    loop started from (computed once before the loop, never updated), the DiT's elsewhere."""
    return (initial_latents - cond_latents) * mask + pred * (1 - mask)


def guide(cond: jax.Array, uncond: jax.Array, scale: float) -> jax.Array:
    """Predict2.5's guidance: `cond + g * (cond - uncond)` (guidance 7 is 8x cond - 7x uncond); the
    reference runs the negative branch only for `g > 1`."""
    return cond + scale * (cond - uncond)


def image_conditioning_video(image: np.ndarray, num_frames: int) -> np.ndarray:
    """Image-to-video's VAE input `[1, 3, num_frames, H, W]` in [-1, 1]: the image, then black frames
    (the pipeline pads with zeros in [0, 1], i.e. -1 after normalisation).

    Args:
      image: `[3, H, W]` in [-1, 1], already at the generation size.
    """
    video = np.full((1, 3, num_frames) + image.shape[1:], -1.0, np.float32)
    video[:, :, 0] = image
    return video


def video_conditioning_video(frames: np.ndarray, num_frames: int, num_latent_conditional_frames: int = 2
                             ) -> tuple[np.ndarray, int]:
    """Video-to-video's VAE input `[1, 3, num_frames, H, W]` and its conditioning pixel-frame count:
    the clip's last `4 * (n - 1) + 1` frames, padded with its last frame.

    Args:
      frames: `[3, T, H, W]` in [-1, 1], at the generation size.
      num_latent_conditional_frames: 1 or 2, as the reference allows.
    """
    if num_latent_conditional_frames not in (1, 2):
        raise ValueError(f"num_latent_conditional_frames must be 1 or 2, got {num_latent_conditional_frames}")
    keep = TEMPORAL * (num_latent_conditional_frames - 1) + 1
    if frames.shape[1] < keep:
        raise ValueError(f"the conditioning video has {frames.shape[1]} frames; video-to-video needs at least {keep}")
    video = frames[:, -keep:]
    if video.shape[1] < num_frames:
        video = np.concatenate([video, np.repeat(video[:, -1:], num_frames - video.shape[1], axis=1)], axis=1)
    return video[None].astype(np.float32), keep


def match_num_frames(video: np.ndarray, target: int) -> np.ndarray:
    """The pipeline's `_match_num_frames` on decoded `[B, C, T, H, W]` video (a no-op when T = target)."""
    if target <= 0 or video.shape[2] == target:
        return video
    video = np.repeat(video, TEMPORAL, axis=2)
    if video.shape[2] < target:
        return np.concatenate([video, np.repeat(video[:, :, -1:], target - video.shape[2], axis=2)], axis=2)
    return video[:, :, :target]
