"""LTX-2 latent bookkeeping the pipeline needs around the DiT (diffusers `LTX2Pipeline` methods).

- Sizes: latent grid `((frames - 1) // 8 + 1, height // 32, width // 32)`; audio latent length
  `round(frames / frame_rate * sample_rate / hop / 4)` (diffusers' `duration_s * audio_latents_per_second`).
- Packing: video `[B, C, F, H, W]` <-> tokens `[B, F*H*W, C]` (`_pack_latents`, 1x1x1 patches); audio
  `[B, C, L, M]` <-> tokens `[B, L, C*M]` (`_pack_audio_latents` without patch sizes: channel-major).
- Normalisation: video per channel `(z - mean) * scaling / std` on `[B, C, F, H, W]`; audio per
  packed feature `(z - mean) / std` on `[B, L, C*M]` (the audio VAE's statistics have C*M entries).
- Image-to-video: the first latent frame is the encoded (normalised) image and stays clean: its
  tokens get timestep 0, the sampler steps only frames 1..F-1 (`LTX2ImageToVideoPipeline`).

The sampler state is one array: both modalities' packed tokens flattened and joined,
`[B, S*C + L*Ca]` (`join_tokens` / `split_tokens`), so the shared loop's elementwise steppers step
video and audio together on their common sigma grid (diffusers deep-copies one scheduler for audio).

`--audio-latents` is the audio sampler's starting point in the audio VAE's latent layout before
packing, `[1, C, L, M]`, already normalised. diffusers' `audio_latents` argument is the same layout
but *un*-normalised (its `prepare_audio_latents` packs and normalises it), so a parity run hands
diffusers `denormalize_audio(pack_audio(x))` unpacked (`diffusers_audio_latents`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def latent_grid(frames: int, height: int, width: int, *, temporal_ratio: int = 8, spatial_ratio: int = 32):
    """`(F', H', W')` of a `frames x height x width` video."""
    if height % spatial_ratio or width % spatial_ratio:
        raise ValueError(f"LTX-2: height and width must be multiples of {spatial_ratio}, got {height}x{width}")
    return (frames - 1) // temporal_ratio + 1, height // spatial_ratio, width // spatial_ratio


def audio_latent_length(frames: int, frame_rate: float, *, sample_rate: int = 16000, hop_length: int = 160,
                        temporal_ratio: int = 4) -> int:
    """diffusers: `round(num_frames / frame_rate * sample_rate / hop / 4)` (Python's round, half to even)."""
    return round(frames / frame_rate * (sample_rate / hop_length / float(temporal_ratio)))


def pack_video(latents):
    """`[B, C, F, H, W]` -> `[B, F*H*W, C]`."""
    b, c = latents.shape[:2]
    return jnp.moveaxis(latents.reshape(b, c, -1), 1, 2)


def unpack_video(tokens, grid: tuple[int, int, int]):
    """`[B, F*H*W, C]` -> `[B, C, F, H, W]`."""
    b, _, c = tokens.shape
    return jnp.moveaxis(tokens, 2, 1).reshape(b, c, *grid)


def pack_audio(latents):
    """`[B, C, L, M]` -> `[B, L, C*M]` (features channel-major)."""
    b, c, length, m = latents.shape
    return jnp.transpose(latents, (0, 2, 1, 3)).reshape(b, length, c * m)


def unpack_audio(tokens, mel_bins: int):
    """`[B, L, C*M]` -> `[B, C, L, M]`."""
    b, length, _ = tokens.shape
    return jnp.transpose(tokens.reshape(b, length, -1, mel_bins), (0, 2, 1, 3))


def join_tokens(video, audio):
    """Packed video `[B, S, C]` and audio `[B, L, Ca]` tokens -> one sampler state `[B, S*C + L*Ca]`."""
    b = video.shape[0]
    return jnp.concatenate([jnp.reshape(video, (b, -1)), jnp.reshape(audio, (b, -1))], axis=1)


def split_tokens(state, video_shape: tuple[int, int], audio_shape: tuple[int, int]):
    """`join_tokens`' inverse: `(video [B, S, C], audio [B, L, Ca])`."""
    b, n = state.shape[0], video_shape[0] * video_shape[1]
    return jnp.reshape(state[:, :n], (b, *video_shape)), jnp.reshape(state[:, n:], (b, *audio_shape))


def normalize_video(latents, mean, std, scaling_factor: float = 1.0):
    """diffusers `_normalize_latents` on `[B, C, F, H, W]`."""
    shape = (1, -1, 1, 1, 1)
    return (latents - jnp.reshape(mean, shape)) * scaling_factor / jnp.reshape(std, shape)


def denormalize_video(latents, mean, std, scaling_factor: float = 1.0):
    shape = (1, -1, 1, 1, 1)
    return latents * jnp.reshape(std, shape) / scaling_factor + jnp.reshape(mean, shape)


def normalize_audio(tokens, mean, std):
    """diffusers `_normalize_audio_latents` on packed `[B, L, C*M]`."""
    return (tokens - mean) / std


def denormalize_audio(tokens, mean, std):
    return tokens * std + mean


def diffusers_audio_latents(normalised, mean, std):
    """What diffusers' `audio_latents=` must be for its sampler to start from `normalised` `[B, C, L, M]`."""
    mel_bins = normalised.shape[-1]
    return unpack_audio(denormalize_audio(pack_audio(normalised), mean, std), mel_bins)


def first_frame_mask(grid: tuple[int, int, int], batch: int = 1) -> np.ndarray:
    """I2V conditioning mask as packed tokens `[B, F*H*W]`: 1 on the first latent frame's tokens."""
    f, h, w = grid
    mask = np.zeros((batch, f, h, w), np.float32)
    mask[:, 0] = 1.0
    return mask.reshape(batch, -1)


def i2v_initial_latents(image_latents, noise, grid: tuple[int, int, int]):
    """diffusers I2V `prepare_latents`: normalised image latents `[B, C, 1, H, W]` repeated over the
    frames, kept on the first frame, noise elsewhere; returns packed latents and the token mask."""
    f = grid[0]
    init = jnp.repeat(image_latents, f, axis=2)
    mask = jnp.zeros((1, 1, *grid), noise.dtype).at[:, :, 0].set(1.0)
    latents = init * mask + noise * (1 - mask)
    return pack_video(latents), jnp.asarray(first_frame_mask(grid, noise.shape[0]))


def i2v_video_timestep(t, mask):
    """Per-token timesteps `t * (1 - mask)`: conditioning tokens at 0 (`t` `[B]`, mask `[B, S]`)."""
    return t[:, None] * (1 - mask)
