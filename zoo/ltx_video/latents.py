"""The pure pieces of the LTX-Video pipelines, as diffusers' `LTXPipeline`, `LTXImageToVideoPipeline`,
`LTXConditionPipeline` and `LTXLatentUpsamplePipeline` (and the official `LTXVideoPipeline` /
`LTXMultiScalePipeline`) compute them: latent packing and normalisation, step grids, the conditioning
machinery (first-frame I2V, frames at chosen positions), the per-token Euler step, and the
multi-scale pass's AdaIN and tone mapping.

Host-side arrays are NumPy (float32 where the reference works in float32); the functions that run
every step (`condition_timestep`, `per_token_step`, `add_conditioning_noise`, guidance) are written in
`jnp` so that a pipeline can call them inside its jitted step. Every random draw is an argument: the
pipeline draws it on the host from the run's seed, in the order the docstrings give (the reference's
order, so a seeded torch generator reproduces its run).

Conventions: latents `[B, C, F, H, W]` (diffusers' unpacked form), tokens `[B, S, C·pt·p·p]`,
timesteps in 0..1000, sigmas in 0..1.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from vidax.zoo.ltx_video import rope
from vidax.zoo.ltx_video.config import SchedulerConfig
from vidax.zoo.samplers.schedules import Schedule, flow_match_schedule, linear_quadratic_sigmas, stretch_to_terminal

VAE_SPATIAL = 32
VAE_TEMPORAL = 8


# ---------------------------------------------------------------------------------------------
# Packing and normalisation


def pack(latents, patch: int = 1, patch_t: int = 1):
    """`[B, C, F, H, W]` -> tokens `[B, F/pt·H/p·W/p, C·pt·p·p]` (diffusers `_pack_latents`)."""
    xp = jnp if not isinstance(latents, np.ndarray) else np
    b, c, f, h, w = latents.shape
    x = latents.reshape(b, c, f // patch_t, patch_t, h // patch, patch, w // patch, patch)
    return xp.transpose(x, (0, 2, 4, 6, 1, 3, 5, 7)).reshape(b, (f // patch_t) * (h // patch) * (w // patch), -1)


def unpack(tokens, frames: int, height: int, width: int, patch: int = 1, patch_t: int = 1):
    """Tokens `[B, S, D]` -> `[B, C, F·pt, H·p, W·p]` for a post-patch `frames x height x width` grid
    (diffusers `_unpack_latents`)."""
    xp = jnp if not isinstance(tokens, np.ndarray) else np
    b = tokens.shape[0]
    x = tokens.reshape(b, frames, height, width, -1, patch_t, patch, patch)
    x = xp.transpose(x, (0, 4, 1, 5, 2, 6, 3, 7))
    return x.reshape(b, x.shape[1], frames * patch_t, height * patch, width * patch)


def normalize(latents, mean, std, scaling_factor: float = 1.0):
    """`(z − mean) · scaling / std` per channel (diffusers `_normalize_latents`). Note the pipelines call it
    with the default scaling 1.0 for conditioning latents and denormalise with the VAE's own factor
    (1.0 in every released VAE, so the asymmetry is harmless there)."""
    shape = (1, -1, 1, 1, 1)
    return (latents - mean.reshape(shape)) * scaling_factor / std.reshape(shape)


def denormalize(latents, mean, std, scaling_factor: float = 1.0):
    """`z · std / scaling + mean` per channel (diffusers `_denormalize_latents`)."""
    shape = (1, -1, 1, 1, 1)
    return latents * std.reshape(shape) / scaling_factor + mean.reshape(shape)


def sample_posterior(moments, noise):
    """A draw from the VAE posterior (`DiagonalGaussianDistribution.sample`): moments `[B, 2C, ...]` from
    `vae.encode`, noise `[B, C, ...]` ~ N(0, 1); log-variance clamped to [−30, 20]."""
    xp = jnp if not isinstance(moments, np.ndarray) else np
    mean, logvar = xp.split(moments, 2, axis=1)
    return mean + xp.exp(0.5 * xp.clip(logvar, -30.0, 20.0)) * noise


def decode_input(latents, noise, decode_noise_scale):
    """The timestep-conditioned VAE's input `(1 − s)·z + s·ε`, `s` per sample (`[B]` or a scalar); the
    pipelines default `s` to the decode timestep."""
    scale = jnp.asarray(decode_noise_scale, jnp.float32).reshape(-1, 1, 1, 1, 1)
    return (1 - scale) * latents + scale * noise


def latent_grid(frames: int, height: int, width: int, vae_temporal: int = VAE_TEMPORAL,
                vae_spatial: int = VAE_SPATIAL) -> tuple[int, int, int]:
    """Latent `(F', H', W')` of a `frames x height x width` video (frames 8k + 1, sizes multiples of 32)."""
    if (frames - 1) % vae_temporal or height % vae_spatial or width % vae_spatial:
        raise ValueError(f"LTX-Video generates {vae_temporal}k+1 frames of multiples of {vae_spatial} pixels; got "
                         f"{frames} x {height} x {width}")
    return (frames - 1) // vae_temporal + 1, height // vae_spatial, width // vae_spatial


# ---------------------------------------------------------------------------------------------
# Step grids


def pipeline_schedule(sched: SchedulerConfig, num_steps: int, num_tokens: int) -> Schedule:
    """`LTXPipeline` / `LTXImageToVideoPipeline`: sigmas `linspace(1, 1/n, n)`, the dynamic shift for the
    token count when the scheduler config asks for it (0.9.0 / 0.9.1: base 0.95 at 1024 tokens, 2.05 at
    4096), then the stretch to `shift_terminal` (0.1)."""
    base = np.linspace(1.0, 1 / num_steps, num_steps)
    return flow_match_schedule(num_steps, shift=sched.shift, mu=sched.mu(num_tokens), shift_terminal=sched.shift_terminal,
                               base_sigmas=base, num_train_timesteps=sched.num_train_timesteps)


def condition_schedule(sched: SchedulerConfig, num_steps: int | None = None, timesteps: Sequence[float] | None = None,
                       denoise_strength: float = 1.0) -> Schedule:
    """`LTXConditionPipeline`: timesteps `1000 · linear_quadratic(n)` unless given (the distilled models'
    lists), passed to the scheduler as timesteps: the model is fed them as given, the scheduler's sigmas
    are `timesteps / 1000` through its static shift and terminal stretch. `denoise_strength` < 1 keeps
    the last `int(n · strength)` steps (refinement of given latents).

    Raises:
      ValueError: a dynamically shifting scheduler config (the reference pipeline cannot run it: no `mu`).
    """
    if sched.dynamic_shift is not None:
        raise ValueError("LTXConditionPipeline passes timesteps without `mu`: a scheduler config with "
                         "use_dynamic_shifting=True cannot run it (diffusers raises the same)")
    if timesteps is None:
        if num_steps is None:
            raise ValueError("pass num_steps or timesteps")
        given = (linear_quadratic_sigmas(num_steps).astype(np.float32) * np.float32(1000)).astype(np.float32)
    else:
        given = np.asarray(timesteps, np.float32)
    sigmas = given / np.float32(sched.num_train_timesteps)
    sigmas = sched.shift * sigmas / (1 + (sched.shift - 1) * sigmas)
    if sched.shift_terminal:
        sigmas = stretch_to_terminal(sigmas, sched.shift_terminal)
    schedule = Schedule(timesteps=given, sigmas=np.append(sigmas.astype(np.float32), np.float32(0)))
    if denoise_strength < 1:
        n = len(given)
        start = max(n - min(int(n * denoise_strength), n), 0)
        schedule = Schedule(timesteps=schedule.timesteps[start:], sigmas=schedule.sigmas[start:])
    return schedule


def official_schedule(sched: SchedulerConfig, num_tokens: int, num_steps: int | None = None,
                      timesteps: Sequence[float] | None = None, skip_initial: int = 0, skip_final: int = 0) -> Schedule:
    """The official pipeline's grid (`RectifiedFlowScheduler` + `retrieve_timesteps`): sigmas in [0, 1]
    (`timesteps` in the official configs: the distilled models' lists), else `num_steps` of the
    config's sampler with its SD3 shift for `num_tokens` and terminal stretch; `skip_initial` /
    `skip_final` drop steps (the 13B dev multi-scale passes: 17 / 3 of 30). The model is fed σ·1000;
    each step goes to the next lower sigma, the last to 0 (so skipping final steps makes the last jump
    to 0 directly, as the reference does)."""
    if timesteps is not None:
        sigmas = np.asarray(timesteps, np.float32)
    else:
        if num_steps is None:
            raise ValueError("pass num_steps or timesteps")
        if sched.sampler == "linear_quadratic":
            sigmas = linear_quadratic_sigmas(num_steps).astype(np.float32)
        else:
            sigmas = np.linspace(1.0, 1 / num_steps, num_steps, dtype=np.float32)
        mu = sched.mu(num_tokens)
        if mu is not None:
            sigmas = (np.exp(mu) / (np.exp(mu) + (1 / sigmas - 1))).astype(np.float32)
            if sched.shift_terminal:
                sigmas = stretch_to_terminal(sigmas, sched.shift_terminal).astype(np.float32)
        if skip_initial < 0 or skip_final < 0 or skip_initial + skip_final >= num_steps:
            raise ValueError(f"skip_initial {skip_initial} + skip_final {skip_final} must leave steps of {num_steps}")
        sigmas = sigmas[skip_initial: len(sigmas) - skip_final]
    return Schedule(timesteps=(sigmas * np.float32(1000)).astype(np.float32), sigmas=np.append(sigmas, np.float32(0)))


# ---------------------------------------------------------------------------------------------
# Conditioning


def image_to_video_latents(image_latents, noise):
    """`LTXImageToVideoPipeline.prepare_latents`: the first latent frame is the (normalised) image
    latent, the rest noise. Returns packed tokens and the packed conditioning mask `[B, S]` (1 on the
    first frame's tokens). The image latent is a `sample_posterior` draw (noise drawn before `noise`).

    Args:
      image_latents: normalised image latents `[B, C, 1, H', W']`.
      noise: `[B, C, F', H', W']`.
    """
    b, _, f, h, w = noise.shape
    mask = np.zeros((b, 1, f, h, w), np.float32)
    mask[:, :, 0] = 1
    latents = image_latents * mask + noise * (1 - mask)
    return pack(latents), pack(mask)[..., 0]


def image_to_video_timestep(t, mask):
    """Per-token timestep of `LTXImageToVideoPipeline`: `t · (1 − mask)` (the image frame at 0)."""
    return jnp.asarray(t, jnp.float32).reshape(-1, 1) * (1 - mask)


@dataclasses.dataclass
class Condition:
    """One conditioning item of `LTXConditionPipeline` (an image, or a video of 8k + 1 frames).

    Args:
      latents: its normalised VAE latents `[B, C, f, H', W']` (a `sample_posterior` draw).
      frame_index: the pixel frame it starts at.
      strength: 1 = hard conditioning; lower blends with noise.
      noise: for `frame_index` > 0 only, `[B, C, min(f, 2), H', W']` ~ N(0, 1) (the blend of its prefix
        frames with noise), drawn right after this item's posterior noise.
    """

    latents: np.ndarray
    frame_index: int = 0
    strength: float = 1.0
    noise: np.ndarray | None = None


@dataclasses.dataclass
class Conditioned:
    """`LTXConditionPipeline.prepare_latents`' outputs."""

    tokens: np.ndarray  # [B, S_extra + S, C] packed latents, extra (keyframe) tokens first
    mask: np.ndarray | None  # [B, S_extra + S] conditioning strength per token (None without conditions)
    pixel_ids: np.ndarray  # [B, 3, S_extra + S] pixel coordinates (rope.video_coords turns them into positions)
    num_extra: int  # tokens to drop before unpacking the result


def prepare_conditioned(noise: np.ndarray, conditions: Sequence[Condition], *, num_prefix_frames: int = 2,
                        latents: np.ndarray | None = None, sigma: float | None = None,
                        causal_fix: bool = True) -> Conditioned:
    """`LTXConditionPipeline.prepare_latents` (patch size 1).

    A condition at frame 0 replaces (lerps by strength) the first latent frames. A condition at a later
    frame: a video longer than `num_prefix_frames` latent frames writes its later frames into place and
    keeps its first `num_prefix_frames` (an image: its one frame) as extra tokens appended in front of the
    sequence, lerped with `Condition.noise` by strength, positioned at their own pixel frame
    (`rope.scale_ids(..., frame_index)`).

    Args:
      noise: `[B, C, F', H', W']`, the first draw of the run.
      conditions: in order.
      latents, sigma: refinement of given latents (`denoise_strength` < 1): `σ·noise + (1 − σ)·latents`.
      causal_fix: `rope.scale_ids`' first-frame fix (False: official checkpoints before 0.9.5).
    """
    b, _, f, h, w = noise.shape
    x = noise.copy() if latents is None or sigma is None else sigma * noise + (1 - sigma) * latents
    frame_mask = np.zeros((b, f), np.float32)
    extras = []
    for cond in conditions:
        cl = np.asarray(cond.latents, np.float32)
        n_cond, s = cl.shape[2], np.float32(cond.strength)
        if cond.frame_index == 0:
            x[:, :, :n_cond] = x[:, :, :n_cond] + s * (cl - x[:, :, :n_cond])  # torch.lerp
            frame_mask[:, :n_cond] = s
            continue
        if 1 < n_cond < num_prefix_frames:
            raise ValueError(f"a conditioning video needs at least {num_prefix_frames} latent frames, got {n_cond}")
        if n_cond > num_prefix_frames:
            start = cond.frame_index // VAE_TEMPORAL + num_prefix_frames
            end = start + n_cond - num_prefix_frames
            x[:, :, start:end] = x[:, :, start:end] + s * (cl[:, :, num_prefix_frames:] - x[:, :, start:end])
            frame_mask[:, start:end] = s
            cl = cl[:, :, :num_prefix_frames]
        if cond.noise is None or cond.noise.shape != cl.shape:
            raise ValueError(f"condition at frame {cond.frame_index} needs noise of shape {cl.shape}")
        cl = cond.noise + s * (cl - cond.noise)
        ids = rope.scale_ids(rope.latent_ids(cl.shape[2], h, w), frame_index=cond.frame_index, causal_fix=causal_fix)
        extras.append((pack(cl), np.broadcast_to(ids, (b, *ids.shape)), np.full((b, cl.shape[2] * h * w), s, np.float32)))
    ids = np.broadcast_to(rope.scale_ids(rope.latent_ids(f, h, w), causal_fix=causal_fix), (b, 3, f * h * w))
    tokens = pack(x)
    mask = np.repeat(frame_mask, h * w, axis=1) if conditions else None
    if extras:
        tokens = np.concatenate([e[0] for e in extras] + [tokens], axis=1)
        ids = np.concatenate([e[1] for e in extras] + [ids], axis=2)
        mask = np.concatenate([e[2] for e in extras] + [mask], axis=1)
    return Conditioned(tokens.astype(np.float32), mask, np.ascontiguousarray(ids), sum(e[0].shape[1] for e in extras))


def add_conditioning_noise(t, init_tokens, tokens, noise_scale: float, mask, noise, eps: float = 1e-6):
    """`add_noise_to_image_conditioning_latents`: hard-conditioned tokens (mask 1) become
    `init + noise_scale · ε · (t/1000)²` each step (`image_cond_noise_scale`, 0.15 by default in the
    reference; `noise` `[B, S, C]` is that step's draw)."""
    sigma = jnp.asarray(t, jnp.float32) / 1000.0
    hard = (mask > 1.0 - eps)[..., None]
    return jnp.where(hard, init_tokens + noise_scale * noise * sigma**2, tokens)


def condition_timestep(t, mask):
    """Per-token timestep of `LTXConditionPipeline`: `min(t, (1 − mask) · 1000)` (`[B, S]`)."""
    return jnp.minimum(jnp.asarray(t, jnp.float32), (1 - mask) * 1000.0)


def per_token_step(sigmas, t, tokens, velocity, token_timesteps, mask=None):
    """One Euler step of `LTXConditionPipeline` (`scheduler.step(-v, t, x, per_token_timesteps=...)`):
    each token goes from its own sigma to the largest schedule sigma below it; with conditioning, tokens
    whose timestep is not below `(1 − mask)` keep their value.

    Args:
      sigmas: the schedule's `num_steps + 1` sigmas (terminal 0 last).
      t: this step's timestep (0..1000).
      tokens: `[B, S, C]` latents; velocity: the guided model output `[B, S, C]`.
      token_timesteps: `[B, S]` (`condition_timestep`, the cond half under CFG).
      mask: the conditioning mask `[B, S]` or None.
    """
    sigmas = jnp.asarray(sigmas, jnp.float32)
    token_sigmas = token_timesteps / 1000.0
    lower = sigmas[:, None, None] < token_sigmas[None] - 1e-6
    next_sigma = jnp.max(jnp.where(lower, sigmas[:, None, None], 0.0), axis=0)
    dt = (token_sigmas - next_sigma)[..., None]
    stepped = tokens.astype(jnp.float32) - dt * velocity.astype(jnp.float32)
    if mask is None:
        return stepped
    keep = (jnp.asarray(t, jnp.float32) / 1000 - 1e-6 < (1.0 - mask))[..., None]
    return jnp.where(keep, stepped, tokens)


def trim_conditioning_frames(start_frame: int, frames: int, target_frames: int) -> int:
    """`LTXConditionPipeline.trim_conditioning_sequence`: a conditioning video is cut to fit the output and
    to 8k + 1 frames."""
    n = min(frames, target_frames - start_frame)
    return (n - 1) // VAE_TEMPORAL * VAE_TEMPORAL + 1


# ---------------------------------------------------------------------------------------------
# The official request padding (Lightricks' `inference.py`)


@dataclasses.dataclass(frozen=True)
class Padding:
    """A request of any size, as the official `inference.py` runs it: the pipeline at the padded size
    (`frames` 8k + 1, `height` and `width` multiples of 32: the initial noise has the padded shape), then
    the video cropped back, `video[:F, top:height - bottom, left:width - right]`. Conditioning media are
    zero-padded (0 in [-1, 1]: mid-grey) by the same margins."""

    frames: int
    height: int
    width: int
    top: int = 0
    bottom: int = 0
    left: int = 0
    right: int = 0

    @property
    def spatial(self) -> bool:
        return bool(self.top or self.bottom or self.left or self.right)


def official_padding(height: int, width: int, frames: int) -> Padding:
    """`inference.py`'s `height_padded`, `width_padded`, `num_frames_padded` and `calculate_padding`: each
    side up to the next multiple of 32, the frames up to the next 8k + 1 (`((F - 2) // 8 + 1) * 8 + 1`, floor
    division: 1 stays 1); the margin split with its smaller half at the top / left."""
    padded_h = ((height - 1) // VAE_SPATIAL + 1) * VAE_SPATIAL
    padded_w = ((width - 1) // VAE_SPATIAL + 1) * VAE_SPATIAL
    padded_f = ((frames - 2) // VAE_TEMPORAL + 1) * VAE_TEMPORAL + 1
    top, left = (padded_h - height) // 2, (padded_w - width) // 2
    return Padding(padded_f, padded_h, padded_w, top, padded_h - height - top, left, padded_w - width - left)


def pad_pixels(pixels: np.ndarray, padding: Padding) -> np.ndarray:
    """Conditioning pixels `[B, 3, F, H, W]` at the requested size, zero-padded to the padded size
    (`torch.nn.functional.pad(media, (left, right, top, bottom))`)."""
    margins = [(0, 0)] * (pixels.ndim - 2) + [(padding.top, padding.bottom), (padding.left, padding.right)]
    return np.pad(pixels, margins)


def crop_padding(frames: np.ndarray, padding: Padding, num_frames: int) -> np.ndarray:
    """Frames `[F', H', W', 3]` at the padded size -> the request's first `num_frames` frames, the margins
    cut (`images[:, :, :num_frames, pad_top:-pad_bottom, pad_left:-pad_right]`)."""
    h, w = frames.shape[1:3]
    return frames[:num_frames, padding.top:h - padding.bottom, padding.left:w - padding.right]


# ---------------------------------------------------------------------------------------------
# Guidance and the multi-scale pass


def cfg_star(cond, uncond):
    """The official pipeline's `cfg_star_rescale`: the unconditional prediction scaled by its projection
    coefficient `<cond, uncond> / (|uncond|² + 1e-8)` per sample (13B dev config)."""
    b = cond.shape[0]
    c, u = cond.reshape(b, -1), uncond.reshape(b, -1)
    alpha = jnp.sum(c * u, axis=1, keepdims=True) / (jnp.sum(u * u, axis=1, keepdims=True) + 1e-8)
    return (alpha * u).reshape(uncond.shape)


def adain(latents, reference, factor: float = 1.0):
    """`LTXLatentUpsamplePipeline.adain_filter_latent`: each (sample, channel) of `latents` takes the mean and
    (unbiased) std of `reference`'s, blended by `factor`."""
    axes = tuple(range(2, latents.ndim))
    r_mean, r_std = reference.mean(axis=axes, keepdims=True), reference.std(axis=axes, keepdims=True, ddof=1)
    i_mean, i_std = latents.mean(axis=axes, keepdims=True), latents.std(axis=axes, keepdims=True, ddof=1)
    matched = (latents - i_mean) / i_std * r_std + r_mean
    return latents + factor * (matched - latents)


def tone_map(latents, compression: float):
    """`LTXLatentUpsamplePipeline.tone_map_latents`: a sigmoid compression of values beyond ~1
    (`tone_map_compression_ratio`, 0.6 in the 0.9.8 13B distilled second pass)."""
    xp = jnp if not isinstance(latents, np.ndarray) else np
    scale = compression * 0.75
    sigmoid = 1 / (1 + xp.exp(-(4.0 * scale * (xp.abs(latents) - 1.0))))
    return latents * (1.0 - 0.8 * scale * sigmoid)
