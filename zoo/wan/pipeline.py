"""The Wan 2.1 / 2.2 pipelines: text (and image) encode → flow sampling → VAE decode → frames.

Follows diffusers' `WanPipeline` and `WanImageToVideoPipeline` step by step:

- T2V (Wan2.1, Wan2.2 A14B): UMT5 embeddings of the cleaned prompt, 512 tokens, zeroed past the
  prompt's length; noise `[1, z, 1 + (F-1)/4, H/8, W/8]`; classifier-free guidance.
- I2V (Wan2.1 I2V, Wan2.2 I2V-A14B): the VAE-encoded first frame (followed by zero frames) and a
  4-channel first-frame mask are concatenated to the latents (36 channels); Wan2.1 I2V also feeds
  CLIP `hidden_states[-2]` of the image to the DiT's image cross-attention.
- TI2V-5B (Wan2.2, `expand_timesteps`): per-token timesteps; for I2V the first latent frame is the
  encoded image, substituted into the latents before every step and at the end, its tokens at t=0.
- A14B: `transformer` while t ≥ boundary × 1000, then `transformer_2`, each with its own guidance.

Model sizes come from the checkpoint's configs (diffusers `*/config.json`, the official DiT's
`config.json`); defaults of the sampling settings are the model's native ones, overridden by the
folder's `scheduler/scheduler_config.json` where it has one, then by the user's options.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from functools import partial
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vidax.translator.registry import load_registry
from vidax.zoo import registry
from vidax.zoo.dit import forward
from vidax.zoo.encoders.clip import (
    CLIP_MEAN,
    CLIP_STD,
    WAN_CLIP_VISION,
    CLIPVisionModelWithProjection,
    clip_preprocess,
    clip_vision_config,
)
from vidax.zoo.encoders.prompts import wan_prompt_clean
from vidax.zoo.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.encoders.tokenizer import load_tokenizer
from vidax.zoo.encoders.vision import VisionConfig
from vidax.zoo.mesh import check_heads, make_mesh
from vidax.zoo.offload import HostBlocks, StreamedDiT, stream_blocks
from vidax.zoo.planner import Job, abstract_param_count, dit_sizes
from vidax.zoo.pipeline import (
    GenerateOptions,
    GenerateResult,
    PipelineError,
    Progress,
    StageTimer,
    WeightsSource,
    load_latents,
    release,
    seeded_noise,
)
from vidax.zoo.runtime import use_mesh
from vidax.zoo.samplers import cfg, expert_for_timestep, sample
from vidax.zoo.samplers.configs import stepper_from_config
from vidax.zoo.video_io import read_image
from vidax.zoo.wan.config import WanTransformerConfig
from vidax.zoo.wan.sharding import DIT_RULES, place_transformer
from vidax.zoo.wan.transformer import WanTransformer
from vidax.zoo.wan.vae import WAN21_VAE, WAN22_VAE, WanVAE, WanVAEConfig, denormalize_latents, normalize_latents

Params = dict[str, Any]
MAX_SEQUENCE_LENGTH = 512  # the reference pads every prompt to 512 tokens (I2V splits text from image by it)
SAMPLERS = ("unipc", "euler")


# --- native settings (MODELS.md, official Wan configs) ---------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class WanSettings:
    """The model's native sampling settings; the user's options and the scheduler config override them."""

    height: int
    width: int
    frames: int = 81
    steps: int = 50
    guidance: float = 5.0
    guidance_2: float | None = None  # low-noise expert (A14B)
    shift: float = 5.0
    fps: float = 16.0
    boundary_ratio: float | None = None  # A14B expert switch
    sampler: str = "unipc"
    negative_prompt: str = ""


NATIVE: dict[str, WanSettings] = {
    "wan2.1-t2v-1.3b": WanSettings(height=480, width=832, shift=5.0),
    "wan2.1-t2v-14b": WanSettings(height=720, width=1280, shift=5.0),
    "wan2.1-i2v-14b-480p": WanSettings(height=480, width=832, steps=40, shift=3.0),
    "wan2.1-i2v-14b-720p": WanSettings(height=720, width=1280, steps=40, shift=5.0),
    "wan2.2-ti2v-5b": WanSettings(height=704, width=1280, frames=121, shift=5.0, fps=24.0),
    # official Wan2.2 configs: sample_guide_scale = (low-noise, high-noise)
    "wan2.2-t2v-a14b": WanSettings(height=720, width=1280, shift=12.0, guidance=4.0, guidance_2=3.0, boundary_ratio=0.875),
    "wan2.2-i2v-a14b": WanSettings(height=720, width=1280, steps=40, shift=5.0, guidance=3.5, guidance_2=3.5,
                                   boundary_ratio=0.9),
}


# the official repos' `models_t5_umt5-xxl-enc-bf16.pth` carries no config (sizes of google/umt5-xxl's
# encoder); used only to size the text encoder for the memory planner before its file is read
UMT5_XXL = T5Config(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                    feed_forward_proj="gated-gelu", per_layer_position_bias=True)


# --- model description --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WanModel:
    """What a checkpoint is: its components' configs and how the pipeline must drive them."""

    transformer: WanTransformerConfig
    vae: WanVAEConfig
    text_encoder: T5Config | None  # None: the official .pth has no config; read off its shapes at load
    image_encoder: VisionConfig | None  # CLIP, Wan2.1 I2V only
    two_experts: bool
    expand_timesteps: bool  # Wan2.2 TI2V-5B
    scheduler: Mapping[str, Any]  # diffusers scheduler_config.json, {} when absent
    image_processor: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # CLIPImageProcessor config
    boundary_ratio: float | None = None  # the folder's own A14B expert switch (model_index.json)

    @property
    def concat_condition(self) -> bool:
        """Wan2.1 / A14B I2V: latents + mask (4) + encoded image (z) channels."""
        return self.transformer.in_channels == 2 * self.vae.z_dim + 4

    @property
    def vae_spec(self) -> str:
        return "wan/vae22" if self.vae.is_residual else "wan/vae"

    @property
    def spatial_multiple(self) -> int:
        return self.vae.scale_factor_spatial * self.transformer.patch_size[1]


def describe(source: WeightsSource, name: str) -> WanModel:
    """Read a Wan checkpoint's configs (diffusers layout, official layout, or a converted folder's source)."""
    index = source.read_json("model_index.json") or {}
    dit_json = source.read_json("transformer/config.json", "config.json", component="transformer")
    if dit_json is None:
        raise PipelineError(f"{source.root or source.repo}: no transformer config.json found")
    dit = WanTransformerConfig.from_hf_config(dit_json)
    official = "model_type" in dit_json or "dim" in dit_json
    if official and name == "wan2.2-i2v-a14b":  # official config says "i2v" but the A14B DiT has no CLIP branch
        dit = dataclasses.replace(dit, image_dim=None, added_kv_proj_dim=None)
    vae_json = source.read_json("vae/config.json", component="vae")
    if vae_json is not None:
        vae = WanVAEConfig.from_hf_config(vae_json)
    else:
        vae = WAN22_VAE if dit.in_channels == WAN22_VAE.z_dim or dit_json.get("model_type") == "ti2v" else WAN21_VAE
    t5_json = source.read_json("text_encoder/config.json", component="text_encoder")
    text = T5Config.from_hf_config(t5_json) if t5_json is not None else None
    image = None
    if dit.image_dim is not None:
        clip_json = source.read_json("image_encoder/config.json", component="image_encoder")
        image = clip_vision_config(clip_json) if clip_json is not None else WAN_CLIP_VISION
    two = bool(index.get("boundary_ratio")) or (source.find("transformer_2", "low_noise_model") is not None)
    expand = bool(index.get("expand_timesteps")) or dit_json.get("model_type") == "ti2v" or (
        official and name == "wan2.2-ti2v-5b")
    scheduler = source.read_json("scheduler/scheduler_config.json", component="transformer") or {}
    processor = source.read_json("image_processor/preprocessor_config.json", component="image_encoder") or {}
    return WanModel(dit, vae, text, image, two, expand, scheduler, processor, index.get("boundary_ratio"))


# --- settings ----------------------------------------------------------------------------------


def resolve_settings(options: GenerateOptions, native: WanSettings, model: WanModel) -> WanSettings:
    """Native settings ← the folder's scheduler config ← the user's options; validated."""
    s = native
    if model.boundary_ratio is not None:
        s = dataclasses.replace(s, boundary_ratio=float(model.boundary_ratio))
    if model.scheduler.get("flow_shift") is not None:
        s = dataclasses.replace(s, shift=float(model.scheduler["flow_shift"]))
    if model.scheduler.get("_class_name") == SAMPLER_CLASSES["euler"]:
        s = dataclasses.replace(s, sampler="euler", shift=float(model.scheduler.get("shift", s.shift)))
    given = {k: getattr(options, k) for k in ("height", "width", "frames", "steps", "guidance", "guidance_2", "shift",
                                              "sampler", "negative_prompt") if getattr(options, k) is not None}
    s = dataclasses.replace(s, **given)
    if model.two_experts and s.boundary_ratio is None:
        raise PipelineError("a two-expert Wan2.2 checkpoint needs a boundary ratio (use a wan2.2-*-a14b model name)")
    if options.guidance_2 is not None and not model.two_experts:
        raise PipelineError("--guidance-2 is the low-noise expert's scale: only two-expert models (wan2.2-*-a14b) take it")
    _check_size(s, model)
    if s.sampler not in SAMPLERS:
        raise PipelineError(f"unknown sampler {s.sampler!r} (choose from {', '.join(SAMPLERS)})")
    if s.steps < 1:
        raise PipelineError(f"--steps must be at least 1, got {s.steps}")
    return s


def _check_size(s: WanSettings, model: WanModel) -> None:
    step = model.spatial_multiple
    for what, value in (("height", s.height), ("width", s.width)):
        if value < step or value % step:
            nearest = max(step, round(value / step) * step)
            raise PipelineError(f"--{what} {value} is not a multiple of {step} for this model; nearest valid: {nearest}")
    t = model.vae.scale_factor_temporal
    if s.frames < 1 or (s.frames - 1) % t:
        nearest = max(1, round((s.frames - 1) / t) * t + 1)
        raise PipelineError(f"--frames {s.frames} is not of the form {t}k+1; nearest valid: {nearest}")


def latent_shape(s: WanSettings, model: WanModel) -> tuple[int, ...]:
    v = model.vae
    frames = (s.frames - 1) // v.scale_factor_temporal + 1
    return (1, v.z_dim, frames, s.height // v.scale_factor_spatial, s.width // v.scale_factor_spatial)


# diffusers' Wan scheduler (the released `scheduler_config.json`), used when a folder carries none
WAN_SCHEDULER = {"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction",
                 "use_flow_sigmas": True, "solver_order": 2, "solver_type": "bh2", "lower_order_final": True}
SAMPLER_CLASSES = {"unipc": "UniPCMultistepScheduler", "euler": "FlowMatchEulerDiscreteScheduler"}


def make_stepper(s: WanSettings, scheduler: Mapping[str, Any]):
    """The stepper of the folder's scheduler config (diffusers' Wan UniPC otherwise) at the chosen shift;
    a different `--sampler` replaces the class and keeps only the shift."""
    config = dict(scheduler) if scheduler else dict(WAN_SCHEDULER)
    if config.get("_class_name") != SAMPLER_CLASSES[s.sampler]:
        config = dict(WAN_SCHEDULER) if s.sampler == "unipc" else {"_class_name": SAMPLER_CLASSES["euler"]}
    config.update(flow_shift=s.shift, shift=s.shift)
    return stepper_from_config(config, s.steps)


# --- compiled units ----------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("model",))
def _encode_text(model: T5EncoderModel, params: Params, ids: jax.Array, mask: jax.Array) -> jax.Array:
    last, _ = model.apply({"params": params}, ids, mask)
    return last * mask[..., None].astype(last.dtype)  # the reference zeroes embeddings past the prompt


@partial(jax.jit, static_argnames=("model",))
def _encode_image(model: CLIPVisionModelWithProjection, params: Params, pixels: jax.Array) -> jax.Array:
    return model.apply({"params": params}, pixels).hidden_states[-2]


def _guided(run, dtype, latents, timestep, text, image, scale, guided: bool):
    """`run(latents, timestep, text, image)` with classifier-free guidance over a [cond; uncond] batch."""
    text = text.astype(dtype)  # diffusers casts latents and embeddings to the transformer's dtype
    image = None if image is None else image.astype(dtype)
    if not guided:
        return run(latents.astype(dtype), timestep, text[:1], image).astype(jnp.float32)
    both = lambda x: None if x is None else jnp.concatenate([x, x], axis=0)  # noqa: E731
    out = run(both(latents.astype(dtype)), both(timestep), text, both(image)).astype(jnp.float32)
    cond, uncond = jnp.split(out, 2, axis=0)
    return cfg(cond, uncond, scale)


@partial(jax.jit, static_argnames=("model", "guided"))
def _velocity(model: WanTransformer, params: Params, latents, timestep, text, image, scale, *, guided: bool):
    """The resident DiT's guided prediction, one compiled unit per step."""
    return _guided(partial(forward, model, params), model.dtype, latents, timestep, text, image, scale, guided)


@dataclasses.dataclass
class _Expert:
    """One loaded DiT: all weights resident, or (offload) embed/head resident and blocks streamed from host."""

    model: WanTransformer
    params: Params
    streamed: StreamedDiT | None = None
    host_blocks: HostBlocks | None = None

    def __call__(self, latents, timestep, text, image, scale: float, guided: bool):
        if self.streamed is None:
            return _velocity(self.model, self.params, latents, timestep, text, image, jnp.float32(scale), guided=guided)
        run = partial(self.streamed, self.params, self.host_blocks)  # host loop over compiled chunks
        return _guided(run, self.model.dtype, latents, timestep, text, image, scale, guided)

    def release(self) -> None:
        release(self.params)
        if self.host_blocks is not None:
            release(self.host_blocks)


# --- the pipeline ------------------------------------------------------------------------------


def _place(tree: Mapping[str, np.ndarray]) -> Params:
    """The whole host tree onto the default device in one transfer."""
    return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))


class WanPipeline:
    """Generates video with a Wan 2.1 / 2.2 checkpoint.

    Args:
      name: registered model name (selects the native settings).
      options: used for the weights source and dtype; `generate` takes the rest.
      source: an already resolved weights source (embedded models pass theirs).
    """

    def __init__(self, name: str, options: GenerateOptions, source: WeightsSource | None = None):
        self.name = name
        self.native = NATIVE.get(name) or WanSettings(height=480, width=832)
        if source is None:
            entry = load_registry().get(name)
            source = WeightsSource.resolve(options.weights, entry.repo() if entry else None)
        self.source = source
        self.model = describe(source, name)
        self.mesh, self.progress, self.offload_chunk = None, None, None
        self.release_stages, self._resident = True, {}

    # weights are loaded per stage and released after it (peak memory is one stage's), unless
    # --keep-stages: then they stay placed and a second stage using them (the VAE) reuses them
    def load(self, component: str, spec: str, subfolders=(None,), dtype: str | None = None) -> Params:
        key = (component, spec, dtype)
        if key not in self._resident:
            params = _place(self.source.load(component, spec, subfolders, dtype=dtype, progress=self.progress))
            if self.release_stages:
                return params
            self._resident[key] = params
        return self._resident[key]

    def _done(self, params: Params) -> None:
        if self.release_stages:
            release(params)

    def generate(self, options: GenerateOptions, progress: Progress | None = None) -> GenerateResult:
        """Run the whole pipeline; returns float32 frames `[F, H, W, 3]` in [0, 1] and the final latents."""
        image = self._check_image(options)
        if image is not None and options.height is None and options.width is None:
            options = dataclasses.replace(options, **self._image_size(image))
        s = resolve_settings(options, self.native, self.model)
        self.mesh = self._make_mesh(options)
        self.progress = progress
        self.offload_chunk = options.offload_chunk
        self.release_stages = options.release_stages
        if self.offload_chunk is not None and self.offload_chunk < 1:
            raise PipelineError(f"--offload-chunk must be at least 1 block, got {self.offload_chunk}")
        timer = StageTimer(progress)
        shape = latent_shape(s, self.model)
        noise = (load_latents(options.latents, shape) if options.latents is not None
                 else seeded_noise(options.seed, shape))
        guided = s.guidance > 1.0  # as diffusers: the first expert's scale decides, guidance_2 then applies as is
        with timer.stage("text encode"):
            text = self.encode_prompts(options.prompt, s.negative_prompt if guided else None, options.dtype)
        image_embeds, condition = None, None
        if image is not None:
            with timer.stage("image encode"):
                image_embeds, condition = self.encode_image(image, s, options.dtype)
        latents = self.denoise(s, noise, text, image_embeds, condition, guided, timer, options.dtype)
        with timer.stage("decode"):
            frames = self.decode(latents, options.dtype)
        settings = {**dataclasses.asdict(options), **dataclasses.asdict(s), "model": self.name, "seed": options.seed,
                    "weights_source": self.source.label, "latent_shape": list(shape)}
        return GenerateResult(frames=frames, latents=np.asarray(latents), fps=s.fps, settings=settings, times=timer.times)

    def _image_size(self, image: np.ndarray) -> dict[str, int]:
        """The image's aspect ratio at the native pixel area, on the model's size grid (as the official
        I2V code and diffusers' Wan I2V example size the video when no size is given)."""
        area, step = self.native.height * self.native.width, self.model.spatial_multiple
        aspect = image.shape[0] / image.shape[1]
        height = max(step, round(np.sqrt(area * aspect)) // step * step)
        width = max(step, round(np.sqrt(area / aspect)) // step * step)
        return {"height": int(height), "width": int(width)}

    def _make_mesh(self, options: GenerateOptions):
        """The DiT's mesh (None on one device); encoders and VAE run on one device, the DiT dominates."""
        check_heads(self.model.transformer.num_attention_heads, options.tp, options.sp)
        mesh = make_mesh(options.dp, options.tp, options.sp)  # raises when the devices do not suffice
        return mesh if mesh.size > 1 else None

    def memory_job(self, options: GenerateOptions) -> Job:
        """What the memory planner needs for this checkpoint at the requested size (abstract shapes only)."""
        s = resolve_settings(options, self.native, self.model)
        cfg, vae_cfg = self.model.transformer, self.model.vae
        dit = dit_sizes(WanTransformer(cfg).param_shapes(), dim=cfg.inner_dim, ffn_dim=cfg.ffn_dim,
                        heads=cfg.num_attention_heads, text_dim=cfg.inner_dim)
        _, _, f, h, w = latent_shape(s, self.model)
        tokens = math.prod(n // p for n, p in zip((f, h, w), cfg.patch_size))
        width = 4 if options.dtype == "float32" else 2
        text = self.model.text_encoder or UMT5_XXL
        ids = jnp.zeros((1, 8), jnp.int32)
        return Job(
            dit,
            tokens=tokens,
            text_tokens=MAX_SEQUENCE_LENGTH + (257 if self.model.image_encoder is not None else 0),
            batch=2 if s.guidance > 1.0 else 1,
            weight_bytes=width,
            activation_bytes=width,
            residual_bytes=4,  # the fp32 residual stream
            text_encoder_params=abstract_param_count(T5EncoderModel(text), ids, jnp.ones_like(ids)),
            text_encoder_bytes=width,
            vae_params=sum(math.prod(shape) for shape in WanVAE(vae_cfg).param_shapes().values()),
            # decode works one latent frame (4 video frames) at a time; its widest live tensors are
            # a few fp32 [4, H, W, decoder_dim] maps at full resolution
            vae_peak_activation_bytes=4 * vae_cfg.scale_factor_temporal * s.height * s.width * vae_cfg.decoder_dim * 4,
            blockwise_attention=jax.default_backend() == "cpu",
        )

    def _check_image(self, options: GenerateOptions) -> np.ndarray | None:
        needs_image = self.model.concat_condition
        if options.image is None:
            if needs_image:
                raise PipelineError(f"{self.name} is an image-to-video model: give --image PATH")
            return None
        if not (needs_image or self.model.expand_timesteps):
            raise PipelineError(f"{self.name} is text-to-video only and takes no --image")
        return read_image(options.image)

    # 1. text ----------------------------------------------------------------------------------

    def encode_prompts(self, prompt: str, negative: str | None, dtype: str | None) -> jax.Array:
        """`[1 or 2, 512, text_dim]` fp32 UMT5 embeddings (cond, then uncond when guided); zero past each prompt."""
        folder = self.source.find("tokenizer", "google/umt5-xxl", component="text_encoder")
        if folder is None:
            raise PipelineError(f"{self.source.root or self.source.repo}: no tokenizer folder found")
        texts = [wan_prompt_clean(prompt)] + ([wan_prompt_clean(negative)] if negative is not None else [])
        batch = load_tokenizer(folder)(texts, max_length=MAX_SEQUENCE_LENGTH)
        tree = self.source.load("text_encoder", "encoders/umt5", ("text_encoder", None), dtype=dtype,
                                progress=self.progress)
        config = self.model.text_encoder or T5Config.from_shapes({p: a.shape for p, a in tree.items()})
        params = _place(tree)
        model = T5EncoderModel(config, dtype=jnp.float32)  # fp32 encode, cast after (see DESIGN)
        embeds = _encode_text(model, params, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask))
        embeds.block_until_ready()
        self._done(params)
        return embeds

    # 2. image ---------------------------------------------------------------------------------

    def encode_image(self, image: np.ndarray, s: WanSettings, dtype: str | None):
        """CLIP image embeddings (Wan2.1 I2V) and the latent condition the DiT is fed with."""
        embeds = None
        if self.model.image_encoder is not None:
            params = self.load("image_encoder", "encoders/clip_vision", ("image_encoder", None), dtype)
            clip = CLIPVisionModelWithProjection(self.model.image_encoder, dtype=jnp.float32,
                                                 with_projection="visual_projection" in params)
            proc = self.model.image_processor
            size = proc.get("size", {}).get("shortest_edge", self.model.image_encoder.image_size)
            pixels = clip_preprocess(image, size=size, mean=proc.get("image_mean", CLIP_MEAN),
                                     std=proc.get("image_std", CLIP_STD))
            embeds = _encode_image(clip, params, jnp.asarray(pixels))
            embeds.block_until_ready()
            self._done(params)
        first = vae_image(image, s.height, s.width)  # [1, 3, 1, H, W] in [-1, 1]
        video = first if self.model.expand_timesteps else np.concatenate(
            [first, np.zeros((1, 3, s.frames - 1, s.height, s.width), np.float32)], axis=2)
        vae = WanVAE(self.model.vae)
        params = self.load("vae", self.model.vae_spec, ("vae", None))
        encoded = normalize_latents(self.model.vae, vae.encode(params, jnp.asarray(video)))
        self._done(params)
        if self.model.expand_timesteps:
            return embeds, encoded
        mask = np.zeros((1, self.model.vae.scale_factor_temporal, *encoded.shape[2:]), np.float32)
        mask[:, :, 0] = 1.0  # the first (image) frame is known
        return embeds, jnp.concatenate([jnp.asarray(mask), encoded], axis=1)

    # 3. denoise -------------------------------------------------------------------------------

    def denoise(self, s: WanSettings, noise: np.ndarray, text, image_embeds, condition, guided: bool,
                timer: StageTimer, dtype: str | None) -> jax.Array:
        stepper = make_stepper(s, self.model.scheduler)
        first_frame = self._first_frame_mask(noise.shape) if self.model.expand_timesteps else None
        experts = self._experts(stepper.timesteps, s)
        loaded: dict[int, _Expert] = {}
        last = [time.perf_counter()]

        def model_fn(latents, i, t):
            expert = experts[i]
            if expert not in loaded:
                for old in list(loaded):  # one expert's weights at a time
                    loaded.pop(old).release()
                loaded[expert] = self._load_expert(expert, dtype)
            scale = s.guidance if expert == 0 or s.guidance_2 is None else s.guidance_2
            x, timestep = self._model_input(latents, t, condition, first_frame)
            return loaded[expert](x, timestep, text, image_embeds, scale, guided)

        def on_step(i, latents):
            latents.block_until_ready()
            now = time.perf_counter()
            timer.progress.advance("denoise", 1, f"{now - last[0]:.3g} s/step")
            last[0] = now

        on_mesh = use_mesh(self.mesh, DIT_RULES) if self.mesh is not None else contextlib.nullcontext()
        with timer.stage("denoise", total=stepper.num_steps), on_mesh:
            latents = sample(model_fn, stepper, jnp.asarray(noise), callback=on_step)
            latents = jnp.asarray(np.asarray(latents))  # back to one device for the VAE
            if first_frame is not None and condition is not None:
                latents = (1 - first_frame) * condition + first_frame * latents
            latents.block_until_ready()
        for expert in loaded.values():
            expert.release()
        return latents

    def _experts(self, timesteps: np.ndarray, s: WanSettings) -> list[int]:
        if not self.model.two_experts:
            return [0] * len(timesteps)
        return [expert_for_timestep(float(t), s.boundary_ratio) for t in timesteps]

    def _load_expert(self, expert: int, dtype: str | None) -> _Expert:
        component = "transformer" if expert == 0 else "transformer_2"
        subfolders = ("high_noise_model", None) if expert == 0 else ("transformer_2", "low_noise_model")
        if not self.model.two_experts:
            subfolders = (None,)
        tree = self.source.load(component, "wan/transformer", subfolders, dtype=dtype, progress=self.progress)
        # compute in the weights' dtype, as diffusers runs the transformer in its own (bf16 checkpoints: bf16)
        model = WanTransformer(self.model.transformer, dtype=jnp.dtype(tree["proj_out/kernel"].dtype))
        if self.offload_chunk is None:
            params = place_transformer(model, tree, self.mesh) if self.mesh is not None else _place(tree)
            return _Expert(model, params)
        return self._streamed_expert(model, tree)

    def _streamed_expert(self, model: WanTransformer, tree: Mapping[str, np.ndarray]) -> _Expert:
        """Embed and head weights on the devices; block weights in host memory, streamed in chunks."""
        params, streamed, host_blocks = stream_blocks(model, tree, self.offload_chunk, DIT_RULES, self.mesh)
        return _Expert(model, params, streamed, host_blocks)

    def _first_frame_mask(self, shape: tuple[int, ...]) -> jax.Array:
        mask = np.ones((1, 1, *shape[2:]), np.float32)
        mask[:, :, 0] = 0.0
        return jnp.asarray(mask)

    def _model_input(self, latents, t: float, condition, first_frame):
        """The DiT's input and timestep at one step (concat condition, or TI2V substitution and per-token t)."""
        b = latents.shape[0]
        if first_frame is None:
            x = latents if condition is None else jnp.concatenate([latents, condition], axis=1)
            return x, jnp.full((b,), t, jnp.float32)
        mask = first_frame if condition is not None else jnp.ones_like(first_frame)
        x = latents if condition is None else (1 - mask) * condition + mask * latents
        _, ph, pw = self.model.transformer.patch_size
        per_token = (mask[0, 0][:, ::ph, ::pw] * t).reshape(1, -1)  # [1, seq]: image tokens at t = 0
        return x, jnp.broadcast_to(per_token, (b, per_token.shape[1]))

    # 4. decode --------------------------------------------------------------------------------

    def decode(self, latents: jax.Array, dtype: str | None) -> np.ndarray:
        """Latents -> float32 frames `[F, H, W, 3]` in [0, 1] (diffusers `output_type="np"`)."""
        vae = WanVAE(self.model.vae)
        params = self.load("vae", self.model.vae_spec, ("vae", None))
        video = vae.decode(params, denormalize_latents(self.model.vae, latents.astype(jnp.float32)))
        frames = np.asarray(jnp.clip(video[0] / 2 + 0.5, 0.0, 1.0)).transpose(1, 2, 3, 0)
        self._done(params)
        return frames.astype(np.float32)


def vae_image(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """diffusers `VideoProcessor.preprocess`: Lanczos resize to (width, height), [-1, 1], `[1, 3, 1, H, W]`."""
    from PIL import Image

    resized = np.asarray(Image.fromarray(image).resize((width, height), Image.LANCZOS), np.float32) / 255.0
    return (resized * 2.0 - 1.0).transpose(2, 0, 1)[None, :, None]


# --- registration --------------------------------------------------------------------------------


def _factory(name: str, options: GenerateOptions) -> WanPipeline:
    return WanPipeline(name, options)


for _name, _entry in load_registry().items():
    if _entry.family == "wan":
        registry.register(_name, "wan", _entry.description, _factory)
