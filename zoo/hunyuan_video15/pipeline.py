"""HunyuanVideo-1.5 sampling and decoding (follows diffusers `HunyuanVideo15Pipeline` and its I2V twin).

From text features (Qwen2.5-VL hidden states and ByT5 glyph features with their masks, for the
prompt and the negative prompt) to frames: flow-match Euler over the shifted linear sigmas, one
jitted DiT call per step on the [cond; uncond] batch with classifier-free guidance, then the VAE
decode (tiled, stage by stage). Image-to-video adds the VAE-encoded first frame and a first-frame
mask as condition channels and the frame's SigLIP tokens. The encoders live in `vidax.zoo.encoders`.

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
from vidax.zoo.offload import HostBlocks, StreamedDiT
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
            raise PipelineError(f"frames must be 4k+1 (the VAE compresses time 4x after the first frame), "
                                f"got {self.frames}")

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
        return jax.tree.map(lambda c, u: jnp.concatenate([c, u], 0), cond, uncond)


def bucket_size(height: int, width: int, target_size: int, patch: int = 16) -> tuple[int, int]:
    """(height, width) of the reference's size bucket closest to `height / width` at `target_size` (480p: 640).

    Follows diffusers' `generate_crop_size_list` + `get_closest_ratio`: every patch grid of about
    (target_size / patch)^2 cells with aspect ratio at most 4, the closest ratio not past the request's.
    """
    patches = round((target_size / patch) ** 2)
    buckets, rows, cols = [], patches, 1
    while rows > 0:
        if max(rows, cols) / min(rows, cols) <= 4.0:
            buckets.append((rows * patch, cols * patch))  # (height, width)
        if (cols + 1) * rows <= patches:
            cols += 1
        else:
            rows -= 1
    ratio = height / width
    diffs = [round(h / w, 5) - ratio for h, w in buckets]
    candidates = [(i, d) for i, d in enumerate(diffs) if (d <= 0 if ratio >= 1 else d >= 0)]
    return buckets[min(candidates, key=lambda pair: abs(pair[1]))[0]]


def default_size(target_size: int, aspect: tuple[int, int] = DEFAULT_ASPECT) -> tuple[int, int]:
    """(height, width) for text-to-video: the bucket of the default 16:9 aspect."""
    return bucket_size(aspect[1], aspect[0], target_size)


def resize_and_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """diffusers `VaeImageProcessor.resize(resize_mode="crop")`: Lanczos to cover, centre-paste on black."""
    from PIL import Image

    src = Image.fromarray(np.asarray(image, np.uint8)).convert("RGB")
    cover_w = width if width / height > src.width / src.height else src.width * height // src.height
    cover_h = height if width / height <= src.width / src.height else src.height * width // src.width
    canvas = Image.new("RGB", (width, height))
    canvas.paste(src.resize((cover_w, cover_h), Image.LANCZOS), (width // 2 - cover_w // 2, height // 2 - cover_h // 2))
    return np.asarray(canvas)


def image_condition(vae: HunyuanVideo15VAE, vae_params: Params, image: np.ndarray, tokens: jax.Array,
                    latent_shape: tuple[int, ...]) -> "ImageCondition":
    """Image-to-video conditioning (diffusers `prepare_cond_latents_and_mask`).

    Args:
        vae, vae_params: the VAE that encodes the first frame (posterior mode x scaling factor).
        image: the already resized and cropped RGB uint8 `[H, W, 3]` frame.
        tokens: its SigLIP `last_hidden_state` `[1, N, D]`.
        latent_shape: `[B, C, F', H', W']` of the sampled latents.
    """
    pixels = (jnp.asarray(image, jnp.float32) / 255.0 * 2.0 - 1.0).transpose(2, 0, 1)[None, :, None]  # [1, 3, 1, H, W]
    first = vae.latent_mean(vae_params, pixels) * vae.cfg.scaling_factor  # [1, C, 1, H', W']
    b, c, f = latent_shape[:3]
    cond = jnp.zeros((b, c, f, *latent_shape[3:]), jnp.float32).at[:, :, :1].set(first)
    mask = jnp.zeros((b, 1, f, *latent_shape[3:]), jnp.float32).at[:, :, 0].set(1.0)
    return ImageCondition(jnp.concatenate([cond, mask], axis=1), jnp.broadcast_to(tokens, (b, *tokens.shape[1:])))


def schedule_for(settings: SampleSettings) -> FlowEuler:
    """The reference's grid: `sigmas = linspace(1, 0, steps + 1)[:-1]`, shifted statically."""
    base = np.linspace(1.0, 0.0, settings.steps + 1)[:-1]
    return FlowEuler.from_schedule(flow_match_schedule(settings.steps, shift=settings.shift, base_sigmas=base))


class HunyuanVideo15Pipeline:
    """Sampling (text- or image-to-video) and decoding with converted HunyuanVideo-1.5 weights.

    Args:
        transformer: the DiT; `dit_params` its (placed) parameter tree.
        vae: the VAE; `vae_params` its parameter tree.
        vae_scaling: the VAE config's `scaling_factor` (latents are divided by it before decode).
        streamed, host_blocks: weight offload: `dit_params` then holds the embed and head weights only,
            and the blocks stream from host memory (`StreamedDiT.offload`) chunk by chunk each step.
    """

    def __init__(self, transformer: HunyuanVideo15Transformer, dit_params: Params, vae: HunyuanVideo15VAE,
                 vae_params: Params, vae_scaling: float | None = None, streamed: StreamedDiT | None = None,
                 host_blocks: HostBlocks | None = None):
        self.transformer, self.dit_params = transformer, dit_params
        self.vae, self.vae_params = vae, vae_params
        self.vae_scaling = vae.cfg.scaling_factor if vae_scaling is None else vae_scaling
        self.streamed, self.host_blocks = streamed, host_blocks

    def sample(self, prompt: TextFeatures, latents: jax.Array, settings: SampleSettings,
               negative: TextFeatures | None = None, image: "ImageCondition | None" = None, callback=None) -> jax.Array:
        """Denoise `latents` `[B, 32, F', H', W']` (initial noise) with the prompt's features.

        Args:
            prompt: the prompt's text features.
            latents: initial noise, `settings.latent_shape(...)`.
            settings: sizes, steps, guidance and shift.
            negative: the negative prompt's features; required when `settings.cfg`.
            image: image-to-video conditioning (`image_condition`); None for text-to-video.
            callback: `callback(step_index, latents)` after each step.
        """
        if settings.cfg and negative is None:
            raise PipelineError(f"guidance {settings.guidance} > 1 needs the negative prompt's features")
        text = TextFeatures.concat(prompt, negative) if settings.cfg else prompt
        cond = image if image is not None else t2v_condition(self.transformer, latents)
        stepper = schedule_for(settings)
        # The reference's I2V pipeline feeds meanflow models the next step's timestep (0 after the last).
        next_t = np.append(np.asarray(stepper.timesteps)[1:], np.float32(0))
        meanflow = image is not None and self.transformer.cfg.use_meanflow
        guidance = settings.guidance if settings.cfg else None

        def model_fn(x, i, t):
            t_r = jnp.float32(next_t[i]) if meanflow else None
            if self.streamed is not None:
                run = partial(self.streamed, self.dit_params, self.host_blocks)
                return guided_velocity(run, _dtype(self.dit_params), text, guidance, x, jnp.float32(t), t_r, cond)
            return _velocity(self.transformer, self.dit_params, text, guidance, x, jnp.float32(t), t_r, cond)

        return sample(model_fn, stepper, latents, callback=callback)

    def decode(self, latents: jax.Array, tiling: bool = True) -> np.ndarray:
        """Frames `[B, F, H, W, 3]` float32 in [0, 1] (diffusers' `postprocess_video(output_type="np")`)."""
        video = self.vae.decode(self.vae_params, latents / self.vae_scaling, tiling=tiling)
        frames = jnp.clip(video.astype(jnp.float32) / 2 + 0.5, 0, 1)
        return np.asarray(jnp.moveaxis(frames, 1, -1))


@dataclasses.dataclass(frozen=True)
class ImageCondition:
    """What the DiT gets besides the noisy latents: condition latents + mask channels, and image tokens."""

    latents: jax.Array  # [B, C + 1, F', H', W']: encoded first frame (later frames zero), then the mask
    tokens: jax.Array  # [B, N, image_embed_dim]: SigLIP tokens, zeros for text-to-video


def guided_velocity(run, dtype, text: TextFeatures, guidance: float | None, latents: jax.Array, timestep: jax.Array,
                    timestep_r: jax.Array | None, cond: ImageCondition) -> jax.Array:
    """One DiT call (both CFG branches as one batch, sharing the image condition) and the guided velocity.

    `run(x, t, text, text_mask, text_2, text_mask_2, image_tokens, t_r)` is the DiT: resident (inside one
    jit, `_velocity`) or streamed from host memory (`StreamedDiT`, a host loop over compiled chunks).
    """
    branches = 1 if guidance is None else 2
    x = jnp.concatenate([latents, cond.latents.astype(latents.dtype)], axis=1).astype(dtype)
    x = jnp.concatenate([x] * branches, axis=0)
    tokens = jnp.concatenate([cond.tokens.astype(dtype)] * branches, axis=0)
    t = jnp.broadcast_to(timestep, (x.shape[0],)).astype(jnp.float32)
    t_r = None if timestep_r is None else jnp.broadcast_to(timestep_r, (x.shape[0],)).astype(jnp.float32)
    out = run(x, t, text.text.astype(dtype), text.text_mask, text.text_2.astype(dtype), text.text_mask_2, tokens,
              t_r).astype(jnp.float32)
    return out if guidance is None else guide_batched(out, guidance)


def _dtype(params: Params):
    return params["x_embedder"]["proj"]["kernel"].dtype  # compute in the weights' dtype (bf16 as shipped)


@partial(jax.jit, static_argnums=(0, 3))
def _velocity(transformer: HunyuanVideo15Transformer, params: Params, text: TextFeatures, guidance: float | None,
              latents: jax.Array, timestep: jax.Array, timestep_r: jax.Array | None, cond: ImageCondition) -> jax.Array:
    """The resident DiT's guided velocity, one compiled unit per step."""
    return guided_velocity(partial(transformer, params), _dtype(params), text, guidance, latents, timestep, timestep_r,
                           cond)


def t2v_condition(transformer: HunyuanVideo15Transformer, latents: jax.Array) -> ImageCondition:
    """Text-to-video: zero condition latents and mask, zero image tokens (the DiT then masks them out)."""
    cfg = transformer.cfg
    b = latents.shape[0]
    zeros = jnp.zeros((b, cfg.in_channels - latents.shape[1], *latents.shape[2:]), latents.dtype)
    return ImageCondition(zeros, jnp.zeros((b, IMAGE_TOKENS, cfg.image_embed_dim), latents.dtype))


jax.tree_util.register_dataclass(TextFeatures, data_fields=["text", "text_mask", "text_2", "text_mask_2"],
                                 meta_fields=[])

jax.tree_util.register_dataclass(ImageCondition, data_fields=["latents", "tokens"], meta_fields=[])
