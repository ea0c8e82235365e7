"""CogVideoX 1.0 / 1.5 on the family contract (follows diffusers `CogVideoXPipeline` and
`CogVideoXImageToVideoPipeline`, driven as THUDM/CogVideo inference/cli_demo.py drives them).

- Text: T5-XXL over exactly `max_sequence_length` (226) tokens, unmasked, encoded in fp32 (`text.py`);
  the negative branch encodes the negative prompt ("" by default) when guidance > 1.
- Latents: `[1, C, F', H/8, W/8]` noise (the `--latents` layout; the reference's `[B, F', C, H', W']`
  transposed); 1.5 pads F' to a multiple of `patch_size_t` (`latents.frame_plan`) and drops the padded
  leading frames before decoding.
- I2V: the first frame resized to the video size (Lanczos, [-1, 1]), VAE-encoded, its posterior sampled
  with host noise (stream 3: the reference draws it from its generator before anything else), scaled
  (1.5: divided) and followed by zero frames; concatenated to the noisy latents on the channels. 1.5 I2V
  feeds the DiT `ofs = 2.0`.
- Sampling: the folder's scheduler class (`CogVideoXDDIMScheduler` -> `ddim`, `CogVideoXDPMScheduler` ->
  `dpm`) on its own config; `--sampler` swaps the class as cli_demo does (`from_config(config,
  timestep_spacing="trailing")`). DPM draws noise every step from the run's seed on the host.
  Guidance `uncond + s (cond - uncond)`, per step with dynamic CFG (`--dynamic-cfg`, diffusers'
  `use_dynamic_cfg`; default: on with DPM, off with DDIM, as cli_demo pairs them).
- Decode: the VAE in its 2-latent-frame batches, tiled by default (cli_demo's `vae.enable_tiling()`);
  frames `clip(x / 2 + 0.5, 0, 1)`.

Configs come from the checkpoint (`transformer/`, `vae/`, `text_encoder/`, `scheduler/` config files of
the diffusers repos and `vidax-convert` folders; the SAT folders' `t5-v1_1-xxl/config.json`), else the
registry's `config` tables (the SAT repo ships none; `--plan` before any download).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from functools import cache, cached_property

import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.cogvideox.config import (
    CogVideoXConfigError,
    CogVideoXTransformerConfig,
    CogVideoXVAEConfig,
)
from vidax.zoo.cogvideox.latents import (
    OFS,
    FramePlan,
    dynamic_guidance,
    frame_plan,
    image_latents,
    is_image_to_video,
    latent_shape,
    reference_scheduler_config,
    to_vae_latents,
)
from vidax.zoo.cogvideox.text import encode_prompt
from vidax.zoo.cogvideox.transformer import CogVideoXTransformer, position_mode
from vidax.zoo.cogvideox.vae import DECODE_BATCH_FRAMES, CogVideoXVAE, Tiling
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Decoded, DiTPart, Family, Flag, Inputs, Settings, cfg_predict
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job, abstract_param_count
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.video_io import vae_image
from vidax.zoo.compute.runtime import platform

# --sampler names -> the diffusers scheduler class each stands for
SAMPLERS = {"ddim": "CogVideoXDDIMScheduler", "dpm": "CogVideoXDPMScheduler"}
IMAGE_NOISE_STREAM = 3  # host_noise stream of the I2V posterior sample (index 0)
T5_XXL_PARAMS = 4_762_310_656  # google/t5-v1_1-xxl's encoder, when no config is at hand


@dataclasses.dataclass(frozen=True, kw_only=True)
class CogVideoXSettings(Settings):
    """CogVideoX's settings: the common ones plus the pipeline's own knobs.

    Args:
      dynamic_cfg: diffusers' `use_dynamic_cfg` (the guidance scale rises over the steps); None: on with
        the DPM sampler, off with DDIM (cli_demo: "used for DPM scheduler, for DDIM scheduler, it should
        be False").
      vae_tiling: decode (and I2V-encode) in overlapping spatial tiles (cli_demo's `vae.enable_tiling()`).
      max_sequence_length: T5 tokens per prompt (the pipelines' `max_sequence_length`); the models with a
        position table (2B, 5B-I2V) take exactly their `max_text_seq_length` (226).
    """

    dynamic_cfg: bool | None = None
    vae_tiling: bool = True
    max_sequence_length: int = 226


@dataclasses.dataclass(frozen=True)
class CogVideoXCondition:
    """What the DiT gets besides the noisy latents at every step."""

    text: jax.Array  # [1 or 2, T, text_dim] fp32 T5 features: the prompt, then (guided) the negative prompt
    image: jax.Array | None  # [1, C, F', H', W'] I2V image latents (the DiT's second half of channels)


jax.tree_util.register_dataclass(CogVideoXCondition, data_fields=["text", "image"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class CogVideoXPredict:
    """The guided v-prediction at one step (hashable: one compiled unit per configuration)."""

    guided: bool
    dtype: str  # the DiT's compute dtype (its weights')
    ofs: float | None  # 1.5 I2V's ofs input (2.0), None for the others

    def __call__(self, run, latents, timestep, cond: CogVideoXCondition, knobs):
        dtype = jnp.dtype(self.dtype)
        x = latents if cond.image is None else jnp.concatenate([latents, cond.image.astype(latents.dtype)], axis=1)
        x = x.astype(dtype)
        t = jnp.broadcast_to(timestep, (1,)).astype(jnp.float32)
        ofs = None if self.ofs is None else jnp.full((1,), self.ofs, jnp.float32)
        text = cond.text.astype(jnp.float32)  # the DiT keeps the text stream in fp32
        positive = (x, t, text[:1], ofs)
        negative = (x, t, text[1:], ofs) if self.guided else None
        return cfg_predict(run, positive, negative, knobs["scale"])


# fp32 maps of [frames, H, W, block_out_channels[1]] XLA's buffer assignment keeps alive in the steady decode unit
# (a frame batch after the first, 8 frames): 16.7 at 240x360 (CogVideoX1.5's tile) and 320x480 untiled (CPU
# memory_analysis; tests/dryrun checks the whole figure). The former "four" was a quarter of it.
DECODE_LIVE_MAPS = 16.8


def decode_peak_bytes(vae: CogVideoXVAEConfig, frames: int, height: int, width: int, tiled: bool) -> int:
    """The VAE decode's largest working set (fp32), for the memory planner.

    The steady unit is one frame batch after the first (2 latent frames -> 8 pixel frames) at a tile's size
    when tiled (half the config's sample size) or the whole frame: `DECODE_LIVE_MAPS` maps of the second
    block width at full resolution, and the causal conv cache it reads and writes (exact, from its shapes);
    the decoded video itself (and, tiled, its tiles before blending) accumulates.
    """
    batch_frames = DECODE_BATCH_FRAMES * vae.temporal_compression_ratio
    h, w = height, width
    if tiled:
        tiling = Tiling.default(vae)
        h, w = min(height, tiling.sample_height), min(width, tiling.sample_width)
    widest = vae.block_out_channels[1] if len(vae.block_out_channels) > 1 else vae.block_out_channels[0]
    working = DECODE_LIVE_MAPS * batch_frames * h * w * widest * 4
    video = frames * height * width * vae.out_channels * 4 * (2 if tiled else 1)
    return int(working + decode_cache_bytes(vae, h, w) + video)


@cache  # a full-size decode traces for seconds; every CogVideoX 1.0 model shares one VAE, every 1.5 another
def decode_cache_bytes(vae: CogVideoXVAEConfig, height: int, width: int) -> int:
    """Bytes of the decoder's causal conv cache for `height` x `width` pixels, from an abstract first batch."""
    from vidax.zoo.cogvideox.vae import _run

    model = CogVideoXVAE(vae)
    s = vae.spatial_compression
    params = jax.eval_shape(model.init_params, jax.random.key(0))
    z = jax.ShapeDtypeStruct((1, DECODE_BATCH_FRAMES, height // s, width // s, vae.latent_channels), jnp.float32)
    _, cache = jax.eval_shape(lambda p, x: _run(model.module, "decode_batch", p, None, x, True), params, z)
    return int(sum(math.prod(leaf.shape) * leaf.dtype.itemsize for leaf in jax.tree.leaves(cache)))


class CogVideoXFamily(Family):
    """CogVideoX 1.0 (2B, 5B, 5B-I2V) and 1.5 (5B, 5B-I2V)."""

    name = "cogvideox"
    settings_class = CogVideoXSettings
    cache_contexts = ("cond_uncond",)  # the reference batches both CFG branches in one DiT call
    samplers = tuple(SAMPLERS)
    flags = (
        Flag("--dynamic-cfg", "dynamic_cfg", bool,
             "dynamic classifier-free guidance (diffusers' use_dynamic_cfg; default: on with --sampler dpm, off with ddim)"),
        Flag("--vae-tiling", "vae_tiling", bool, "decode (and encode the I2V image) in spatial tiles (default: on)"),
        Flag("--max-sequence-length", "max_sequence_length", int,
             "T5 tokens per prompt (default 226; 2B and 5B-I2V take only 226)"),
    )

    # --- configs ----------------------------------------------------------------------------

    @cached_property
    def dit_config(self) -> CogVideoXTransformerConfig:
        found = self.require_config("transformer", *self.config_paths("transformer", "config.json"))
        try:
            return CogVideoXTransformerConfig.from_hf_config(found)
        except CogVideoXConfigError as err:  # a config vidax cannot run: one line, not a traceback
            raise self._error(err) from None

    @cached_property
    def vae_config(self) -> CogVideoXVAEConfig:
        found = self.require_config("vae", *self.config_paths("vae", "config.json"))
        try:
            return CogVideoXVAEConfig.from_hf_config(found)
        except CogVideoXConfigError as err:
            raise self._error(err) from None

    @cached_property
    def t5_config(self) -> T5Config | None:
        found = self.read_config("text_encoder", *self.config_paths("text_encoder", "config.json"))
        return T5Config.from_hf_config(found) if found is not None else None

    @property
    def i2v(self) -> bool:
        return is_image_to_video(self.dit_config)

    def heads(self) -> int:
        return self.dit_config.num_attention_heads

    def _error(self, err: Exception) -> PipelineError:
        return PipelineError(f"{self.name}: {err}")

    # --- settings ---------------------------------------------------------------------------

    @property
    def size_multiple(self) -> int:
        return self.vae_config.spatial_compression * self.dit_config.patch_size

    # Any frame count, as the pipelines take it: F' = (F - 1) // 4 + 1 latent frames (1.5: padded to even,
    # the pad dropped before decoding); the VAE decodes them two at a time and returns 4 (F' - 1) + 1 frames
    # for an odd count of decoded latents, 4 F' for an even one (13 frames -> 16), 1 for one.
    frame_step = 1

    def folder_settings(self) -> dict:
        """The folder's scheduler class picks the sampler (the registry's stands in for folders without one)."""
        shipped = self.scheduler_config().get("_class_name")
        sampler = {cls: name for name, cls in SAMPLERS.items()}.get(shipped)
        return {"sampler": sampler} if sampler is not None else {}

    def derived_settings(self, s: CogVideoXSettings) -> dict:
        # cli_demo pairs dynamic CFG with the DPM scheduler
        return {"dynamic_cfg": s.sampler == "dpm"} if s.dynamic_cfg is None else {}

    def check_settings(self, s: CogVideoXSettings) -> None:
        if s.sampler is None:
            raise PipelineError(f"{self.name}: the folder names no CogVideoX scheduler and the registry no sampler: "
                                f"give --sampler ({', '.join(self.samplers)})")
        cfg = self.dit_config
        if s.shift is not None:
            raise PipelineError(f"{self.name} takes no --shift (its DDIM/DPM samplers have no flow shift)")
        if s.max_sequence_length < 1:
            raise PipelineError(f"--max-sequence-length must be at least 1, got {s.max_sequence_length}")
        if cfg.has_positional_table and s.max_sequence_length != cfg.max_text_seq_length:
            raise PipelineError(f"{self.name} adds a position table over {cfg.max_text_seq_length} text tokens: "
                                f"--max-sequence-length must be {cfg.max_text_seq_length}, got {s.max_sequence_length}")
        _, _, f, h, w = self.latent_shape(s)
        try:
            position_mode(cfg, f, h, w)  # 5B-I2V: its learned table covers its sample size only
        except CogVideoXConfigError as err:
            raise self._error(err) from None
        # 1.5: the RoPE grid ends at sample_height x sample_width latents
        if cfg.patch_size_t is not None and (h > cfg.sample_height or w > cfg.sample_width):
            s8 = self.vae_config.spatial_compression
            raise PipelineError(f"{self.name}: {s.height}x{s.width} exceeds the RoPE grid of "
                                f"{cfg.sample_height * s8}x{cfg.sample_width * s8} pixels")

    def image_roles(self) -> dict[str, bool]:
        return {"image": True} if self.i2v else {}

    def frame_plan(self, s: Settings) -> FramePlan:
        return frame_plan(s.frames, self.vae_config, self.dit_config)

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        """`[1, C, F', H/8, W/8]`: F' counts 1.5's padded latent frame; I2V noise has half the DiT's channels."""
        return latent_shape(1, self.frame_plan(s), s.height, s.width, self.vae_config, self.dit_config)

    # --- sampler ----------------------------------------------------------------------------

    def stepper(self, s: CogVideoXSettings, latents_shape: tuple[int, ...]):
        """The folder's scheduler as shipped; another class (`--sampler`, or the registry's when the
        folder's is not a CogVideoX one) from its config with trailing spacing, as cli_demo swaps it."""
        from vidax.zoo.samplers import stepper_from_config

        shipped = dict(self.scheduler_config())
        cls = SAMPLERS[s.sampler]
        try:
            config = reference_scheduler_config(shipped, None if shipped.get("_class_name") == cls else cls)
            return stepper_from_config(config, s.steps)
        except ValueError as err:
            raise self._error(err) from None

    def step_knobs(self, s: CogVideoXSettings, stepper, index: int, expert: int) -> dict:
        timestep = float(stepper.timesteps[index])
        scale = dynamic_guidance(s.guidance, timestep, s.steps) if s.dynamic_cfg else s.guidance
        return {"scale": jnp.float32(scale)}

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: CogVideoXSettings, inputs: Inputs) -> CogVideoXCondition:
        text = self.encode_text(run, s, inputs.prompt, inputs.negative_prompt)
        image = inputs.images.get("image")
        return CogVideoXCondition(text, None if image is None else self.encode_image(run, s, image))

    def encode_text(self, run: Run, s: CogVideoXSettings, prompt: str, negative: str | None) -> jax.Array:
        """`[1 or 2, T, 4096]` fp32 T5 features: the prompt, then the negative prompt when guided."""
        tokenizer = self.source.find("tokenizer", *(f for f in self.folders("tokenizer") if f), component="tokenizer")
        if tokenizer is None or self.t5_config is None:
            raise PipelineError(f"{self.source.label}: needs tokenizer/ and text_encoder/config.json (T5) as the "
                                "diffusers repos and vidax-convert folders hold them (SAT: t5-v1_1-xxl/)")
        part = self.component("text_encoder")
        params = run.load_part(part)  # the registry keeps T5 in fp32 (residuals near 1e5 over the padding)
        model = T5EncoderModel(self.t5_config, dtype=jnp.float32)
        cond, uncond = encode_prompt(model, params, load_tokenizer(tokenizer), prompt, negative,
                                     guidance=negative is not None, max_length=s.max_sequence_length)
        text = cond if uncond is None else jnp.concatenate([cond, uncond], axis=0)
        text.block_until_ready()
        run.done(params)
        return text

    def encode_image(self, run: Run, s: CogVideoXSettings, image: np.ndarray) -> jax.Array:
        """The I2V image latents `[1, C, F', H', W']` (diffusers I2V `prepare_latents`)."""
        vae_cfg, dit_cfg = self.vae_config, self.dit_config
        pixels = jnp.asarray(vae_image(image, s.height, s.width))
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        moments = CogVideoXVAE(vae_cfg).encode_moments(params, pixels, tiled=s.vae_tiling)
        shape = (moments.shape[0], moments.shape[1] // 2, *moments.shape[2:])
        noise = jnp.asarray(run.host_noise(IMAGE_NOISE_STREAM, 0, shape))
        latents = image_latents(moments, noise, self.frame_plan(s).latent_frames, vae_cfg, dit_cfg)
        latents.block_until_ready()
        run.done(params)
        return latents

    # --- denoise ----------------------------------------------------------------------------

    def dit_parts(self, s: Settings) -> list[DiTPart]:
        return [self.component("transformer")]

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: Settings) -> CogVideoXTransformer:
        # activations in the weights' dtype (bf16 as converted by default, fp32 with --dtype float32);
        # the video residual and the text stream stay fp32
        dtype = jnp.dtype(tree["proj_out/kernel"].dtype)
        return CogVideoXTransformer(self.dit_config, dtype=dtype, residual_dtype=jnp.float32)

    def predictor(self, s: Settings, expert: int, dit: CogVideoXTransformer, step: int) -> CogVideoXPredict:
        return CogVideoXPredict(s.guided, jnp.dtype(dit.dtype).name, OFS if dit.cfg.ofs_embed_dim else None)

    # --- decode -----------------------------------------------------------------------------

    def decode(self, run: Run, s: CogVideoXSettings, latents: jax.Array) -> Decoded:
        """Frames `[F, H, W, 3]` float32 in [0, 1] (diffusers `decode_latents` + `postprocess_video`)."""
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        z = to_vae_latents(latents.astype(jnp.float32), self.frame_plan(s), self.vae_config)
        video = CogVideoXVAE(self.vae_config).decode(params, z, tiled=s.vae_tiling)
        frames = np.asarray(jnp.clip(video[0].astype(jnp.float32) / 2 + 0.5, 0.0, 1.0)).transpose(1, 2, 3, 0)
        run.done(params)
        return Decoded(frames.astype(np.float32))

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the memory planner needs at the requested size (configs only, nothing loaded).

        Joint attention: every block's sequence is the video tokens plus the `max_sequence_length` text
        tokens. Weights and activations in bf16 as converted (fp32 with --dtype float32), the residual
        stream fp32; T5 in the registry's dtype (fp32); the VAE in fp32.
        """
        s = self.resolve_settings(options)
        job = memory_job(self.dit_config, self.vae_config, s, t5=self.t5_config,
                         weight_bytes=4 if options.dtype == "float32" else 2,
                         t5_bytes=_dtype_bytes(options.dtype or self.component("text_encoder").dtype or "bfloat16"),
                         blockwise_attention=platform() == "cpu")
        return quantized_job(job, CogVideoXTransformer(self.dit_config), options.weights_dtype)  # --weights-dtype


def _dtype_bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def video_tokens(dit: CogVideoXTransformerConfig, vae: CogVideoXVAEConfig, frames: int, height: int, width: int) -> int:
    """Video tokens per sample: the padded latent frames / patch_t x (H/16) x (W/16)."""
    plan = frame_plan(frames, vae, dit)
    pt, p, _ = dit.patch
    s = vae.spatial_compression
    return (plan.latent_frames // pt) * (height // s // p) * (width // s // p)


def memory_job(dit: CogVideoXTransformerConfig, vae: CogVideoXVAEConfig, s: CogVideoXSettings, *,
               t5: T5Config | None = None, weight_bytes: int = 2, t5_bytes: int = 4,
               blockwise_attention: bool = False) -> Job:
    """The planner's job for one CogVideoX generation (abstract shapes only).

    Args:
      dit, vae: the checkpoint's configs; s: size, frames, guidance, text length and VAE tiling.
      t5: the text encoder's config (None: T5 v1.1 XXL's published size).
      weight_bytes: 2 for bf16 DiT weights and activations (as converted), 4 for `--dtype float32`.
      t5_bytes: the text encoder's weight width (fp32 in the registry).
      blockwise_attention: the CPU kernel (score tiles in memory) rather than flash attention.
    """
    sizes = CogVideoXTransformer(dit).memory_sizes(dim=dit.inner_dim, ffn_dim=dit.ff_inner_dim,
                                                  heads=dit.num_attention_heads)
    if t5 is None:
        t5_params = T5_XXL_PARAMS
    else:
        ids = jnp.zeros((1, 8), jnp.int32)
        t5_params = abstract_param_count(T5EncoderModel(t5), ids, jnp.ones_like(ids))
    return Job(
        sizes,
        tokens=video_tokens(dit, vae, s.frames, s.height, s.width) + s.max_sequence_length,  # joint sequence
        text_tokens=0,
        batch=2 if s.guided else 1,
        weight_bytes=weight_bytes,
        activation_bytes=weight_bytes,
        residual_bytes=4,  # the fp32 video residual and text streams
        text_encoder_params=t5_params,
        text_encoder_bytes=t5_bytes,
        vae_params=sum(math.prod(shape) for shape in CogVideoXVAE(vae).param_shapes().values()),
        vae_weight_bytes=4,  # converted and run in fp32
        vae_peak_activation_bytes=decode_peak_bytes(vae, s.frames, s.height, s.width, s.vae_tiling),
        blockwise_attention=blockwise_attention,
    )


FAMILY = CogVideoXFamily
