"""Cosmos-Predict2.5 on the family contract (follows diffusers `Cosmos2_5_PredictBasePipeline`).

Text-, image- and video-to-world with one DiT:

- text: Cosmos-Reason1 (Qwen2.5-VL-7B) hidden states of the chat-wrapped prompt, every layer
  standardised and concatenated (`text.py`), for the prompt and (guidance > 1) the negative prompt,
  `DEFAULT_NEGATIVE_PROMPT` unless one is given;
- conditioning (`conditioning.py`): `--image` is the first frame followed by black frames, `--video`
  the clip's last `4 (n - 1) + 1` frames padded with its last one (n = `--num-latent-conditional-frames`),
  encoded by the Wan2.1 VAE and normalised; those latent frames stay clean (timestep 1e-4, the DiT sees the
  clean latents, their velocity is `(x_0 - c)` with x_0 the initial noise);
- sampling: the folder's scheduler (UniPC, Karras sigmas over sigma 0.01-200, flow mode), the DiT fed the
  step's sigma in [0, 1] per latent frame, guidance `cond + g (cond - uncond)`;
- decode: the Wan2.1 VAE (from `vidax.zoo.parts.wan_vae`), frames in [0, 1].

Sizes come from the checkpoint's configs (diffusers `*/config.json`), the converted or official DiT tree's
shapes (the official `.pt` ships no config), else the registry's `config` tables (`--plan` offline).
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.cosmos import conditioning as cc
from vidax.zoo.bases.cosmos_base import CosmosBase
from vidax.zoo.parts.wan_vae import planner_entries
from vidax.zoo.cosmos.config import CosmosTransformerConfig
from vidax.zoo.parts.conditioning_media import pil_frames, predict25_image
from vidax.zoo.cosmos.text import (
    DEFAULT_NEGATIVE_PROMPT,
    PromptTokenizer,
    reason1_features,
)
from vidax.zoo.cosmos.transformer import CosmosTransformer
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Flag, Inputs, Settings
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job, abstract_param_count
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.compute.runtime import platform
from vidax.zoo.parts.encoders.common import by_layer

REASON1_PARAMS = 7_070_000_000  # Qwen2.5-VL-7B's language tower, when no config says otherwise


@dataclasses.dataclass(frozen=True, kw_only=True)
class CosmosSettings(Settings):
    """The common settings plus the pipeline's own keyword arguments (its defaults, from the registry)."""

    video: Path | None = None  # video-to-world conditioning clip
    num_latent_conditional_frames: int = 2  # video-to-world: latent frames kept clean (1 or 2)
    conditional_frame_timestep: float = 1e-4  # the DiT's timestep on conditioning frames (< 0: the step's sigma)
    max_sequence_length: int = 512  # Reason1 tokens (truncated and padded to it)


@dataclasses.dataclass(frozen=True)
class CosmosCondition:
    """What the DiT gets besides the latents, and what the velocity needs."""

    text: jax.Array  # [1 or 2, L, 28 * 3584]: prompt, then negative prompt when guided
    latents: jax.Array  # [1, 16, F', H', W'] normalised conditioning latents (zeros: text-to-world)
    indicator: jax.Array  # [1, 1, F', 1, 1]: 1 on conditioning latent frames
    initial: jax.Array | None = None  # [1, 16, F', H', W'] the initial noise (x_0 of the ground-truth velocity)


jax.tree_util.register_dataclass(CosmosCondition, data_fields=["text", "latents", "indicator", "initial"],
                                 meta_fields=[])


@dataclasses.dataclass(frozen=True)
class CosmosPredict:
    """The guided velocity at one step (hashable: one compiled unit per configuration)."""

    guided: bool
    dtype: str  # the DiT's compute dtype
    conditional_frame_timestep: float

    def __call__(self, run, latents, timestep, cond: CosmosCondition, knobs):
        from vidax.zoo.compute.sharding import cfg_batch, cfg_split

        dtype = jnp.dtype(self.dtype)
        mask = jnp.broadcast_to(cond.indicator, (1, 1, *latents.shape[2:])).astype(latents.dtype)
        t = cc.frame_timesteps(cond.indicator, knobs["sigma"], self.conditional_frame_timestep)
        x = cc.model_input(latents, cond.latents.astype(latents.dtype), mask).astype(dtype)
        branch = lambda text: (x, t, text.astype(dtype), mask.astype(dtype))  # noqa: E731
        if self.guided:
            out = run(*cfg_batch(branch(cond.text[:1]), branch(cond.text[1:]))).astype(jnp.float32)
            positive, negative = cfg_split(out)
        else:
            positive = run(*branch(cond.text[:1])).astype(jnp.float32)
        initial = latents if cond.initial is None else cond.initial
        velocity = partial(cc.conditioned_velocity, initial_latents=initial, cond_latents=cond.latents, mask=mask)
        v = velocity(positive)
        return cc.guide(v, velocity(negative), knobs["scale"]) if self.guided else v


@by_layer
def _reason1(model: DecoderTextModel, params, ids) -> jax.Array:
    return reason1_features(model, params, ids)


class CosmosFamily(CosmosBase):
    """Cosmos-Predict2.5 (2B, 14B): text-, image- and video-to-world."""

    name = "cosmos"
    makes = "world"
    transformer_class = CosmosTransformer
    settings_class = CosmosSettings
    default_negative_prompt = DEFAULT_NEGATIVE_PROMPT
    flags = (
        Flag("--video", "video", Path, "video-to-world: a clip (video file or .npy of uint8 frames) whose last "
             "4(n-1)+1 frames condition the video (n: --num-latent-conditional-frames)"),
        Flag("--num-latent-conditional-frames", "num_latent_conditional_frames", int,
             "video-to-world: latent frames kept from the clip, 1 or 2 (default 2)"),
        Flag("--conditional-frame-timestep", "conditional_frame_timestep", float,
             "the DiT's timestep on conditioning frames (default 1e-4; negative: the step's sigma)"),
        Flag("--max-sequence-length", "max_sequence_length", int, "Reason1 prompt tokens (default 512)"),
    )

    # --- configs ----------------------------------------------------------------------------

    def _folders(self, name: str) -> list[str]:
        """Where a component sits in a local folder of any layout (its name first: converted folders)."""
        comp = self.entry.components.get(name)
        folders = [name] + ([comp.folder(layout, True) for layout in self.entry.repos] if comp else [])
        return list(dict.fromkeys(f for f in folders if f))

    @cached_property
    def dit_config(self) -> CosmosTransformerConfig:
        """diffusers' `transformer/config.json`; else the DiT tree's shapes (official `.pt`, converted from
        it); else the registry's config (`--plan` before anything is downloaded)."""
        source = self.source_or_none
        if source is not None:
            found = source.read_json("transformer/config.json", component="transformer")
            if found is not None:
                return CosmosTransformerConfig.from_hf_config(found)
            part = self.component("transformer")
            try:
                return config_from_shapes(source.shapes(part.component, part.spec, part.subfolders))
            except Exception as err:  # no DiT in the folder: say so in one line
                from vidax.translator import TranslatorError

                if not isinstance(err, TranslatorError):
                    raise
                why = str(err).splitlines()[0]
                raise PipelineError(f"{source.label}: no Cosmos-Predict2.5 DiT found ({why})") from None
        return CosmosTransformerConfig.from_hf_config(self.require_config("transformer"))

    @cached_property
    def text_config(self) -> DecoderConfig:
        paths = [f"{folder}/config.json" for folder in self._folders("text_encoder")]
        return DecoderConfig.from_hf_config(self.require_config("text_encoder", *paths))

    # --- settings ---------------------------------------------------------------------------

    def folder_settings(self) -> dict:
        shift = self.scheduler_shift()
        return {} if shift is None else {"shift": shift}

    def check_settings(self, s: CosmosSettings) -> None:
        from vidax.zoo.generator.contract import FLOW_SAMPLERS

        scheduler = self.scheduler_config()
        own = s.sampler is None or FLOW_SAMPLERS[s.sampler] == scheduler.get("_class_name")  # else replaced
        if s.shift is not None and own and scheduler.get("use_karras_sigmas"):
            raise PipelineError(f"{self.name}: --shift has no effect on the Karras sigmas of its scheduler "
                                "(choose another --sampler to use a shifted schedule)")
        if s.num_latent_conditional_frames not in (1, 2):
            raise PipelineError(f"--num-latent-conditional-frames must be 1 or 2, got "
                                f"{s.num_latent_conditional_frames}")
        if s.max_sequence_length < 1:
            raise PipelineError(f"--max-sequence-length must be at least 1, got {s.max_sequence_length}")
        grid = tuple(n // p for n, p in zip(self.latent_shape(s)[2:], self.dit_config.patch_size))
        if any(g > m for g, m in zip(grid, self.dit_config.max_grid)):
            limit = [m * p for m, p in zip(self.dit_config.max_size, self.dit_config.patch_size)]
            raise PipelineError(f"{self.name}: {s.frames} frames at {s.height}x{s.width} exceed the DiT's position "
                                f"tables ({limit[0]} latent frames, {limit[1] * 8}x{limit[2] * 8} pixels)")

    def check_images(self, s: CosmosSettings, images) -> None:
        clip = images.get("video")
        keep = 4 * (s.num_latent_conditional_frames - 1) + 1
        if clip is not None and len(clip) < keep:
            raise PipelineError(f"the conditioning video has {len(clip)} frames; video-to-world with "
                                f"--num-latent-conditional-frames {s.num_latent_conditional_frames} needs {keep}")

    def tokens(self, s: Settings) -> int:
        _, _, f, h, w = self.latent_shape(s)
        return math.prod(n // p for n, p in zip((f, h, w), self.dit_config.patch_size))

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: CosmosSettings, inputs: Inputs) -> CosmosCondition:
        text = self.encode_prompts(run, s, inputs.prompt, inputs.negative_prompt)
        shape = self.latent_shape(s)
        image, clip = inputs.images.get("image"), inputs.images.get("video")
        if image is None and clip is None:
            indicator, _ = cc.condition_mask(shape, 0)
            return CosmosCondition(text, jnp.zeros(shape, jnp.float32), jnp.asarray(indicator))
        if image is not None:
            video, frames_in = cc.image_conditioning_video(predict25_image(image, s.height, s.width), s.frames), 1
        else:  # the clip's last 4(n-1)+1 frames (the pipeline resizes them all, then keeps those)
            keep = 4 * (s.num_latent_conditional_frames - 1) + 1
            video, frames_in = cc.video_conditioning_video(pil_frames(clip[-keep:], s.height, s.width), s.frames,
                                                           s.num_latent_conditional_frames)
        latents = self.encode_video(run, video)
        indicator, _ = cc.condition_mask(shape, cc.conditional_latent_frames(frames_in))
        return CosmosCondition(text, latents, jnp.asarray(indicator))

    def encode_prompts(self, run: Run, s: CosmosSettings, prompt: str, negative: str | None) -> jax.Array:
        """`[1 or 2, max_sequence_length, L * D]` Reason1 features (prompt, then the negative prompt)."""
        folder = self.source.find(*self._folders("tokenizer"), component="tokenizer")
        if folder is None:
            where = ", ".join(self._folders("tokenizer"))
            raise PipelineError(f"{self.source.label}: no Reason1 tokenizer folder ({where})")
        tokenizer = PromptTokenizer(folder)
        part = self.component("text_encoder")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        model = DecoderTextModel(self.text_config)
        prompts = [prompt] + ([negative] if negative is not None else [])
        features = [_reason1(model, {"params": params}, tokenizer([p], s.max_sequence_length)) for p in prompts]
        text = jnp.concatenate(features, axis=0)
        text.block_until_ready()
        run.done(params)
        return text

    # --- denoise ----------------------------------------------------------------------------

    def predictor(self, s: CosmosSettings, expert: int, dit: CosmosTransformer, step: int) -> CosmosPredict:
        return CosmosPredict(s.guided, jnp.dtype(dit.dtype).name, float(s.conditional_frame_timestep))

    def step_knobs(self, s: Settings, stepper, index: int, expert: int) -> dict:
        # the DiT takes the step's sigma (scheduler.sigmas[i], in [0, 1]), not timesteps[i] / 1000
        return {"scale": jnp.float32(s.guidance), "sigma": jnp.float32(np.asarray(stepper.sigmas)[index])}

    def sample(self, run: Run, s: Settings, latents: np.ndarray, cond: CosmosCondition) -> jax.Array:
        # the ground-truth velocity of conditioning frames starts from the initial noise, fixed for the loop
        cond = dataclasses.replace(cond, initial=jnp.asarray(latents, jnp.float32))
        return super().sample(run, s, latents, cond)

    # --- decode -----------------------------------------------------------------------------

    def decode_video(self, run: Run, s: Settings, latents: jax.Array) -> np.ndarray:
        return cc.match_num_frames(super().decode_video(run, s, latents), s.frames)

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the memory planner needs at the requested size (configs only, nothing loaded)."""
        s = self.resolve_settings(options)
        cfg, vae = self.dit_config, self.vae_config
        dit = CosmosTransformer(cfg).memory_sizes(dim=cfg.inner_dim, ffn_dim=cfg.mlp_dim, heads=cfg.num_attention_heads,
                                                  text_dim=cfg.text_embed_dim)
        width = 4 if options.dtype == "float32" else 2
        try:
            ids = jnp.zeros((1, 8), jnp.int32)
            text_params = abstract_param_count(DecoderTextModel(self.text_config), ids)
        except PipelineError:
            text_params = REASON1_PARAMS
        return quantized_job(Job(  # --weights-dtype counted
            dit,
            tokens=self.tokens(s),
            text_tokens=s.max_sequence_length,
            batch=2 if s.guided else 1,
            weight_bytes=width,
            activation_bytes=width,
            residual_bytes=4,  # the fp32 residual stream
            text_encoder_params=text_params,
            text_encoder_bytes=width,
            **planner_entries(vae, s.height, s.width, s.frames),
            blockwise_attention=platform() == "cpu",
            step_input_bytes=self._step_input_bytes(s),
            accelerator_units=COSMOS_BY_FRAME_UNITS,
        ), CosmosTransformer(cfg), options.weights_dtype)

    def _step_input_bytes(self, s) -> int:
        """The step's inputs every device holds whole, fp32: the Reason1 features of each branch row
        (100,352 wide) and the conditioning latents with their clean copy (`CosmosCondition`)."""
        rows = 2 if s.guided else 1
        text = rows * s.max_sequence_length * self.dit_config.text_in_dim
        return 4 * (text + 2 * math.prod(self.latent_shape(s)))


# Activation units (bf16 [B, S, D]) the step holds on one TPU device beyond the planner's terms (`planner.Job.
# accelerator_units`), read off XLA's v5e buffer report of the 2B step at 704x1280x93 (after dc0c568): the per-frame
# modulation's fp32 [B, frames, tokens per frame, dim] buffers (the report lists four of 2 units each, not all live at
# the peak) beside the residual stream; the step planned 3.7 units under XLA's figure without the term
COSMOS_BY_FRAME_UNITS = 4.0


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]]) -> CosmosTransformerConfig:
    """The DiT's config from its converted tree's shapes; `max_size` from the learned position tables."""
    fixed: dict[str, Any] = {}
    if "learnable_pos_embed/pos_emb_t" in shapes:
        patch = CosmosTransformerConfig.patch_size
        fixed["max_size"] = tuple(shapes[f"learnable_pos_embed/pos_emb_{axis}"][0] * p for axis, p in zip("thw", patch))
    return CosmosTransformerConfig.from_param_shapes(shapes, **fixed)


FAMILY = CosmosFamily
