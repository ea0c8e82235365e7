"""LTX-2.x on the family contract: one generation gives a video and its soundtrack.

Follows diffusers `LTX2Pipeline` and `LTX2ImageToVideoPipeline` step by step:

- Text: the prompt (and, guided, the negative prompt) left-padded to `max_sequence_length` Gemma
  tokens (`<bos>` per `prompt_bos`: Lightricks' convention by default), every hidden state of the
  Gemma 3 / Gemma 4 tower stacked, then the text connectors: video and audio prompt embeddings.
- Latents: video noise `[1, C, F', H', W']` (`--latents`) and audio noise `[1, Ca, L, M']`
  (`--audio-latents`, the audio VAE's latent layout before packing, already normalised), both packed
  to tokens and joined into the sampler's one state `[1, S*C + L*Ca]` (`latents.join_tokens`): the
  shared loop steps both modalities on the video schedule, as diffusers' copied audio scheduler does.
- Each step: one DiT call whose batch rows are the guidance passes (cond, uncond, STG-perturbed,
  modality-isolated; `guidance.pass_controls`), combined per modality in x0 space with its own
  scales and rescale (`guidance.combine`). Image-to-video: the first latent frame is the encoded image
  (CRF re-compressed), its tokens at timestep 0 and velocity 0 (diffusers steps frames 1: only).
- Decode: the video VAE (or, `--diffusion-decoder`, LTX-2.5's diffusion decoder with host-drawn
  noise); the audio VAE decoder and the vocoder give the waveform (`--no-audio` skips them).

Where diffusers and Lightricks' code disagree vidax follows Lightricks' (the code the weights were
trained and tuned with): `<bos>` before Gemma 4 prompts (`--prompt-bos diffusers` reproduces
diffusers), and STG applied in the chosen blocks whatever the config's `perturbed_attn` (diffusers'
STG pass is the plain conditional pass without it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.gemma import GemmaConfig, GemmaTextModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer, special_tokens
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Decoded, FLOW_SAMPLERS, DiTPart, Family, Flag, Inputs, Settings
from vidax.zoo.ltx2 import guidance as guide
from vidax.zoo.ltx2 import latents as lat
from vidax.zoo.ltx2 import two_stage
from vidax.zoo.ltx2.decoding.audio import LTX2AudioVAE, LTX2Vocoder
from vidax.zoo.ltx2.config import (
    AudioVAEConfig,
    ConnectorsConfig,
    DiffusionDecoderConfig,
    TransformerConfig,
    VideoVAEConfig,
    VocoderConfig,
)
from vidax.zoo.ltx2.connectors import TextConnectors
from vidax.zoo.ltx2.media import default_crf, recompress_image
from vidax.zoo.ltx2.rope import RopeTables, default_dit_rope_shapes, default_dit_rope_tables
from vidax.zoo.ltx2.text import BOS_MODES, prompt_tokens, stack_hidden_states
from vidax.zoo.ltx2.transformer import DiTInputs, LTX2Transformer
from vidax.zoo.ltx2.decoding.upsampler import UpsamplerConfig
from vidax.zoo.ltx2.decoding.vae import LTX2VideoVAE, decode_peak_bytes, encode_peak_bytes
from vidax.zoo.parts.vae_tiling import TileSizes, tiles_for
from vidax.zoo.generator.options import GenerateOptions, load_latents
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job, abstract_param_count
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.compute.runtime import compile_step, platform, xla_only_options
from vidax.zoo.parts.encoders.common import by_layer

ANCESTRAL = "euler-ancestral"  # LTXEulerAncestralRFScheduler on the same (shifted) sigma grid
SAMPLER_CLASSES = {**FLOW_SAMPLERS, ANCESTRAL: "LTXEulerAncestralRFScheduler"}
GEMMA_PARAMS = 11_770_000_000  # Gemma 3 / 4 12B text towers, when their config is not readable (gated)
AUDIO_NOISE_STREAM = 3  # host-noise stream of the seeded initial audio latents (1: sampler, 2: decode)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LTX2Settings(Settings):
    """LTX-2's settings: the common ones plus every guidance knob of diffusers' `LTX2Pipeline` (named after
    its keyword arguments; `guidance` is its `guidance_scale`, `audio_guidance` its
    `audio_guidance_scale`), the frame-rate conditioning, the audio and decode options.

    An audio scale left None (or 0, as diffusers' `audio_x or x`) is the video one.
    """

    stg_scale: float = 1.0
    modality_scale: float = 3.0
    guidance_rescale: float = 0.7
    audio_guidance: float | None = 7.0
    audio_stg_scale: float | None = 1.0
    audio_modality_scale: float | None = 3.0
    audio_guidance_rescale: float | None = 0.7
    stg_blocks: tuple[int, ...] | str = (28,)  # "28,29" from the CLI
    use_cross_timestep: bool = True
    motion_speed: float = 1.0
    sigmas: tuple[float, ...] | str | None = None  # the distilled models' fixed grid
    max_sequence_length: int = 1024
    prompt_bos: str = "official"
    image_crf: int | None = None  # None: 18 with a Gemma 4 text tower, 33 before
    audio: bool = True
    audio_latents: Path | None = None
    decode_timestep: float = 0.0
    decode_noise_scale: float | None = None
    diffusion_decoder: bool = False
    vae_tiling: bool | None = None  # None: decode in tiles (as Lightricks' pipelines), encode only if it must
    two_stage: bool = False  # half size, the latent upsampler, full size with the distilled LoRA (two_stage.py)
    two_stage_lora: str | None = None  # stage 2's LoRA, SOURCE[=STRENGTH] (None: stage 2 without one)

    def __post_init__(self):
        object.__setattr__(self, "stg_blocks", _int_list(self.stg_blocks, "--stg-blocks"))
        if self.sigmas is not None:
            object.__setattr__(self, "sigmas", _float_list(self.sigmas, "--sigmas") or None)

    @property
    def scales(self) -> guide.GuidanceScales:
        return guide.GuidanceScales(self.guidance, self.stg_scale, self.modality_scale, self.guidance_rescale,
                                    self.audio_guidance, self.audio_stg_scale, self.audio_modality_scale,
                                    self.audio_guidance_rescale, self.stg_blocks).resolved()

    @property
    def guided(self) -> bool:
        """The negative prompt runs when either modality's CFG scale is above 1."""
        return "uncond" in self.scales.passes

    @property
    def conditioning_fps(self) -> float:
        """What the video RoPE divides frame positions by (diffusers `frame_rate / motion_speed`)."""
        return self.fps / self.motion_speed


def _int_list(value, flag: str) -> tuple[int, ...]:
    if isinstance(value, str):
        try:
            return tuple(int(v) for v in value.replace(" ", "").split(",") if v)
        except ValueError:
            raise PipelineError(f"{flag} takes comma-separated block indices (e.g. 28 or 28,29), got {value!r}") from None
    return tuple(int(v) for v in value)


def _float_list(value, flag: str) -> tuple[float, ...]:
    if isinstance(value, str):
        try:
            return tuple(float(v) for v in value.replace(" ", "").split(",") if v)
        except ValueError:
            raise PipelineError(f"{flag} takes comma-separated numbers, got {value!r}") from None
    return tuple(float(v) for v in value)


@dataclasses.dataclass(frozen=True)
class LTX2Model:
    """What a checkpoint is: its components' configs."""

    transformer: TransformerConfig
    connectors: ConnectorsConfig
    vae: VideoVAEConfig
    audio_vae: AudioVAEConfig
    vocoder: VocoderConfig
    text_encoder: GemmaConfig | None  # None: not readable (gated repos, --plan offline)
    text_model_type: str | None
    diffusion_decoder: DiffusionDecoderConfig | None

    @property
    def audio_mel_bins(self) -> int:
        """Latent mel bins (diffusers: the config's mel bins over the audio VAE's 4x compression)."""
        return (self.audio_vae.mel_bins or 64) // self.audio_vae.mel_compression_ratio


@dataclasses.dataclass(frozen=True)
class Condition:
    """What every step's DiT call gets besides the latents."""

    text: jax.Array  # [1 or 2, T, D]: video connector output, prompt then (guided) negative prompt
    audio_text: jax.Array  # [1 or 2, T, Da]
    text_mask: jax.Array  # [1 or 2, T]
    rope: RopeTables  # host-built for this size and frame rate (data: no recompile per fps)
    image: jax.Array | None = None  # [1, S, C] packed normalised image latents on every frame (I2V)
    image_mask: jax.Array | None = None  # [1, S] 1 on the first latent frame's tokens (I2V)


jax.tree_util.register_dataclass(Condition, data_fields=["text", "audio_text", "text_mask", "rope", "image",
                                                         "image_mask"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class LTX2Predict:
    """The guided velocities of one step (hashable: one compiled unit per configuration).

    The passes are rows of one DiT batch (`guidance.PASSES` order); the scales are data (`knobs`).
    """

    passes: tuple[str, ...]
    stg_blocks: tuple[int, ...]
    num_layers: int
    video_shape: tuple[int, int]  # (S, C) packed
    audio_shape: tuple[int, int]  # (L, C * M)
    rescaled: tuple[bool, bool]  # video, audio guidance rescale on
    dtype: str

    def __call__(self, run, latents, timestep, cond: Condition, knobs):
        from vidax.zoo.compute.sharding import cfg_batch

        dtype = jnp.dtype(self.dtype)
        i2v = cond.image is not None  # the condition's structure: static, one compiled unit each
        video, audio = lat.split_tokens(latents.astype(jnp.float32), self.video_shape, self.audio_shape)
        if i2v:  # the first latent frame is the image, always clean
            keep = cond.image_mask[..., None]
            video = keep * cond.image + (1 - keep) * video
        stg_keep, cross_keep = guide.pass_rows(self.passes, self.stg_blocks, self.num_layers)
        text_row = [1 if name == "uncond" else 0 for name in self.passes]  # STG / isolated use the prompt
        p = len(self.passes)
        t = jnp.full((p,), timestep, jnp.float32)
        video_t = lat.i2v_video_timestep(t, jnp.broadcast_to(cond.image_mask, (p, self.video_shape[0]))) \
            if i2v else t
        inputs = DiTInputs.make(
            jnp.broadcast_to(video, (p, *self.video_shape)).astype(dtype),
            jnp.broadcast_to(audio, (p, *self.audio_shape)).astype(dtype),
            cond.text[jnp.asarray(text_row)].astype(dtype), cond.audio_text[jnp.asarray(text_row)].astype(dtype),
            video_t, num_layers=self.num_layers, text_mask=cond.text_mask[jnp.asarray(text_row)],
            audio_timestep=t, sigma=t, stg_keep=jnp.asarray(stg_keep), cross_keep=jnp.asarray(cross_keep))
        if p > 1:  # the rows on the data axis when dp divides them (cfg_batch only joins and pins)
            half = p // 2
            inputs = cfg_batch(jax.tree.map(lambda x: x[:half], inputs), jax.tree.map(lambda x: x[half:], inputs))
        out_video, out_audio = run(inputs, cond.rope)
        outs = [{name: o[row:row + 1] for row, name in enumerate(self.passes)} for o in (out_video, out_audio)]
        sigma = knobs["sigma"]
        v = guide.combine(video, sigma, outs[0], scale=knobs["guidance"], stg_scale=knobs["stg_scale"],
                          modality_scale=knobs["modality_scale"], rescale_factor=knobs["guidance_rescale"],
                          rescaled=self.rescaled[0])
        a = guide.combine(audio, sigma, outs[1], scale=knobs["audio_guidance"], stg_scale=knobs["audio_stg_scale"],
                          modality_scale=knobs["audio_modality_scale"],
                          rescale_factor=knobs["audio_guidance_rescale"], rescaled=self.rescaled[1])
        if i2v:  # diffusers steps frames 1: only
            v = v * (1 - cond.image_mask[..., None])
        return lat.join_tokens(v, a)


# --- compiled units (static configs: one compile per shape, shared by every generation) ------------


@by_layer
def _text_features(model: GemmaTextModel, params, ids, mask):
    return stack_hidden_states(model.apply({"params": params}, ids, mask).hidden_states)


@partial(jax.jit, static_argnums=(0,))
def _connect(model: TextConnectors, params, features, mask):
    return model.apply({"params": params}, features, mask)


@partial(compile_step, donate=(), static=(0,), options=xla_only_options)
def _vae_encode(cfg: VideoVAEConfig, params, video):
    return LTX2VideoVAE(cfg).encode(params, video)


@partial(compile_step, donate=(), static=(0,), options=xla_only_options)
def _vae_decode(cfg: VideoVAEConfig, params, z, timestep):
    return LTX2VideoVAE(cfg).decode(params, z, timestep)


@partial(jax.jit, static_argnums=(0, 1, 2))
def _audio_decode(cfg: AudioVAEConfig, vocoder: VocoderConfig, mel_bins: int, vae_params, vocoder_params, tokens):
    """Normalised packed audio tokens `[B, L, C*M]` -> waveform `[B, channels, samples]`."""
    z = lat.unpack_audio(lat.denormalize_audio(tokens, vae_params["latents_mean"], vae_params["latents_std"]), mel_bins)
    mel = LTX2AudioVAE(cfg).decode(vae_params, z)
    return LTX2Vocoder(vocoder)(vocoder_params, mel)


@functools.lru_cache(maxsize=4)
def _diffusion_decoder(cfg: DiffusionDecoderConfig, dtype: str):
    from vidax.zoo.ltx2.decoding.diffusion_decoder import LTX2DiffusionDecoder

    return LTX2DiffusionDecoder(cfg, jnp.dtype(dtype))


class LTX2Family(Family):
    """LTX-2.x: LTX-2.0 (Gemma 3, 24 kHz vocoder) and LTX-2.5 dev / distilled (Gemma 4, 48 kHz BWE vocoder,
    optional diffusion decoder); text- and image-to-video, each with its soundtrack."""

    name = "ltx2"
    settings_class = LTX2Settings
    samplers = (*FLOW_SAMPLERS, ANCESTRAL)
    flags = (
        Flag("--stg-scale", "stg_scale", float, "video spatio-temporal guidance scale (0: off)"),
        Flag("--modality-scale", "modality_scale", float, "video modality-isolation guidance scale (1: off)"),
        Flag("--guidance-rescale", "guidance_rescale", float, "video guidance rescale (0: off; 0.7 native)"),
        Flag("--audio-guidance", "audio_guidance", float, "audio classifier-free guidance scale (0: --guidance)"),
        Flag("--audio-stg-scale", "audio_stg_scale", float, "audio STG scale (0: --stg-scale)"),
        Flag("--audio-modality-scale", "audio_modality_scale", float, "audio modality-isolation scale "
             "(0: --modality-scale)"),
        Flag("--audio-guidance-rescale", "audio_guidance_rescale", float, "audio guidance rescale "
             "(0: --guidance-rescale)"),
        Flag("--stg-blocks", "stg_blocks", str, "blocks STG perturbs, comma-separated (native: 29 for LTX-2.0, "
             "28 for 2.3+)"),
        Flag("--motion-speed", "motion_speed", float, "motion speed: the video RoPE sees fps / motion-speed"),
        Flag("--sigmas", "sigmas", str, "the sampler's sigma grid, comma-separated (the distilled model's 8 by "
             "default; --steps must match)"),
        Flag("--audio-latents", "audio_latents", Path, ".npy of initial audio noise [1, C, L, M] (the audio "
             "VAE's latent layout before packing, normalised)"),
        Flag("--audio", "audio", bool, "decode and write the soundtrack (--no-audio: video only)"),
        Flag("--max-sequence-length", "max_sequence_length", int, "prompt tokens (a multiple of the "
             "connectors' registers; 1024 native)"),
        Flag("--prompt-bos", "prompt_bos", str, "official (Lightricks: <bos> before every prompt) or diffusers"),
        Flag("--image-crf", "image_crf", int, "H.264 CRF the image is re-compressed with (0: none; default 18 "
             "for LTX-2.5, 33 before)"),
        Flag("--use-cross-timestep", "use_cross_timestep", bool, "cross-modal AdaLN from the other modality's "
             "sigma (LTX-2.3+) rather than its own timestep (LTX-2.0)"),
        Flag("--decode-timestep", "decode_timestep", float, "timestep of a timestep-conditioned video VAE"),
        Flag("--decode-noise-scale", "decode_noise_scale", float, "noise mixed into the latents before a "
             "timestep-conditioned decode (default: --decode-timestep)"),
        Flag("--diffusion-decoder", "diffusion_decoder", bool, "decode the video with LTX-2.5's diffusion "
             "decoder instead of the VAE's"),
        Flag("--vae-tiling", "vae_tiling", bool, "video VAE decode (and image encode) in overlapping 512-px, "
             "16-frame tiles as diffusers' enable_tiling() + frame-wise decoding (default: decode tiled, as "
             "Lightricks' pipelines; the image encode only when it would not fit the device)"),
        Flag("--two-stage", "two_stage", bool, "diffusers' two-stage pipeline: half size, the spatial latent "
             "upsampler, then 3 steps at full size with the distilled LoRA (text-to-video)"),
        Flag("--two-stage-lora", "two_stage_lora", str, "stage 2's LoRA, SOURCE[=STRENGTH] (default: the "
             "model's distilled LoRA)"),
    )
    # the reference's cache contexts per guidance pass (the CFG pair batched, then one call per extra pass)
    CACHE_CONTEXTS = {"stg": "uncond_stg", "isolated": "uncond_modality"}

    def cache_branches(self, s: LTX2Settings) -> tuple[str, ...]:
        """`LTX2Pipeline`'s `cache_context`s of a step: "cond_uncond" (the prompt, with CFG's pair batched),
        then "uncond_stg" and "uncond_modality" for the STG and modality-isolation passes it calls apart."""
        extra = tuple(self.CACHE_CONTEXTS[p] for p in s.scales.passes if p in self.CACHE_CONTEXTS)
        return ("cond_uncond",) + extra

    # --- configs ----------------------------------------------------------------------------

    def _config(self, name: str) -> dict:
        return self.require_config(name, *self.config_paths(name, "config.json"))

    @cached_property
    def model(self) -> LTX2Model:
        text = self.read_config("text_encoder", *self.config_paths("text_encoder", "config.json"))
        decoder = self.read_config("diffusion_decoder", *self.config_paths("diffusion_decoder", "config.json"),
                                   "vae_diffusion/config.json")
        try:
            return LTX2Model(
                TransformerConfig.from_hf_config(self._config("transformer")),
                ConnectorsConfig.from_hf_config(self._config("connectors")),
                VideoVAEConfig.from_hf_config(self._config("vae")),
                AudioVAEConfig.from_hf_config(self._config("audio_vae")),
                VocoderConfig.from_hf_config(self._config("vocoder")),
                GemmaConfig.from_hf_config(text) if text is not None else None,
                (dict(text.get("text_config", text)).get("model_type") or text.get("model_type")) if text else None,
                DiffusionDecoderConfig.from_hf_config(decoder) if decoder is not None else None,
            )
        except (ValueError, TypeError) as err:
            raise PipelineError(f"{self.name}: unsupported config ({err})") from None

    @cached_property
    def upsampler_config(self) -> UpsamplerConfig | None:
        """The spatial latent upsampler's config (`--two-stage`), None when the checkpoint has none (a Hub repo's
        is fetched when it is loaded; a local folder must hold `latent_upsampler/`)."""
        source = self.source_or_none  # None: not downloaded yet (`--plan`): the registry's config stands in
        if "latent_upsampler" not in self.entry.all_components or (source is not None and source.kind == "file"):
            return None
        if source is not None and source.kind != "repo" and \
                source.find("latent_upsampler", component="latent_upsampler") is None:
            return None
        found = self.read_config("latent_upsampler", *self.config_paths("latent_upsampler", "config.json"))
        try:
            return None if found is None else UpsamplerConfig.from_hf_config(found)
        except (ValueError, TypeError) as err:
            raise PipelineError(f"{self.name}: unsupported latent upsampler config ({err})") from None

    def heads(self) -> int:
        cfg = self.model.transformer
        return math.gcd(cfg.num_attention_heads, cfg.audio_num_attention_heads)

    @property
    def size_multiple(self) -> int:
        return self.model.vae.spatial_ratio

    frame_step = 1  # any count, as LTX2Pipeline: (F - 1) // 8 + 1 latent frames (decoded: 8k + 1), audio F / fps long

    # --- settings ---------------------------------------------------------------------------

    def folder_settings(self) -> dict:
        return {}

    def image_roles(self) -> dict[str, bool]:
        return {"image": False}

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        grid = lat.latent_grid(s.frames, s.height, s.width, temporal_ratio=self.model.vae.temporal_ratio,
                               spatial_ratio=self.model.vae.spatial_ratio)
        return (1, self.model.vae.latent_channels, *grid)

    def audio_shape(self, s: LTX2Settings) -> tuple[int, int, int, int]:
        """`[1, C, L, M]` of the initial audio noise (the `--audio-latents` layout)."""
        a = self.model.audio_vae
        length = lat.audio_latent_length(s.frames, s.fps, sample_rate=a.sample_rate, hop_length=a.mel_hop_length,
                                         temporal_ratio=a.temporal_compression_ratio)
        return (1, a.latent_channels, length, self.model.audio_mel_bins)

    def tokens(self, s: Settings) -> int:
        return math.prod(self.latent_shape(s)[2:])

    def check_settings(self, s: LTX2Settings) -> None:
        m = self.model
        dit = m.transformer
        if s.prompt_bos not in BOS_MODES:
            raise PipelineError(f"--prompt-bos must be one of {', '.join(BOS_MODES)}, got {s.prompt_bos!r}")
        if s.motion_speed <= 0:
            raise PipelineError(f"--motion-speed must be positive, got {s.motion_speed}")
        if s.image_crf is not None and not 0 <= s.image_crf <= 51:
            raise PipelineError(f"--image-crf must be 0..51 (H.264), got {s.image_crf}")
        scales = s.scales
        if scales.stg_scale > 0 or scales.audio_stg_scale > 0:
            if not s.stg_blocks:
                raise PipelineError("STG is on (--stg-scale or --audio-stg-scale > 0) but --stg-blocks names no block")
            bad = [b for b in s.stg_blocks if not 0 <= b < dit.num_layers]
            if bad:
                raise PipelineError(f"--stg-blocks {', '.join(map(str, bad))} outside the DiT's {dit.num_layers} blocks")
        if s.sigmas is not None:
            if len(s.sigmas) != s.steps:
                raise PipelineError(f"{len(s.sigmas)} sigmas for {s.steps} steps: give --sigmas with --steps "
                                    f"(this model's fixed grid has {len(s.sigmas)})")
            if any(not 0 < x <= 1 for x in s.sigmas) or any(a <= b for a, b in zip(s.sigmas, s.sigmas[1:])):
                raise PipelineError("--sigmas must decrease within (0, 1]")
        c = m.connectors
        for modality in ("video", "audio"):
            registers = getattr(c, f"{modality}_connector_num_learnable_registers")
            if registers and s.max_sequence_length % registers:
                raise PipelineError(f"--max-sequence-length {s.max_sequence_length} must be a multiple of the "
                                    f"connectors' {registers} registers")
        if s.max_sequence_length < 1:
            raise PipelineError(f"--max-sequence-length must be positive, got {s.max_sequence_length}")
        _, c_audio, _, mel = self.audio_shape(s)
        if dit.in_channels != m.vae.latent_channels or dit.audio_in_channels != c_audio * mel:
            raise PipelineError(f"{self.name}: the DiT takes {dit.in_channels} video / {dit.audio_in_channels} audio "
                                f"channels but the VAEs give {m.vae.latent_channels} / {c_audio} x {mel}")
        if s.diffusion_decoder and "diffusion_decoder" not in self.entry.all_components:
            raise PipelineError(f"{self.name} has no diffusion decoder (LTX-2.5 ships one: ltx-2.5)")
        if s.diffusion_decoder and m.diffusion_decoder is None:
            raise PipelineError(f"{self.name}: --diffusion-decoder needs the diffusion decoder (diffusion_decoder/ or "
                                f"vae_diffusion/ in {self.source.label}); LTX-2.5 ships one")
        if s.audio_latents is not None and not Path(s.audio_latents).is_file():
            raise PipelineError(f"{s.audio_latents}: audio latents file not found")
        if s.two_stage:
            two_stage.check(self, s, self.upsampler_config)
            if self.source_or_none is not None:  # weights at hand: the LoRAs found and hashed before any work
                self._two_stage_adapters(s)  # (`--plan` before any download needs neither)

    def check_images(self, s: LTX2Settings, images: Mapping[str, np.ndarray]) -> None:
        if s.two_stage and images.get("image") is not None:
            raise PipelineError("--two-stage runs text-to-video (diffusers' documented two-stage pipeline); "
                                "drop --image or --two-stage")

    def _two_stage_adapters(self, s: LTX2Settings) -> tuple:
        """Stage 2's LoRAs: the request's, then the distilled one."""
        from vidax.translator.lora import resolve_adapter

        own = self.adapters.get("transformer", ())
        return (*own, resolve_adapter(s.two_stage_lora)) if s.two_stage_lora else own

    def initial_latents(self, s: LTX2Settings, options: GenerateOptions) -> np.ndarray:
        """Video noise (`--latents`, else the seed's) and audio noise (`--audio-latents`, else the seed's
        audio stream), packed and joined: the sampler's state `[1, S*C + L*Ca]`."""
        video = super().initial_latents(two_stage.stage_one(s) if s.two_stage else s, options)  # stage 1's noise
        shape = self.audio_shape(s)
        if s.audio_latents is not None:
            audio = load_latents(s.audio_latents, shape)
        else:
            audio = np.random.default_rng([options.seed, AUDIO_NOISE_STREAM]).standard_normal(shape, dtype=np.float32)
        return np.asarray(lat.join_tokens(lat.pack_video(video), lat.pack_audio(audio)))

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: LTX2Settings, inputs: Inputs) -> Condition:
        prompts = [inputs.prompt] + ([inputs.negative_prompt or ""] if s.guided else [])
        text, audio_text, mask = self.encode_text(run, s, prompts)
        m = self.model
        _, _, f, h, w = self.latent_shape(s)
        rope = default_dit_rope_tables(m.transformer, f, h, w, self.audio_shape(s)[2], fps=s.conditioning_fps)
        image = inputs.images.get("image")
        if image is None:
            return Condition(text, audio_text, mask, rope)
        latents = self.encode_image(run, s, image)
        tokens = lat.pack_video(jnp.repeat(latents, f, axis=2))
        return Condition(text, audio_text, mask, rope, tokens, jnp.asarray(lat.first_frame_mask((f, h, w))))

    def encode_text(self, run: Run, s: LTX2Settings, prompts: list[str]):
        """Connector outputs for `prompts` (video, audio, mask), each `[len(prompts), T, ...]`."""
        m = self.model
        folder = self.source.find("tokenizer", component="tokenizer")
        if folder is None or m.text_encoder is None:
            raise PipelineError(f"{self.source.label}: needs tokenizer/ and text_encoder/ (the Gemma tower) as the "
                                "diffusers-layout repos and vidax-convert folders hold them")
        tokenizer = load_tokenizer(folder)
        bos = special_tokens(folder).get("bos_token", "<bos>")
        bos_id = tokenizer.backend.token_to_id(bos) if hasattr(tokenizer, "backend") else None
        batch = prompt_tokens(tokenizer, prompts, bos_id=bos_id, bos=s.prompt_bos, max_length=s.max_sequence_length)
        params = run.load_part(self.component("text_encoder"))
        gemma = GemmaTextModel(m.text_encoder, dtype=_leaf_dtype(params, "embed_tokens", "embedding"))
        ids, mask = jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask)
        features = _text_features(gemma, params, ids, mask)
        features.block_until_ready()
        run.done(params)
        params = run.load_part(self.component("connectors"))
        connectors = TextConnectors(m.connectors, dtype=_weights_dtype(params))
        out = _connect(connectors, params, features, mask)
        jax.block_until_ready(out)
        run.done(params)
        return out

    def encode_image(self, run: Run, s: LTX2Settings, image: np.ndarray) -> jax.Array:
        """Normalised image latents `[1, C, 1, H', W']` (diffusers I2V `prepare_latents` with the CRF pass)."""
        from vidax.zoo.video_io import vae_image

        crf = s.image_crf if s.image_crf is not None else default_crf(self.model.text_model_type)
        pixels = vae_image(recompress_image(image, crf), s.height, s.width)  # [1, 3, 1, H, W] in [-1, 1]
        params = run.load_part(self.component("vae"), "float32")
        weights = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
        tiles = tiles_for(s.vae_tiling, weights + encode_peak_bytes(self.model.vae, 1, s.height, s.width))
        if tiles is None:
            z = _vae_encode(self.model.vae, params, jnp.asarray(pixels))
        else:
            z = jnp.asarray(LTX2VideoVAE(self.model.vae).encode(params, jnp.asarray(pixels), tiling=tiles))
        out = lat.normalize_video(z, params["latents_mean"], params["latents_std"])  # diffusers: scaling 1
        out.block_until_ready()
        run.done(params)
        return out

    # --- denoise ----------------------------------------------------------------------------

    def dit_parts(self, s: Settings) -> list[DiTPart]:
        return [self.component("transformer")]

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: LTX2Settings) -> LTX2Transformer:
        # Lightricks' blocks always honour STG's perturbation (diffusers only with `perturbed_attn`)
        cfg = dataclasses.replace(self.model.transformer, perturbed_attn=True)
        return LTX2Transformer(cfg, use_cross_timestep=s.use_cross_timestep, dtype=jnp.dtype(tree["proj_in/kernel"].dtype))

    def predictor(self, s: LTX2Settings, expert: int, dit: LTX2Transformer, step: int) -> LTX2Predict:
        scales = s.scales
        video = self.latent_shape(s)
        audio = self.audio_shape(s)
        return LTX2Predict(scales.passes, tuple(s.stg_blocks), dit.cfg.num_layers,
                           (math.prod(video[2:]), video[1]), (audio[2], audio[1] * audio[3]),
                           (scales.guidance_rescale > 0, scales.audio_guidance_rescale > 0),
                           jnp.dtype(dit.dtype).name)

    def step_knobs(self, s: LTX2Settings, stepper, index: int, expert: int) -> dict:
        scales = s.scales
        f32 = jnp.float32
        return {"sigma": f32(np.asarray(stepper.sigmas, np.float32)[index]), "guidance": f32(scales.guidance),
                "stg_scale": f32(scales.stg_scale), "modality_scale": f32(scales.modality_scale),
                "guidance_rescale": f32(scales.guidance_rescale), "audio_guidance": f32(scales.audio_guidance),
                "audio_stg_scale": f32(scales.audio_stg_scale), "audio_modality_scale": f32(scales.audio_modality_scale),
                "audio_guidance_rescale": f32(scales.audio_guidance_rescale)}

    def shift_config(self) -> dict:
        """The scheduler config the (dynamic) shift comes from: the folder's FlowMatchEuler, else the registry's."""
        folder = dict(self.scheduler_config())
        return folder if folder.get("_class_name") == FLOW_SAMPLERS["euler"] else dict(
            self.entry.config.get("scheduler") or folder)

    def shift_mu(self, s: LTX2Settings) -> float:
        """The dynamic shift's `mu` for settings `s` (the video token count, with LTX2Pipeline's fallbacks):
        where EasyCache's percents fall on LTX-2's sigmas (`vidax.zoo.step_caches.easy`)."""
        return float(guide.schedule_inputs(self.shift_config(), s.steps, self.tokens(s))["mu"])

    def stepper(self, s: LTX2Settings, latents_shape: tuple[int, ...]):
        """The folder's scheduler (or `--sampler`'s) on LTX2Pipeline's grid: sigmas `linspace(1, 1/steps)`
        (or the model's fixed ones), dynamically shifted by the video token count with the pipeline's
        fallbacks; `--shift` replaces the dynamic shift by a static one. The audio tokens ride on it."""
        from vidax.zoo.samplers import FlowEulerAncestral, stepper_from_config

        folder = dict(self.scheduler_config())
        shifts = self.shift_config()
        wanted = SAMPLER_CLASSES[s.sampler] if s.sampler is not None else folder.get("_class_name")
        if wanted == folder.get("_class_name"):
            config = folder
        else:
            keep = ("use_dynamic_shifting", "base_shift", "max_shift", "base_image_seq_len", "max_image_seq_len",
                    "shift_terminal", "shift", "time_shift_type", "num_train_timesteps")
            config = {"_class_name": wanted, **{k: shifts[k] for k in keep if k in shifts}}
            if wanted in (FLOW_SAMPLERS["unipc"], FLOW_SAMPLERS["dpm++"]):
                config.update(prediction_type="flow_prediction", use_flow_sigmas=True)
        if s.shift is not None:
            config.update(use_dynamic_shifting=False, shift=s.shift, flow_shift=s.shift)
        sigmas = np.asarray(s.sigmas, np.float64) if s.sigmas is not None else None
        inputs = guide.schedule_inputs(shifts, s.steps, self.tokens(s), sigmas)
        mu = inputs["mu"] if config.get("use_dynamic_shifting") else None
        if config.get("_class_name") == SAMPLER_CLASSES[ANCESTRAL]:
            # the ancestral sampler on the grid FlowMatchEuler would step (terminal 0 included)
            flow = {**{k: v for k, v in shifts.items() if k != "_class_name"}, **{k: v for k, v in config.items()
                                                                               if k in ("shift", "use_dynamic_shifting")}}
            grid = stepper_from_config({**flow, "_class_name": FLOW_SAMPLERS["euler"]}, s.steps, mu=mu,
                                       sigmas=inputs["sigmas"])
            stepper = FlowEulerAncestral(sigmas=grid.sigmas, timesteps=grid.timesteps, eta=config.get("eta", 1.0),
                                         s_noise=config.get("s_noise", 1.0))
        else:
            stepper = stepper_from_config(config, s.steps, mu=mu, sigmas=inputs["sigmas"])
        return stepper

    def sample(self, run: Run, s: LTX2Settings, latents: np.ndarray, cond: Condition) -> jax.Array:
        if s.two_stage:
            return two_stage.sample(self, run, s, latents, cond, self._two_stage_adapters(s), self.upsampler_config)
        i2v = cond.image is not None
        video_shape, audio_shape = self._token_shapes(s)
        if i2v:  # noise on frames 1:, the image on frame 0 (I2V `prepare_latents`)
            video, audio = lat.split_tokens(jnp.asarray(latents), video_shape, audio_shape)
            keep = cond.image_mask[..., None]
            latents = np.asarray(lat.join_tokens(keep * cond.image + (1 - keep) * video, audio))
        out = super().sample(run, s, latents, cond)
        if i2v:
            video, audio = lat.split_tokens(out, video_shape, audio_shape)
            keep = cond.image_mask[..., None]
            out = lat.join_tokens(keep * cond.image + (1 - keep) * video, audio)
        return out

    def _token_shapes(self, s: LTX2Settings) -> tuple[tuple[int, int], tuple[int, int]]:
        video, audio = self.latent_shape(s), self.audio_shape(s)
        return (math.prod(video[2:]), video[1]), (audio[2], audio[1] * audio[3])

    # --- decode -----------------------------------------------------------------------------

    def decode(self, run: Run, s: LTX2Settings, latents: jax.Array) -> Decoded:
        """Frames `[F, H, W, 3]` in [0, 1], the waveform `[channels, samples]` at the vocoder's rate (None with
        `--no-audio`), and the final video latents `[1, C, F', H', W']` (the `--latents` layout)."""
        m = self.model
        shape = self.latent_shape(s)
        video_tokens, audio_tokens = lat.split_tokens(latents.astype(jnp.float32), *self._token_shapes(s))
        video = lat.unpack_video(video_tokens, shape[2:])
        audio = None
        if s.audio:
            vae_part, voc_part = self.component("audio_vae"), self.component("vocoder")
            vae_params = run.load_part(vae_part, "float32")
            voc_params = run.load_part(voc_part, "float32")
            wave = _audio_decode(m.audio_vae, m.vocoder, m.audio_mel_bins, vae_params, voc_params, audio_tokens)
            audio = np.asarray(wave[0], np.float32)
            run.done((vae_params, voc_params))
        if s.diffusion_decoder:
            pixels = self._diffusion_decode(run, s, video)
        else:
            pixels = self._vae_decode(run, s, video)
        frames = np.moveaxis(np.clip(np.asarray(pixels[0], np.float32) / 2 + 0.5, 0.0, 1.0), 0, -1)
        rate = (m.vocoder.bwe or m.vocoder).output_sampling_rate
        settings = {"audio_latent_shape": list(self.audio_shape(s))}
        if s.two_stage:  # stage 2's LoRA as every LoRA is recorded: source, strength, sha256
            settings["two_stage_lora"] = two_stage.lora_record(s)
        if audio is not None:
            settings.update(sample_rate=rate, audio_seconds=audio.shape[-1] / rate)
        return Decoded(frames, audio, rate if audio is not None else None, np.asarray(video), settings)

    def _vae_decode(self, run: Run, s: LTX2Settings, video: jax.Array) -> jax.Array:
        cfg = self.model.vae
        params = run.load_part(self.component("vae"), "float32")
        timestep = None
        if cfg.timestep_conditioning:  # diffusers: noise from the generator, mixed in before denormalising
            scale = s.decode_timestep if s.decode_noise_scale is None else s.decode_noise_scale
            video = (1 - scale) * video + scale * jnp.asarray(run.host_noise(2, 0, tuple(video.shape)))
            timestep = jnp.full((video.shape[0],), s.decode_timestep, jnp.float32)
        z = lat.denormalize_video(video, params["latents_mean"], params["latents_std"], cfg.scaling_factor)
        if _decode_tiles(s) is None:
            out = _vae_decode(cfg, params, z, timestep)
            out.block_until_ready()
        else:  # a host loop over one compiled tile; the video stitched on the host
            out = LTX2VideoVAE(cfg).decode(params, z, timestep, tiling=_decode_tiles(s))
        run.done(params)
        return out

    def _diffusion_decode(self, run: Run, s: LTX2Settings, video: jax.Array) -> jax.Array:
        """LTX-2.5's diffusion decoder on the denormalised latents (the video VAE's statistics), its x_t
        noise from the run's seed (host stream 2)."""
        cfg = self.model.diffusion_decoder
        part = self.component("diffusion_decoder")
        params = run.load_part(part)
        decoder = _diffusion_decoder(cfg, _weights_dtype(params))
        stats = run.load_part(self.component("vae"), "float32")
        z = lat.denormalize_video(video, stats["latents_mean"], stats["latents_std"], self.model.vae.scaling_factor)
        run.done(stats)
        noise = run.host_noise(2, 0, decoder.noise_shape(tuple(z.shape)))
        out = decoder.decode(params, z, jnp.asarray(noise)).astype(jnp.float32)
        out.block_until_ready()
        run.done(params)
        return out

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options: GenerateOptions) -> Job:
        """What the memory planner needs at the requested size (configs only, nothing loaded)."""
        s = self.resolve_settings(options)
        job = memory_job(self.model, s, len(s.scales.passes), dtype_bytes=4 if options.dtype == "float32" else 2,
                         text_encoder_params=self._text_encoder_params(),
                         blockwise_attention=platform() == "cpu")
        _, _, f, h, w = self.latent_shape(s)  # the RoPE tables every device holds whole, fp32 as the DiT reads them
        tables = default_dit_rope_shapes(self.model.transformer, f, h, w, self.audio_shape(s)[2], fps=s.conditioning_fps)
        job = dataclasses.replace(job, step_input_bytes=sum(leaf.size * 4 for leaf in jax.tree.leaves(tables)))
        return quantized_job(job, LTX2Transformer(self.model.transformer), options.weights_dtype)  # --weights-dtype

    def _text_encoder_params(self) -> int:
        cfg = self.model.text_encoder
        if cfg is None:
            return GEMMA_PARAMS
        ids = jnp.zeros((1, 8), jnp.int32)
        return abstract_param_count(GemmaTextModel(cfg), ids, jnp.ones_like(ids))


def _leaf_dtype(params, *path) -> Any:
    node = params
    for key in path:
        node = node[key]
    return jnp.dtype(node.dtype)


def _weights_dtype(params) -> str:
    """The dtype most of a component's weights are in (bf16 as shipped, fp32 under --dtype float32)."""
    sizes: dict[str, int] = {}
    for leaf in jax.tree.leaves(params):
        sizes[jnp.dtype(leaf.dtype).name] = sizes.get(jnp.dtype(leaf.dtype).name, 0) + leaf.size
    return max(sizes, key=sizes.get)


def memory_job(model: LTX2Model, s: LTX2Settings, passes: int, *, dtype_bytes: int = 2,
               text_encoder_params: int = GEMMA_PARAMS, blockwise_attention: bool = False) -> Job:
    """The planner's job for one generation (abstract shapes only).

    The video stream drives the activations (13,376 tokens at 704x1216x121 against ~126 audio tokens);
    every guidance pass is a row of the DiT batch (4 with CFG, STG and modality guidance); the blocks
    cross-attend to `max_sequence_length` prompt tokens of the video width.
    """
    dit = model.transformer
    sizes = LTX2Transformer(dit).memory_sizes(dim=dit.inner_dim, ffn_dim=4 * dit.inner_dim, text_dim=dit.inner_dim,
                                              heads=math.gcd(dit.num_attention_heads, dit.audio_num_attention_heads))
    vae = model.vae
    f, h, w = lat.latent_grid(s.frames, s.height, s.width, temporal_ratio=vae.temporal_ratio,
                              spatial_ratio=vae.spatial_ratio)
    vae_params = sum(math.prod(shape) for shape in LTX2VideoVAE(vae).param_shapes().values())
    return Job(
        sizes,
        tokens=f * h * w,
        text_tokens=s.max_sequence_length,
        batch=passes,
        weight_bytes=dtype_bytes,
        activation_bytes=dtype_bytes,
        residual_bytes=4,  # fp32 residual streams
        text_encoder_params=text_encoder_params,
        text_encoder_bytes=dtype_bytes,
        vae_params=vae_params,
        vae_weight_bytes=4,  # the VAE runs in fp32
        vae_peak_activation_bytes=decode_peak_bytes(vae, s.frames, s.height, s.width, _decode_tiles(s)),
        blockwise_attention=blockwise_attention,
    )


def _decode_tiles(s: LTX2Settings) -> TileSizes | None:
    """The video VAE decode's tiles: diffusers' default tiles unless --no-vae-tiling (Lightricks' pipelines
    decode tiled by default)."""
    return None if s.vae_tiling is False else TileSizes()


FAMILY = LTX2Family
