"""Wan 2.1 / 2.2 on the family contract: text (and image) encode -> flow sampling -> VAE decode.

Follows diffusers' `WanPipeline` and `WanImageToVideoPipeline` step by step:

- T2V (Wan2.1, Wan2.2 A14B): UMT5 embeddings of the cleaned prompt, 512 tokens, zeroed past the
  prompt's length; noise `[1, z, 1 + (F-1)/4, H/8, W/8]`; classifier-free guidance.
- I2V (Wan2.1 I2V, Wan2.2 I2V-A14B): the VAE-encoded first frame (followed by zero frames) and a
  4-channel frame mask are concatenated to the latents (36 channels); Wan2.1 I2V also feeds CLIP
  `hidden_states[-2]` of the image to the DiT's image cross-attention. FLF2V (`--last-image`) ends
  the condition video with the last frame, marks it in the mask, and feeds both frames' CLIP tokens.
- TI2V-5B (Wan2.2, `expand_timesteps`): per-token timesteps; for I2V the first latent frame is the
  encoded image, substituted into the latents before every step and at the end, its tokens at t=0.
- A14B: `transformer` while t >= boundary x 1000, then `transformer_2`, each with its own guidance.

Sizes come from the checkpoint's configs (diffusers `*/config.json`, the official DiT's
`config.json`, the converted tree's shapes); native settings from the registry; the folder's
scheduler config wins over both.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vidax.zoo.parts.encoders.clip import CLIP_MEAN, CLIP_STD, WAN_CLIP_VISION, CLIPVisionModelWithProjection
from vidax.zoo.parts.encoders.clip import clip_preprocess, clip_vision_config
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.generator.contract import Decoded, DiTPart, Family, Flag, Inputs, Settings, cfg_predict
from vidax.zoo.generator.stages import Run
from vidax.zoo.errors import PipelineError
from vidax.zoo.video_io import vae_image
from vidax.zoo.compute.planner import BLOCKWISE_LAYOUT_COPIES, Job, abstract_param_count
from vidax.zoo.weights.quantize import block_bytes_per_param
from vidax.zoo.samplers import TwoExperts
from vidax.zoo.wan.config import WanTransformerConfig
from vidax.zoo.wan.text import MAX_SEQUENCE_LENGTH, wan_text_features
from vidax.zoo.wan.vace_inputs import FLAGS as VACE_FLAGS
from vidax.zoo.wan.transformer import WanTransformer
from vidax.zoo.parts.wan_vae import (
    WAN21_VAE,
    WAN22_VAE,
    WanVAE,
    WanVAEConfig,
    denormalize_latents,
    normalize_latents,
    planner_entries,
)
from vidax.zoo.compute.runtime import platform
from vidax.zoo.parts.encoders.common import by_layer


@dataclasses.dataclass(frozen=True, kw_only=True)
class WanSettings(Settings):
    """Wan's settings: the common ones, plus the A14B experts' switch and second guidance."""

    guidance_2: float | None = None  # the low-noise expert's guidance (A14B)
    boundary_ratio: float | None = None  # A14B expert switch: t >= ratio x 1000 runs `transformer`
    max_sequence_length: int = MAX_SEQUENCE_LENGTH  # UMT5 tokens per prompt (the pipelines' `max_sequence_length`)
    # VACE (wan2.1-vace-*, `vidax.zoo.wan.vace_family`): WanVACEPipeline's video, mask, reference_images,
    # conditioning_scale (one value or a comma list), and --extend's clip and overlap
    video: Path | None = None
    mask: Path | None = None
    reference_images: tuple[Path, ...] = ()
    conditioning_scale: str | None = None
    extend: Path | None = None
    extend_overlap: int | None = None


@dataclasses.dataclass(frozen=True)
class WanModel:
    """What a checkpoint is: its components' configs and how they must be driven."""

    transformer: WanTransformerConfig
    vae: WanVAEConfig
    text_encoder: T5Config | None  # None: the official .pth has no config; read off its shapes at load
    image_encoder: Any  # CLIP VisionConfig (Wan2.1 I2V / FLF2V) or None
    two_experts: bool
    expand_timesteps: bool  # Wan2.2 TI2V-5B
    image_processor: Mapping[str, Any]  # CLIPImageProcessor config

    @property
    def concat_condition(self) -> bool:
        """I2V: latents + mask (4) + encoded image (z) channels."""
        return self.transformer.in_channels == 2 * self.vae.z_dim + 4

    @property
    def first_last_frame(self) -> bool:
        """FLF2V: the image branch takes two frames' tokens (its position table covers both)."""
        return self.transformer.pos_embed_seq_len is not None


@dataclasses.dataclass(frozen=True)
class WanCondition:
    """What the DiT gets besides the latents at every step."""

    text: jax.Array  # [1 or 2, 512, text_dim]: prompt, then negative prompt when guided
    image: jax.Array | None  # [1 or 2 (FLF2V), 257, image_dim] CLIP tokens, or None
    latents: jax.Array | None  # [1, 4 + z, F', H', W'] mask + encoded frames (I2V), or the encoded first frame (TI2V)
    first_frame: jax.Array | None  # [1, 1, F', H', W'] 0 on the first latent frame (TI2V), else None


jax.tree_util.register_dataclass(WanCondition, data_fields=["text", "image", "latents", "first_frame"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class WanPredict:
    """The guided velocity at one step (hashable: one compiled unit per configuration)."""

    guided: bool
    dtype: str  # the DiT's compute dtype
    patch: tuple[int, int]  # (ph, pw): TI2V's per-token timesteps follow the patch grid

    def __call__(self, run, latents, timestep, cond: WanCondition, knobs):
        dtype = jnp.dtype(self.dtype)
        x, t = _model_input(latents, timestep, cond, self.patch)
        text = cond.text.astype(dtype)  # diffusers casts latents and embeddings to the transformer's dtype
        image = None if cond.image is None else cond.image.astype(dtype)
        positive = (x.astype(dtype), t, text[:1], image)
        negative = (x.astype(dtype), t, text[1:], image) if self.guided else None
        return cfg_predict(run, positive, negative, knobs["scale"])


def _model_input(latents, t, cond: WanCondition, patch: tuple[int, int]):
    """The DiT's input and timestep at one step (concat condition, or TI2V substitution and per-token t)."""
    if cond.first_frame is None:
        x = latents if cond.latents is None else jnp.concatenate([latents, cond.latents.astype(latents.dtype)], axis=1)
        return x, jnp.full((latents.shape[0],), t, jnp.float32)
    mask = cond.first_frame if cond.latents is not None else jnp.ones_like(cond.first_frame)
    x = latents if cond.latents is None else (1 - mask) * cond.latents + mask * latents
    ph, pw = patch
    per_token = (mask[0, 0][:, ::ph, ::pw] * t).reshape(1, -1)  # [1, seq]: image tokens at t = 0
    return x, jnp.broadcast_to(per_token, (latents.shape[0], per_token.shape[1]))


@by_layer
def _encode_image(model: CLIPVisionModelWithProjection, params, pixels: jax.Array) -> jax.Array:
    return model.apply({"params": params}, pixels).hidden_states[-2]


# the official repos' `models_t5_umt5-xxl-enc-bf16.pth` carries no config (sizes of google/umt5-xxl's
# encoder); used only to size the text encoder for the memory planner before its file is read
UMT5_XXL = T5Config(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                    feed_forward_proj="gated-gelu", per_layer_position_bias=True)


class WanFamily(Family):
    """Wan 2.1 / 2.2: every registered variant (T2V, I2V, FLF2V, TI2V-5B, A14B experts)."""

    name = "wan"
    settings_class = WanSettings
    flags = (
        Flag("--guidance-2", "guidance_2", float, "guidance of the low-noise expert (Wan2.2 A14B; default --guidance)"),
        Flag("--last-image", "last_image", Path, "last-frame image (first-last-frame models: wan2.1-flf2v-*)",
             image=True),
        Flag("--max-sequence-length", "max_sequence_length", int,
             "UMT5 tokens per prompt, features zero past the prompt (diffusers' max_sequence_length; default 512)"),
        *VACE_FLAGS,
    )
    vace = False  # the VACE models are `WanVACEFamily` (a registry entry whose DiT spec is wan/vace_transformer;
    # `vidax.zoo.wan.family` picks the class)
    transformer_config = WanTransformerConfig

    # --- configs ----------------------------------------------------------------------------

    @cached_property
    def model(self) -> WanModel:
        official = [f"{folder}/config.json" for folder in self.component("transformer").subfolders if folder]
        dit_json = self.require_config("transformer", "transformer/config.json", "config.json", *official)
        official = "dim" in dit_json and "num_heads" in dit_json
        # official configs cannot say whether an "i2v" DiT has the CLIP branch (Wan2.2 I2V-A14B has
        # none): the converted tree's shapes decide
        shapes = self._dit_shapes() if official else None
        dit = self.transformer_config.from_hf_config(dit_json, param_shapes=shapes)
        vae_json = self.read_config("vae", "vae/config.json")
        if vae_json is not None:
            vae = WanVAEConfig.from_hf_config(vae_json)
        else:
            vae = WAN22_VAE if dit.in_channels == WAN22_VAE.z_dim or dit_json.get("model_type") == "ti2v" else WAN21_VAE
        t5_json = self.read_config("text_encoder", "text_encoder/config.json")
        image = None
        if dit.image_dim is not None:
            clip_json = self.read_config("image_encoder", "image_encoder/config.json")
            image = clip_vision_config(clip_json) if clip_json is not None else WAN_CLIP_VISION
        index = self.read_config("model_index", "model_index.json") or {}
        two = "transformer_2" in self.entry.components
        expand = bool(index.get("expand_timesteps")) or dit_json.get("model_type") == "ti2v"
        processor = self.read_config("image_processor", "image_processor/preprocessor_config.json") or {}
        return WanModel(dit, vae, T5Config.from_hf_config(t5_json) if t5_json else None, image, two, expand, processor)

    def _dit_shapes(self) -> dict | None:
        source = self.source_or_none
        if source is None:
            return None
        part = self.component("transformer")
        return source.shapes(part.component, part.spec, part.subfolders)

    def heads(self) -> int:
        return self.model.transformer.num_attention_heads

    # --- settings ---------------------------------------------------------------------------

    size_multiple = 16  # check_inputs; then floored to `size_grid` (fit_sizes)
    frame_step = 1  # any count, rounded as the pipelines round it (fit_sizes)

    @property
    def size_grid(self) -> int:
        """The pixel grid of the latent patches: VAE x patch (Wan2.1 and A14B 16, TI2V-5B 32)."""
        return self.model.vae.scale_factor_spatial * self.model.transformer.patch_size[1]

    def fit_sizes(self, s: WanSettings) -> WanSettings:
        """As `WanPipeline` / `WanImageToVideoPipeline.__call__` (with a warning) run a request: frames off the
        VAE's grid become `4 (F // 4) + 1` (6 -> 5, 8 -> 9), height and width are floored to `size_grid`."""
        t, grid = self.model.vae.scale_factor_temporal, self.size_grid
        frames = s.frames if s.frames % t == 1 else s.frames // t * t + 1
        for what, value in (("height", s.height), ("width", s.width)):
            if value < grid:  # the reference runs on to an empty latent and fails there
                raise PipelineError(f"--{what} {value} is below {grid}, the smallest size {self.name} generates "
                                    f"(its VAE x patch grid; smaller sizes are floored to 0)")
        return dataclasses.replace(s, frames=frames, height=s.height // grid * grid, width=s.width // grid * grid)

    def folder_settings(self) -> dict:
        out = {}
        index = self.read_config("model_index", "model_index.json") or {}
        if index.get("boundary_ratio") is not None:
            out["boundary_ratio"] = float(index["boundary_ratio"])
        scheduler = self.scheduler_config()
        shift = scheduler.get("flow_shift") if "flow_shift" in scheduler else scheduler.get("shift")
        if shift is not None:
            out["shift"] = float(shift)
        return out

    def check_settings(self, s: WanSettings) -> None:
        if self.model.first_last_frame and s.frames == 1:  # the reference fails on it (a -1 frame gap)
            raise PipelineError(f"{self.name} ends the video with --last-image: it needs --frames 4 or more "
                                f"(1 to 3 make one frame)")
        if self.model.two_experts and s.boundary_ratio is None:
            raise PipelineError(f"{self.name}: a two-expert Wan2.2 checkpoint needs a boundary ratio")
        if s.guidance_2 is not None and not self.model.two_experts:
            raise PipelineError("--guidance-2 is the low-noise expert's scale: only two-expert models (wan2.2-*-a14b) take it")
        if s.max_sequence_length < 1:
            raise PipelineError(f"--max-sequence-length must be at least 1, got {s.max_sequence_length}")
        if self.model.image_encoder is not None and s.max_sequence_length != MAX_SEQUENCE_LENGTH:
            raise PipelineError(f"{self.name} splits its context into text and image at {MAX_SEQUENCE_LENGTH} tokens "
                                f"(diffusers' I2V attention): --max-sequence-length must be {MAX_SEQUENCE_LENGTH}")
        given = [flag.name for flag in VACE_FLAGS if getattr(s, flag.field) not in (None, ())]
        if given and not self.vace:
            raise PipelineError(f"{self.name} takes no {', '.join(given)} (the VACE models do: wan2.1-vace-*, wan2.2-vace-fun-a14b)")

    def image_roles(self) -> dict[str, bool]:
        if self.model.expand_timesteps:
            return {"image": False}
        if not self.model.concat_condition:
            return {}
        return {"image": True, "last_image": True} if self.model.first_last_frame else {"image": True}

    def size_for_image(self, image: np.ndarray, s: WanSettings) -> tuple[int, int]:
        """The image's aspect ratio at the native pixel area, on the model's size grid (as the official
        I2V code and diffusers' Wan I2V example size the video when no size is given)."""
        area, step = s.height * s.width, self.size_grid
        aspect = image.shape[0] / image.shape[1]
        height = max(step, round(np.sqrt(area * aspect)) // step * step)
        width = max(step, round(np.sqrt(area / aspect)) // step * step)
        return int(height), int(width)

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        v = self.model.vae
        frames = (s.frames - 1) // v.scale_factor_temporal + 1
        return (1, v.z_dim, frames, s.height // v.scale_factor_spatial, s.width // v.scale_factor_spatial)

    def tokens(self, s: Settings) -> int:
        _, _, f, h, w = self.latent_shape(s)
        return math.prod(n // p for n, p in zip((f, h, w), self.model.transformer.patch_size))

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: WanSettings, inputs: Inputs) -> WanCondition:
        text = self.encode_prompts(run, inputs.prompt, inputs.negative_prompt, s.max_sequence_length)
        image = inputs.images.get("image")
        if image is None:
            return WanCondition(text, None, None, None)
        return self.encode_images(run, s, image, inputs.images.get("last_image"), text)

    def encode_prompts(self, run: Run, prompt: str, negative: str | None,
                       max_length: int = MAX_SEQUENCE_LENGTH) -> jax.Array:
        """`[1 or 2, max_length, text_dim]` fp32 UMT5 embeddings (prompt, then negative when guided); zero past each prompt."""
        folder = self.source.find("tokenizer", "google/umt5-xxl", component="text_encoder")
        if folder is None:
            raise PipelineError(f"{self.source.label}: no tokenizer folder found")
        part = self.component("text_encoder")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        shapes = {path: leaf.shape for path, leaf in traverse_util.flatten_dict(params, sep="/").items()}
        config = self.model.text_encoder or T5Config.from_shapes(shapes)
        model = T5EncoderModel(config, dtype=jnp.float32)  # fp32 encode, cast after (docs/PRECISION.md)
        prompts = [prompt] + ([negative] if negative is not None else [])
        embeds = wan_text_features(model, {"params": params}, load_tokenizer(folder), prompts, max_length=max_length)
        embeds.block_until_ready()
        run.done(params)
        return embeds

    def encode_images(self, run: Run, s: WanSettings, image: np.ndarray, last: np.ndarray | None, text) -> WanCondition:
        """CLIP tokens (Wan2.1 I2V / FLF2V) and the latent condition the DiT is fed with."""
        m = self.model
        embeds = None
        if m.image_encoder is not None:
            part = self.component("image_encoder")
            params = run.load(part.component, part.spec, part.subfolders, run.dtype)
            clip = CLIPVisionModelWithProjection(m.image_encoder, dtype=jnp.float32,
                                                 with_projection="visual_projection" in params)
            proc = m.image_processor
            size = proc.get("size", {}).get("shortest_edge", m.image_encoder.image_size)
            frames = [image] if last is None else [image, last]
            pixels = clip_preprocess(frames, size=size, mean=proc.get("image_mean", CLIP_MEAN),
                                     std=proc.get("image_std", CLIP_STD))
            embeds = _encode_image(clip, params, jnp.asarray(pixels))
            embeds.block_until_ready()
            run.done(params)
        first = vae_image(image, s.height, s.width)  # [1, 3, 1, H, W] in [-1, 1]
        if m.expand_timesteps:
            video = first
        else:
            tail = [vae_image(last, s.height, s.width)] if last is not None else []
            gap = s.frames - 1 - len(tail)
            video = np.concatenate([first, np.zeros((1, 3, gap, s.height, s.width), np.float32), *tail], axis=2)
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        encoded = normalize_latents(m.vae, WanVAE(m.vae).encode(params, jnp.asarray(video)))
        run.done(params)
        if m.expand_timesteps:  # the encoded frame (broadcast over frames) replaces latent frame 0
            mask = np.ones((1, 1, *self.latent_shape(s)[2:]), np.float32)
            mask[:, :, 0] = 0.0
            return WanCondition(text, embeds, encoded, jnp.asarray(mask))
        mask = np.zeros((1, m.vae.scale_factor_temporal, *encoded.shape[2:]), np.float32)
        mask[:, :, 0] = 1.0  # the first (image) frame is known
        if last is not None:
            mask[:, -1, -1] = 1.0  # and the last frame: the last of the last latent frame's 4
        return WanCondition(text, embeds, jnp.concatenate([jnp.asarray(mask), encoded], axis=1), None)

    # --- denoise ----------------------------------------------------------------------------

    def dit_parts(self, s: WanSettings) -> list[DiTPart]:
        names = ["transformer", "transformer_2"] if self.model.two_experts else ["transformer"]
        return [self.component(name) for name in names]

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: WanSettings) -> WanTransformer:
        # compute in the weights' dtype, as diffusers runs the transformer in its own (bf16 checkpoints: bf16)
        return WanTransformer(self.model.transformer, dtype=jnp.dtype(tree["proj_out/kernel"].dtype))

    def experts(self, s: WanSettings, timesteps: np.ndarray) -> list[int]:
        if not self.model.two_experts:
            return [0] * len(timesteps)
        return [self._two_experts(s).expert(float(t)) for t in timesteps]

    @staticmethod
    def _two_experts(s: WanSettings) -> TwoExperts:
        return TwoExperts(boundary_ratio=s.boundary_ratio, guidance_scale=s.guidance, guidance_scale_2=s.guidance_2)

    def predictor(self, s: WanSettings, expert: int, dit: WanTransformer, step: int) -> WanPredict:
        _, ph, pw = self.model.transformer.patch_size
        return WanPredict(s.guided, jnp.dtype(dit.dtype).name, (ph, pw))

    def step_knobs(self, s: WanSettings, stepper, index: int, expert: int) -> dict:
        # as diffusers: the first expert's scale decides whether to guide; guidance_2 then applies as is
        timestep = float(stepper.timesteps[index])
        scale = self._two_experts(s).scale(timestep) if self.model.two_experts else s.guidance
        return {"scale": jnp.float32(scale)}

    def sample(self, run: Run, s: WanSettings, latents: np.ndarray, cond: WanCondition) -> jax.Array:
        out = super().sample(run, s, latents, cond)
        if cond.first_frame is not None and cond.latents is not None:  # TI2V: the image frame, exactly
            out = (1 - cond.first_frame) * cond.latents + cond.first_frame * out
        return out

    # --- decode -----------------------------------------------------------------------------

    def decode(self, run: Run, s: WanSettings, latents: jax.Array) -> Decoded:
        """Latents -> float32 frames `[F, H, W, 3]` in [0, 1] (diffusers `output_type="np"`)."""
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        video = WanVAE(self.model.vae).decode(params, denormalize_latents(self.model.vae, latents.astype(jnp.float32)))
        frames = np.asarray(jnp.clip(video[0] / 2 + 0.5, 0.0, 1.0)).transpose(1, 2, 3, 0)
        run.done(params)
        return Decoded(frames.astype(np.float32))

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the memory planner needs for this checkpoint at the requested size (abstract shapes only)."""
        s = self.resolve_settings(options)
        cfg, vae_cfg = self.model.transformer, self.model.vae
        shapes = WanTransformer(cfg).param_shapes()
        dit = WanTransformer(cfg).memory_sizes(dim=cfg.inner_dim, ffn_dim=cfg.ffn_dim, heads=cfg.num_attention_heads,
                                               text_dim=cfg.inner_dim)
        width = 4 if options.dtype == "float32" else 2
        block_bytes = block_bytes_per_param(shapes, ("blocks",), options.weights_dtype, width)  # --weights-dtype
        text = self.model.text_encoder or UMT5_XXL
        ids = jnp.zeros((1, 8), jnp.int32)
        image_tokens = 0 if self.model.image_encoder is None else 257 * (2 if self.model.first_last_frame else 1)
        return Job(
            dit,
            tokens=self.tokens(s),
            text_tokens=s.max_sequence_length + image_tokens,
            batch=2 if s.guided else 1,
            weight_bytes=width,
            activation_bytes=width,
            residual_bytes=4,  # the fp32 residual stream
            text_encoder_params=abstract_param_count(T5EncoderModel(text), ids, jnp.ones_like(ids)),
            text_encoder_bytes=width,
            **planner_entries(vae_cfg, s.height, s.width, s.frames),
            blockwise_attention=platform() == "cpu",
            block_weight_bytes=block_bytes,
            attention_input_copies=BLOCKWISE_LAYOUT_COPIES,  # over the rotated q and k (tests/dryrun: 14B at 720p)
        )


def _is_vace(entry) -> bool:
    transformer = entry.components.get("transformer")
    return transformer is not None and transformer.spec == "wan/vace_transformer"

