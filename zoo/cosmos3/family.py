"""Cosmos3 on the family contract (follows diffusers `Cosmos3OmniPipeline`, vision generation).

Text-to-video (and text-to-image at `--frames 1`), image- and video-to-video with one
mixture-of-transformers DiT that reads the prompt's token ids itself:

- prompt (`text.py`): the prompt and the negative prompt (default "") get the duration sentence (with
  `--fps`) and the resolution sentence (the negative prompt their inverses), a system prompt when the
  checkpoint's `default_use_system_prompt` says so, the tokenizer's own chat template, then EOS and
  `<|vision_start|>`; the two id lists are right-padded to one batch and masked;
- sequence layout (`rope.py`): the unified 3D mRoPE positions of each prompt's text, then its video
  tokens (fps-modulated temporal positions);
- conditioning (`conditioning.py`): `--image` (cover-resized, centre-cropped, 8-bit) repeated over every
  frame, or the `--video` clip's first (or last) `4 max(index) + 1` frames padded with the last one, encoded
  by the Wan2.2 VAE; the latent frames `condition_frame_indexes_vision` (image: frame 0) are written clean
  into the initial noise and get no timestep and zero velocity;
- sampling: the folder's scheduler (UniPC flow, shift 10), `use_native_flow_schedule` checkpoints (Edge)
  with explicit sigmas `linspace(1 - 1/1000, 0)`; the DiT takes the scheduler's integer timestep (scaled
  by 0.001 inside); guidance `uncond + g (cond - uncond)`;
- decode: the Wan2.2 VAE (from `vidax.zoo.parts.wan_vae`).
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.bases.cosmos_base import CosmosBase
from vidax.zoo.parts.wan_vae import planner_entries
from vidax.zoo.parts.conditioning_media import cosmos3_image, pil_frames
from vidax.zoo.cosmos3 import conditioning as cc
from vidax.zoo.cosmos3 import rope
from vidax.zoo.cosmos3.config import Cosmos3TransformerConfig
from vidax.zoo.cosmos3.text import PromptTokenizer, pad_prompts
from vidax.zoo.cosmos3.transformer import Cosmos3Transformer, patch_grid
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Flag, Inputs, Settings, cfg_predict
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.parts.wan_vae import WanVAEConfig
from vidax.zoo.compute.runtime import platform

PLANNED_PROMPT_TOKENS = 256  # the joint sequence's text part for --plan (system prompt, prompt, sentences)
KEEP = ("first", "last")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cosmos3Settings(Settings):
    """The common settings plus the pipeline's own keyword arguments and model_index flags."""

    video: Path | None = None  # video-to-video conditioning clip
    condition_frame_indexes_vision: tuple[int, ...] = (0, 1)  # video-to-video: latent frames kept clean
    condition_video_keep: str = "first"  # which end of the clip conditions ("first" or "last")
    use_system_prompt: bool = True  # model_index.json `default_use_system_prompt`
    add_resolution_template: bool = True
    add_duration_template: bool = True
    native_flow_schedule: bool = False  # model_index.json `use_native_flow_schedule`


@dataclasses.dataclass(frozen=True)
class Cosmos3Condition:
    """The DiT's inputs besides the latents and timestep (row 0: prompt, row 1: negative prompt)."""

    ids: jax.Array  # [1 or 2, L] int32, right-padded
    text_mask: jax.Array  # [1 or 2, L] bool
    rope_cos: jax.Array  # [1 or 2, L + N, head_dim]
    rope_sin: jax.Array
    noisy: jax.Array  # [1 or 2, T] 1 on the latent frames being denoised
    clean: jax.Array | None  # [1, C, T, H, W] normalised conditioning latents (None: text-to-video)


jax.tree_util.register_dataclass(Cosmos3Condition, data_fields=["ids", "text_mask", "rope_cos", "rope_sin", "noisy",
                                                                 "clean"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class Cosmos3Predict:
    """The guided velocity at one step (hashable: one compiled unit per configuration)."""

    guided: bool
    dtype: str

    def __call__(self, run, latents, timestep, cond: Cosmos3Condition, knobs):
        x = latents.astype(jnp.dtype(self.dtype))  # the reference casts the tokens to the DiT's dtype
        t = jnp.broadcast_to(timestep, (1,)).astype(jnp.float32)

        def branch(row: slice):
            return (cond.ids[row], cond.text_mask[row], x, t, cond.noisy[row], cond.rope_cos[row], cond.rope_sin[row])

        # the head zeroes conditioning frames, as the reference masks the velocity
        return cfg_predict(run, branch(slice(0, 1)), branch(slice(1, 2)) if self.guided else None, knobs["scale"])


class Cosmos3Family(CosmosBase):
    """Cosmos3 (Nano, Edge): text-to-video / -image, image- and video-to-video."""

    name = "cosmos3"
    transformer_class = Cosmos3Transformer
    settings_class = Cosmos3Settings
    flags = (
        Flag("--video", "video", Path, "video-to-video: a clip (video file or .npy of uint8 frames) whose first "
             "(--condition-video-keep) frames condition the video"),
        Flag("--condition-frame-indexes-vision", "condition_frame_indexes_vision", int,
             "video-to-video: a latent frame index kept clean (repeat the flag; default 0 and 1)", multiple=True),
        Flag("--condition-video-keep", "condition_video_keep", str, "video-to-video: use the clip's first or last "
             "frames (default first)"),
        Flag("--use-system-prompt", "use_system_prompt", bool, "wrap the prompt with the system prompt "
             "(default: the checkpoint's default_use_system_prompt)"),
        Flag("--add-resolution-template", "add_resolution_template", bool,
             "append the resolution sentence to the prompts (default on)"),
        Flag("--add-duration-template", "add_duration_template", bool,
             "append the duration/fps sentence to the prompts (default on)"),
    )

    # --- configs ----------------------------------------------------------------------------

    @cached_property
    def dit_config(self) -> Cosmos3TransformerConfig:
        return Cosmos3TransformerConfig.from_hf_config(self.require_config("transformer", "transformer/config.json"))

    # --- settings ---------------------------------------------------------------------------

    def folder_settings(self) -> dict:
        out = {}
        index = self.read_config("model_index", "model_index.json", "pipeline/model_index.json") or {}
        for key, field in (("default_use_system_prompt", "use_system_prompt"),
                           ("use_native_flow_schedule", "native_flow_schedule")):
            if index.get(key) is not None:
                out[field] = bool(index[key])
        shift = self.scheduler_shift()
        return out if shift is None else {**out, "shift": shift}

    def check_settings(self, s: Cosmos3Settings) -> None:
        if s.condition_video_keep not in KEEP:
            raise PipelineError(f"--condition-video-keep must be first or last, got {s.condition_video_keep!r}")
        indexes = tuple(s.condition_frame_indexes_vision)
        if not indexes or any(i < 0 for i in indexes):
            raise PipelineError(f"--condition-frame-indexes-vision takes non-negative latent frame indexes, "
                                f"got {indexes}")

    def check_images(self, s: Cosmos3Settings, images) -> None:
        given = sorted(k for k in images if k in ("image", "video"))
        if given and s.frames == 1:
            raise PipelineError(f"--{given[0]} conditions a video: with --frames 1 (text-to-image) it would be ignored")
        latent_frames = self.latent_shape(s)[2]
        indexes = tuple(s.condition_frame_indexes_vision)
        if "video" in given and max(indexes) >= latent_frames:
            raise PipelineError(f"--condition-frame-indexes-vision {indexes} reaches past the {latent_frames} latent "
                                f"frames of {s.frames} frames")

    @property
    def size_multiple(self) -> int:
        return self.vae_config.scale_factor_spatial  # check_inputs; the DiT zero-pads latents to its 2x2 patches

    def grid(self, s: Settings) -> tuple[int, int, int]:
        return patch_grid(self.latent_shape(s)[2:], self.dit_config.latent_patch_size)

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: Cosmos3Settings, inputs: Inputs) -> Cosmos3Condition:
        folder = self.source.find("text_tokenizer", component="text_tokenizer")
        if folder is None:
            raise PipelineError(f"{self.source.label}: no text_tokenizer/ folder (Cosmos3 reads the prompt's ids)")
        tokenizer = PromptTokenizer(folder, s.use_system_prompt)
        cond_ids, uncond_ids = tokenizer(inputs.prompt, inputs.negative_prompt, num_frames=s.frames, height=s.height,
                                         width=s.width, fps=s.fps, add_resolution=s.add_resolution_template,
                                         add_duration=s.add_duration_template)
        rows = [cond_ids, uncond_ids] if s.guided else [cond_ids]
        ids, text_mask, lengths = pad_prompts(rows)
        cfg = self.dit_config
        grid = self.grid(s)
        cos, sin = rope.rope_tables(cfg, rope.batch_positions(cfg, lengths, grid, s.fps,
                                                              self.vae_config.scale_factor_temporal))
        mask, clean = self.encode_condition(run, s, inputs)
        noisy = np.broadcast_to(1.0 - mask, (len(rows), grid[0])).astype(np.float32)
        return Cosmos3Condition(jnp.asarray(ids), jnp.asarray(text_mask), jnp.asarray(cos), jnp.asarray(sin),
                                jnp.asarray(noisy), clean)

    def encode_condition(self, run: Run, s: Cosmos3Settings, inputs: Inputs) -> tuple[np.ndarray, jax.Array | None]:
        """`(per-latent-frame mask [T], clean latents or None)` of the image or clip (`prepare_latents`)."""
        latent_frames = self.latent_shape(s)[2]
        image, clip = inputs.images.get("image"), inputs.images.get("video")
        if image is None and clip is None:  # the reference encodes a blank video here, then never uses it
            return cc.condition_frames(latent_frames, "t2v"), None
        if image is not None:
            mode, video = "i2v", cc.image_video(cosmos3_image(image, s.height, s.width), s.frames)
        else:
            count = max(s.condition_frame_indexes_vision) * self.vae_config.scale_factor_temporal + 1
            kept = clip[:count] if s.condition_video_keep == "first" else clip[-count:]
            frames = pil_frames(kept, s.height, s.width)
            mode, video = "v2v", cc.video_video(frames, s.frames, s.condition_frame_indexes_vision, keep="first")
        clean = self.encode_video(run, video)
        return cc.condition_frames(latent_frames, mode, s.condition_frame_indexes_vision), clean

    # --- denoise ----------------------------------------------------------------------------

    def predictor(self, s: Cosmos3Settings, expert: int, dit: Cosmos3Transformer, step: int) -> Cosmos3Predict:
        return Cosmos3Predict(s.guided, jnp.dtype(dit.dtype).name)

    def base_sigmas(self, s: Cosmos3Settings) -> np.ndarray | None:
        """`use_native_flow_schedule`: the pipeline's explicit sigmas for `set_timesteps(sigmas=...)`."""
        if not s.native_flow_schedule:
            return None
        return cc.native_flow_sigmas(s.steps, self.scheduler_config().get("num_train_timesteps", 1000))

    def sample(self, run: Run, s: Settings, latents: np.ndarray, cond: Cosmos3Condition) -> jax.Array:
        if cond.clean is not None:  # the conditioning frames start (and stay) clean
            mask = 1.0 - np.asarray(cond.noisy)[0]
            latents = cc.initial_latents(cond.clean, jnp.asarray(latents), mask)
        return super().sample(run, s, np.asarray(latents), cond)

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the memory planner needs (configs only): the video tokens join the prompt's in every layer."""
        s = self.resolve_settings(options)
        job = memory_job(self.dit_config, self.vae_config, s, dtype_bytes=4 if options.dtype == "float32" else 2,
                         blockwise_attention=platform() == "cpu")
        return quantized_job(job, Cosmos3Transformer(self.dit_config), options.weights_dtype)  # --weights-dtype


def memory_job(cfg: Cosmos3TransformerConfig, vae: WanVAEConfig, s: Settings, *, dtype_bytes: int = 2,
               prompt_tokens: int = PLANNED_PROMPT_TOKENS, blockwise_attention: bool = False) -> Job:
    """The planner's job for one generation: both pathways' weights per layer, the joint sequence (video tokens
    plus about `prompt_tokens` of prompt), CFG's two prompts as the batch; no text encoder."""
    dit = Cosmos3Transformer(cfg).memory_sizes(dim=cfg.hidden_size, ffn_dim=cfg.intermediate_size,
                                               heads=cfg.num_attention_heads)
    latent = ((s.frames - 1) // vae.scale_factor_temporal + 1, s.height // vae.scale_factor_spatial,
              s.width // vae.scale_factor_spatial)
    video_tokens = math.prod(patch_grid(latent, cfg.latent_patch_size))
    return Job(
        dit,
        tokens=video_tokens + prompt_tokens,
        text_tokens=0,
        batch=2 if s.guided else 1,
        weight_bytes=dtype_bytes,
        activation_bytes=dtype_bytes,
        residual_bytes=4,  # both streams stay fp32 between layers
        **planner_entries(vae, s.height, s.width, s.frames),
        blockwise_attention=blockwise_attention,
    )


FAMILY = Cosmos3Family
