"""LTX-Video 0.9.x on the family contract: T5 encode -> flow sampling over packed tokens -> VAE decode.

Which reference a run follows is the checkpoint's, as its author would run it:

- a diffusers folder (or repo) follows the diffusers pipeline its `model_index.json` names:
  `LTXPipeline` (text-to-video; `--image` runs `LTXImageToVideoPipeline`, `--condition-frame` runs
  `LTXConditionPipeline` on the same components), `LTXImageToVideoPipeline`, or `LTXConditionPipeline`
  (`--image` is a condition at frame 0);
- an official single file (Lightricks/LTX-Video, the config in its safetensors header) follows
  Lightricks' `LTXVideoPipeline` / `LTXMultiScalePipeline` (ltx_video/pipelines/pipeline_ltx_video.py)
  as its `inference.py` calls them: any size, run at the size padded to the grid and cropped back
  (`padding`, `latents.official_padding`).

The pieces each reference uses (`latents.py`, `rope.py`, `text.py`, `steppers.py`; `passes.py` the passes
and per-step guidance, `predict.py` the guided velocity):

    reference   text (T5)                 positions         schedule                       stepping
    ltx         128 tokens, T5 unmasked   8f / fps          linspace(1, 1/n) + shift        scheduler (Euler/UniPC/DPM++)
    i2v         as ltx                    as ltx            as ltx                          as ltx, frame 0 held
    condition   256 tokens, T5 masked     max(8f-7,0)/fps   1000·linear-quadratic / list    per-token Euler
    official    256, masked, stripped     as condition      header sampler, skips / list    per-token Euler

and the official pipeline's guidance on top: per-step guidance / STG / rescale lists keyed by
`guidance_timesteps`, CFG* (`cfg_star`), STG "attention_values" (the DiT's `skip` mask). Its
multi-scale default (`pipeline = "multi-scale"` and a latent upsampler in the checkpoint): a first pass
at `downscale_factor` of the size, the x2 latent upsampler, AdaIN to the first pass's statistics, a
second pass at twice the first size from the upsampled latents noised to its first sigma, decode, and
a bilinear resize of the frames to the requested size. A checkpoint without an upsampler runs one pass.

Random draws are the run's, on the host (`Family.host_noise`): stream 2 decode (index 0 the decode
noise, 1.. the 0.9.1 decoder's noise maps), 3 conditioning (per item: its posterior draw, then its
blend noise; +100 in the second pass), 4 the second pass's initial noise, 1 (5 in the second pass)
the per-step image-conditioning noise.

Where diffusers and the official code disagree, the checkpoint's layout picks (README "LTX-Video"):
fps 25 for diffusers folders, 30 for official files (`inference.py`); decode noise mixed after
(diffusers) or before (official) the latent de-normalisation; guidance rescale after CFG when > 0
(diffusers `guidance_rescale`) or after STG when != 1 (official `rescaling_scale`, the same formula).
"""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vidax.translator import MANIFEST, MODEL_FILE, read_manifest, read_metadata
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.generator.denoise import Denoisers, Schedule, denoise
from vidax.zoo.weights.dit_file import dit_file, load_dit_file
from vidax.zoo.generator.contract import Decoded, DiTPart, Family, Flag, Inputs, Settings
from vidax.zoo.generator.stages import Run
from vidax.zoo.ltx_video import latents as L
from vidax.zoo.ltx_video import passes, rope
from vidax.zoo.ltx_video.config import (
    LTXConfigError,
    SchedulerConfig,
    TransformerConfig,
    UpsamplerConfig,
    VAEConfig,
)
from vidax.zoo.ltx_video.passes import Pass, StepGuide
from vidax.zoo.ltx_video.predict import LTXCondition, LTXPredict, LTXText
from vidax.zoo.ltx_video.steppers import KeepFirstFrame, PerTokenEuler
from vidax.zoo.ltx_video.text import encode_prompts
from vidax.zoo.ltx_video.transformer import LTXVideoTransformer
from vidax.zoo.ltx_video.upsampler import LTXLatentUpsampler
from vidax.zoo.ltx_video.vae import LTXVideoVAE, decode_peak_bytes, encode_peak_bytes
from vidax.zoo.parts.vae_tiling import TileSizes, tiles_for
from vidax.zoo.video_io import vae_image
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.progress import Progress
from vidax.zoo.weights.source import WeightsSource
from vidax.zoo.compute.planner import Job, abstract_param_count
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.compute.runtime import platform

CONDITION_PIPELINES = ("LTXConditionPipeline",)
LTX_PIPELINES = ("LTXPipeline", "LTXImageToVideoPipeline")
# the text presets of `text.PRESETS`, by reference: (max_length, mask the encoder, strip the prompt)
TEXT = {"ltx": (128, False, False), "i2v": (128, False, False), "condition": (256, True, False),
        "official": (256, True, True)}
SECOND_PASS_CONDITION_NOISE = 100  # stream-3 index offset of the second pass's conditioning draws


# --- settings ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class LTXSettings(Settings):
    """LTX-Video's settings: the common ones and the pipelines' own knobs (diffusers' keyword names where
    diffusers has them; the official config's otherwise)."""

    guidance_rescale: float = 0.0  # diffusers `guidance_rescale` / official `rescaling_scale`
    decode_timestep: float = 0.0
    decode_noise_scale: float | None = None  # None: the decode timestep
    vae_tiling: bool | None = None  # None: tiles only when the whole video's VAE call would not fit
    image_cond_noise_scale: float = 0.15
    condition_frame: tuple[str, ...] = ()  # "PATH:INDEX[:STRENGTH]" (LTXConditionPipeline conditions)
    max_sequence_length: int | None = None  # None: the reference's (128 LTXPipeline, 256 otherwise)
    timesteps: Any = None  # diffusers' `timesteps` (0..1000): a list, or "1000,993.7,..." from the CLI
    stg: float = 0.0  # official `stg_scale`
    stg_skip_blocks: Any = ()  # official `skip_block_list` (ints, or "19,20" from the CLI)
    stg_mode: str = "attention_values"
    cfg_star: bool = False  # official `cfg_star_rescale`
    pipeline: str = "base"  # official `pipeline_type`: "base" or "multi-scale"
    multi_scale: bool | None = None  # --multi-scale / --no-multi-scale (None: `pipeline` if an upsampler is there)
    downscale_factor: float = 0.6666666
    adain_factor: float = 1.0
    tone_map_compression_ratio: float | None = None  # None: the pass's own (official second pass of 13B distilled: 0.6)
    first_pass: Mapping | None = None  # the official multi-scale passes' overrides
    second_pass: Mapping | None = None


@dataclasses.dataclass(frozen=True)
class ConditionItem:
    """One `--condition-frame PATH:INDEX[:STRENGTH]` (or `--image`: frame 0, strength 1)."""

    path: str
    frame_index: int
    strength: float = 1.0

    @classmethod
    def parse(cls, text: str, frames: int) -> "ConditionItem":
        parts = str(text).rsplit(":", 2)
        try:
            if len(parts) == 3 and not Path(str(text).rsplit(":", 1)[0]).exists():
                path, index, strength = parts[0], int(parts[1]), float(parts[2])
            else:
                path, index, strength = str(text).rsplit(":", 1)[0], int(str(text).rsplit(":", 1)[1]), 1.0
        except (ValueError, IndexError):
            raise PipelineError(f"--condition-frame takes PATH:INDEX[:STRENGTH], got {text!r}") from None
        if not Path(path).is_file():
            raise PipelineError(f"--condition-frame {text}: {path} not found")
        if not 0 <= index < frames:
            raise PipelineError(f"--condition-frame {text}: frame {index} is outside the video's 0..{frames - 1}")
        if not 0.0 <= strength <= 1.0:
            raise PipelineError(f"--condition-frame {text}: strength {strength} is not in [0, 1]")
        return cls(path, index, strength)


# --- the family --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LTXPrompt:
    """What `encode` hands to `sample`: the encoded prompts, and the conditioning images (each pass encodes
    them at its own size)."""

    text: LTXText
    images: Mapping[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class PassPlan:
    """One denoising pass, as its steps read it: the reference it follows, its schedule (conditioned
    references), condition, per-step guides, and the image-condition noise it draws."""

    reference: str
    schedule: Any
    cond: LTXCondition
    guides: tuple[StepGuide, ...]
    noisy: bool  # image-condition noise at every step
    shape: tuple[int, ...]  # the tokens' (the per-step noise's shape)
    height: int
    width: int
    noise_stream: int


class LTXVideoFamily(Family):
    """LTX-Video 0.9.x: 2B and 13B, dev and distilled, one or two passes; every reference above."""

    name = "ltx_video"
    settings_class = LTXSettings
    cache_contexts = ("cond_uncond",)  # the reference batches the CFG (and STG) branches in one DiT call
    default_negative_prompt = ""
    flags = (
        Flag("--guidance-rescale", "guidance_rescale", float,
             "guidance rescale (diffusers' guidance_rescale; the official rescaling_scale)"),
        Flag("--decode-timestep", "decode_timestep", float, "timestep the VAE decodes at (0.9.1+ decoders)"),
        Flag("--decode-noise-scale", "decode_noise_scale", float, "noise mixed into the latents before decode "
             "(default: the decode timestep)"),
        Flag("--image-cond-noise-scale", "image_cond_noise_scale", float,
             "noise around hard-conditioned frames at every step (LTXConditionPipeline / official)"),
        Flag("--condition-frame", "condition_frame", str, "image or video conditioning at a frame: PATH:INDEX"
             "[:STRENGTH] (repeatable; video extension)", multiple=True),
        Flag("--max-sequence-length", "max_sequence_length", int, "T5 tokens (default 128 LTXPipeline, 256 otherwise)"),
        Flag("--timesteps", "timesteps", str, "the timesteps to run, 0..1000, comma-separated (distilled lists)"),
        Flag("--stg", "stg", float, "spatio-temporal guidance scale (official stg_scale)"),
        Flag("--stg-skip-blocks", "stg_skip_blocks", str, "blocks STG perturbs, comma-separated"),
        Flag("--cfg-star", "cfg_star", bool, "CFG* rescale of the negative branch (official cfg_star_rescale)"),
        Flag("--multi-scale", "multi_scale", bool, "two passes with the latent upsampler (default: the model's, when "
             "the checkpoint has an upsampler)"),
        Flag("--downscale-factor", "downscale_factor", float, "first-pass size of a multi-scale run"),
        Flag("--adain-factor", "adain_factor", float, "AdaIN of the upsampled latents to the first pass's"),
        Flag("--tone-map-compression-ratio", "tone_map_compression_ratio", float,
             "tone mapping of the final latents (0..1)"),
        Flag("--vae-tiling", "vae_tiling", bool, "VAE decode (and conditioning encode) in overlapping 512-px, "
             "16-frame tiles as diffusers' enable_tiling() + frame-wise decoding (default: only when the whole "
             "video would not fit the device)"),
    )

    # --- sources -------------------------------------------------------------------------------

    @cached_property
    def layout(self) -> str:
        """"official" (single files, header configs) or "diffusers" (config.json per component)."""
        source = self.source_or_none
        if source is None:
            return "diffusers" if "diffusers" in self.entry.repos else self.entry.default_layout
        if source.kind == "converted":
            recorded = _json(source.root / MODEL_FILE) or {}
            layouts = recorded.get("component_layouts") or {}
            return layouts.get("transformer") or recorded.get("layout") or self.entry.default_layout
        if source.kind == "repo":
            return "diffusers" if "diffusers" in self.entry.repos else self.entry.default_layout
        root = source.root
        if root.is_file():
            return "official"
        own = self._official_file("transformer")
        if own and any(root.glob(own)):
            return "official"
        if (root / "model_index.json").is_file() or (root / "transformer").is_dir():
            return "diffusers"
        return "official" if any(root.glob("ltxv-*.safetensors")) or any(root.glob("ltx-video-*.safetensors")) \
            else "diffusers"

    def _official_file(self, component: str) -> str | None:
        comp = self.entry.components.get(component)
        files = comp.file.get("official") if comp is not None else None
        return files[0] if files else None

    def _files(self, component: str) -> tuple[str, ...] | None:
        """The component's own file globs in this checkpoint's layout (None: the spec's)."""
        comp = self.entry.components.get(component)
        found = comp.file.get(self.layout) if comp is not None else None
        return tuple(found) if found else None

    def _component_source(self, component: str) -> WeightsSource | None:
        """Where a component lives: the checkpoint, or (official layout: T5 and its tokenizer; the diffusers
        upsampler) the component's own repo when the checkpoint does not carry it (None: an optional
        component that is nowhere, or no checkpoint reachable yet: `--plan` offline)."""
        source = self.source_or_none
        if source is None:
            return None
        comp = self.entry.components.get(component)
        own = comp.repo.get(self.layout) if comp is not None else None
        if own is None or source.kind == "converted":
            return source
        if source.kind == "folder" and source.root.is_dir():
            folders = [comp.folder(self.layout, True), comp.folder(self.layout, False)]
            if any(f and (source.root / f).exists() for f in folders):
                return source
        if source.kind == "repo" and source.repo == own:
            return source
        try:
            return WeightsSource.resolve(None, own, None)
        except Exception as err:  # noqa: BLE001 - offline and not cached
            from vidax.translator import TranslatorError

            if comp.optional and isinstance(err, (TranslatorError, PipelineError)):
                return None
            raise

    def load_tree(self, component: str, spec: str, subfolders: Sequence[str | None] = (None,),
                  dtype: str | None = None, *, progress: Progress | None = None, loras: tuple | None = None):
        """A component's host tree, from its own source and file (this layout's; see the report: the
        shared `load_tree` applies one layout's `file` to every layout)."""
        comp = self.entry.components.get(component)
        dtype = dtype or (comp.dtype if comp is not None else None)
        loras = self.adapters.get(component, ()) if loras is None else loras  # as the shared load_tree
        if dit_file(self.options, component) is not None:  # --transformer FILE
            return load_dit_file(dit_file(self.options, component), component, spec, dtype, progress, loras=loras)
        source = self._component_source(component)
        if source is None:
            raise PipelineError(f"{self.name}: no {component} in {self.source.label} nor in its own repo")
        files = self._files(component) if source is self.source else None
        if source is not self.source and comp is not None:
            subfolders = (comp.folder(self.layout, False),)
        return source.load(component, spec, subfolders, dtype=dtype, progress=progress or Progress(), files=files,
                           loras=loras)

    def _find(self, component: str, *relative: str) -> Path | None:
        source = self._component_source(component)
        return None if source is None else source.find(*relative, component=component)

    # --- configs -------------------------------------------------------------------------------

    @cached_property
    def header(self) -> dict:
        """The official single file's header config (`transformer`, `vae`, `scheduler`), {} for diffusers."""
        if self.layout != "official" or self.source_or_none is None:
            return {}
        return self._metadata_config("transformer", "ltx_video/transformer")

    def _metadata_config(self, component: str, spec: str) -> dict:
        source = self.source
        where, files = source.repo if source.kind == "repo" else source.root, self._files(component)
        if source.kind == "converted":
            manifest = read_manifest(source.root / component) if (source.root / component / MANIFEST).is_file() else {}
            origin = str(manifest.get("source", {}).get("origin", ""))
            if origin.startswith("hf://"):
                where = origin[len("hf://"):].split(" ")[0]
            elif origin:
                where = Path(origin)
            else:
                return {}
        try:
            meta = read_metadata(spec, where, layout="official" if component != "latent_upsampler" else None,
                                 revision=source.revision, files=None if Path(str(where)).is_file() else files)
        except Exception as err:  # noqa: BLE001 - no header: the registry's configs stand in
            from vidax.translator import TranslatorError

            if isinstance(err, TranslatorError):
                return {}
            raise
        text = meta.get("config")
        return json.loads(text) if text else {}

    @cached_property
    def dit_config(self) -> TransformerConfig:
        try:
            if self.header.get("transformer"):
                return TransformerConfig.from_official_config(self.header)
            return TransformerConfig.from_hf_config(self.require_config("transformer", "transformer/config.json"))
        except LTXConfigError as err:
            raise PipelineError(f"{self.name}: {err}") from None

    @cached_property
    def vae_config(self) -> VAEConfig:
        try:
            if self.header.get("vae"):
                return VAEConfig.from_official_config(self.header)
            return VAEConfig.from_hf_config(self.require_config("vae", "vae/config.json"))
        except LTXConfigError as err:
            raise PipelineError(f"{self.name}: {err}") from None

    @cached_property
    def upsampler_config(self) -> UpsamplerConfig | None:
        """The latent upsampler's config, None when the checkpoint has none (one pass)."""
        if "latent_upsampler" not in self.entry.components:
            return None
        if self.source_or_none is None:  # --plan before a download: the registry's (the model's default passes)
            table = self.entry.config.get("latent_upsampler")
            return UpsamplerConfig.from_hf_config(table) if table else None
        try:
            if self.layout == "official":
                found = self._metadata_config("latent_upsampler", "ltx_video/upsampler")
                return UpsamplerConfig.from_official_config(found) if found else None
            found = self._find("latent_upsampler", "latent_upsampler/config.json")
            return UpsamplerConfig.from_hf_config(json.loads(found.read_text())) if found else None
        except LTXConfigError as err:
            raise PipelineError(f"{self.name}: {err}") from None

    @cached_property
    def scheduler(self) -> SchedulerConfig:
        try:
            if self.header.get("scheduler"):
                return SchedulerConfig.from_official_config(self.header)
            found = self.read_config("scheduler", "scheduler/scheduler_config.json")
            return SchedulerConfig.from_hf_config(found) if found else SchedulerConfig(sampler="linear_quadratic",
                                                                                      dynamic_shift=None,
                                                                                      shift_terminal=None)
        except LTXConfigError as err:
            raise PipelineError(f"{self.name}: {err}") from None

    @cached_property
    def pipeline_class(self) -> str:
        """The diffusers pipeline the folder was saved from ("official" for single files)."""
        if self.layout == "official":
            return "official"
        index = self.read_config("model_index", "model_index.json") or {}
        return index.get("_class_name", "LTXConditionPipeline")

    def heads(self) -> int:
        return self.dit_config.num_attention_heads

    # --- settings ------------------------------------------------------------------------------

    @property
    def size_multiple(self) -> int:
        """diffusers' LTX pipelines refuse sides that are not multiples of 32 (VAE x patch); the official
        `inference.py` takes any size (it pads, `padding`)."""
        return 1 if self.pipeline_class == "official" else self._grid_multiple()

    def _grid_multiple(self) -> int:
        return self.vae_config.spatial_ratio * self.dit_config.patch_size

    @property
    def frame_step(self) -> int:
        """diffusers' LTX pipelines take any frame count: the latents hold `(F - 1) // 8 + 1` frames, which
        decode to `8k + 1` (12 -> 9). The official `inference.py` takes any count too: it pads to `8k + 1` and
        crops the output back (`padding`)."""
        if self.pipeline_class == "official" or self.dit_config.patch_size_t == 1:
            return 1
        return self.vae_config.temporal_ratio * self.dit_config.patch_size_t

    def padding(self, s: LTXSettings) -> L.Padding:
        """The size a request runs at: the official `inference.py`'s padded size (frames 8k + 1, sides
        multiples of 32; the output cropped back in `decode`); diffusers folders run the size asked for."""
        if self.pipeline_class == "official":
            return L.official_padding(s.height, s.width, s.frames)
        return L.Padding(s.frames, s.height, s.width)

    def folder_settings(self) -> dict:
        if self.layout == "official" or self.source_or_none is None:
            return {}
        # diffusers pipelines: frame_rate 25, no STG / CFG* (official-only), the scheduler's own shift
        out = {"fps": 25.0, "stg": 0.0, "cfg_star": False, "max_sequence_length": None}
        found = self.read_config("scheduler", "scheduler/scheduler_config.json") or {}
        if "shift" in found:
            out["shift"] = float(found["shift"])
        return out

    def reference(self, s: LTXSettings) -> str:
        if self.pipeline_class == "official":
            return "official"
        if self.pipeline_class in CONDITION_PIPELINES or s.condition_frame:
            return "condition"
        return "i2v" if self.options.image is not None else "ltx"

    def multi_scale(self, s: LTXSettings) -> bool:
        if self.reference(s) not in ("condition", "official"):
            return False
        wanted = s.multi_scale if s.multi_scale is not None else s.pipeline == "multi-scale"
        return bool(wanted) and (s.multi_scale is True or self.upsampler_config is not None)

    def _label(self) -> str:
        return self.source_or_none.label if self.source_or_none is not None else self.name

    def check_settings(self, s: LTXSettings) -> None:
        ref = self.reference(s)
        if s.pipeline not in ("base", "multi-scale"):
            raise PipelineError(f"{self.name}: pipeline {s.pipeline!r} (base or multi-scale)")
        if s.sampler not in (None, "euler") and ref in ("condition", "official"):
            raise PipelineError(f"--sampler {s.sampler}: the {_describe(ref)} steps each token from its own sigma "
                                "(per-token Euler); only euler")
        if (self.options.extra or {}).get("timesteps") is not None and ref in ("ltx", "i2v"):
            raise PipelineError(f"--timesteps: {self.pipeline_class} passes its own sigmas (diffusers refuses both); "
                                "--timesteps needs the condition pipeline (--condition-frame) or an official checkpoint")
        if s.stg_mode != "attention_values":
            raise PipelineError(f"{self.name}: STG mode {s.stg_mode!r} is not supported (attention_values)")
        passes.ints(s.stg_skip_blocks, "--stg-skip-blocks")  # its form; its blocks only where STG runs (below)
        if not 0.0 <= s.guidance_rescale <= 1.0:
            raise PipelineError(f"--guidance-rescale must be in [0, 1], got {s.guidance_rescale}")
        if s.tone_map_compression_ratio is not None and not 0.0 <= s.tone_map_compression_ratio <= 1.0:
            raise PipelineError(f"--tone-map-compression-ratio must be in [0, 1], got {s.tone_map_compression_ratio}")
        if s.max_sequence_length is not None and s.max_sequence_length < 1:
            raise PipelineError(f"--max-sequence-length must be positive, got {s.max_sequence_length}")
        for item in s.condition_frame:
            ConditionItem.parse(item, s.frames)
        if ref == "condition" and self.scheduler.dynamic_shift is not None:
            raise PipelineError(f"{self._label()}: its scheduler shifts dynamically, which LTXConditionPipeline "
                                "cannot run (diffusers raises the same): conditioning needs a static-shift scheduler")
        if s.multi_scale and self.upsampler_config is None:
            raise PipelineError(f"--multi-scale needs the latent upsampler ({self.name}: none in {self._label()})")
        if s.multi_scale and ref not in ("condition", "official"):
            raise PipelineError(f"--multi-scale runs the condition pipeline's passes; {self.pipeline_class} does not")
        layers = self.dit_config.num_layers
        for p in self._passes(s):
            wide = sorted({b for g in self._guides(s, p) if g.stg > 0 for b in g.skip if not 0 <= b < layers})
            if wide:
                raise PipelineError(f"{self.name}: STG skips blocks {wide}, the DiT has blocks 0..{layers - 1} "
                                    "(--stg-skip-blocks, or --stg 0)")
        if self.multi_scale(s):
            h, w = self._first_size(s)
            if h < self._grid_multiple() or w < self._grid_multiple():
                raise PipelineError(f"{s.height}x{s.width} x downscale {s.downscale_factor} leaves no first pass; "
                                    "give a larger size or --no-multi-scale")

    def image_roles(self) -> dict[str, bool]:
        return {"image": False}

    def _kind(self) -> str:
        return "conditioned on an image"

    def _first_size(self, s: LTXSettings) -> tuple[int, int]:
        """The official first pass's size: each side of the (padded) size x downscale, down to the VAE's multiple."""
        step = self.vae_config.spatial_ratio
        pad = self.padding(s)
        h, w = int(pad.height * s.downscale_factor), int(pad.width * s.downscale_factor)
        return h - h % step, w - w % step

    def _grid(self, frames: int, height: int, width: int) -> tuple[int, int, int]:
        v, c = self.vae_config, self.dit_config
        return ((frames - 1) // v.temporal_ratio + 1) // c.patch_size_t, height // v.spatial_ratio // c.patch_size, \
            width // v.spatial_ratio // c.patch_size

    def latent_shape(self, s: LTXSettings) -> tuple[int, ...]:
        """`[1, C, F', H', W']` of the initial noise (the `--latents` layout): at the padded size of an
        official checkpoint (`padding`), the first pass's size in a multi-scale run."""
        pad = self.padding(s)
        height, width = self._first_size(s) if self.multi_scale(s) else (pad.height, pad.width)
        v = self.vae_config
        return (1, v.latent_channels, (pad.frames - 1) // v.temporal_ratio + 1, height // v.spatial_ratio,
                width // v.spatial_ratio)

    def tokens(self, s: Settings) -> int:
        pad = self.padding(s)
        return math.prod(self._grid(pad.frames, pad.height, pad.width))

    def base_sigmas(self, s: Settings) -> np.ndarray:
        """`LTXPipeline`'s `np.linspace(1.0, 1 / n, n)`."""
        return np.linspace(1.0, 1 / s.steps, s.steps)

    # --- encode --------------------------------------------------------------------------------

    def encode(self, run: Run, s: LTXSettings, inputs: Inputs) -> LTXPrompt:
        """T5 features of the prompt and (when any step guides) the negative prompt."""
        ref = self.reference(s)
        max_length, mask_encoder, strip = TEXT[ref]
        max_length = s.max_sequence_length or max_length
        prompts = [inputs.prompt] + ([inputs.negative_prompt] if inputs.negative_prompt is not None else [])
        folder = self._find("tokenizer", "tokenizer")
        if folder is None:
            raise PipelineError(f"{self.source.label}: no T5 tokenizer folder (tokenizer/)")
        part = self.component("text_encoder")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        t5_json = self._t5_json()
        shapes = {path: leaf.shape for path, leaf in traverse_util.flatten_dict(params, sep="/").items()}
        config = T5Config.from_hf_config(t5_json) if t5_json else T5Config.from_shapes(shapes)
        model = T5EncoderModel(config, dtype=jnp.float32)
        text, mask = encode_prompts(model, {"params": params}, load_tokenizer(folder), prompts, max_length=max_length,
                                    mask_encoder=mask_encoder, strip=strip)
        text.block_until_ready()
        run.done(params)
        return LTXPrompt(LTXText(text, jnp.asarray(mask)), dict(inputs.images))

    def _t5_json(self) -> dict | None:
        found = self._find("text_encoder", "text_encoder/config.json")
        if found is not None:
            return json.loads(found.read_text())
        return self.entry.config.get("text_encoder")

    def needs_negative(self, s: LTXSettings) -> bool:
        return any(g.guidance > 1.0 for p in self._passes(s) for g in self._guides(s, p))

    # --- passes and guidance -------------------------------------------------------------------

    def _passes(self, s: LTXSettings) -> list[Pass]:
        extra = self.options.extra or {}
        pad = self.padding(s)
        return passes.plan_passes(dataclasses.replace(s, height=pad.height, width=pad.width),
                                  multi_scale=self.multi_scale(s), first_size=self._first_size(s),
                                  user_timesteps=extra.get("timesteps") is not None,
                                  user_steps=self.options.steps is not None)

    def _schedule(self, s: LTXSettings, p: Pass, ref: str):
        tokens = math.prod(self._grid(self.padding(s).frames, p.height, p.width))
        try:
            return passes.pass_schedule(p, ref, self.scheduler, tokens)
        except ValueError as err:
            if ref != "official":
                raise
            raise PipelineError(f"{self.name}: {err}") from None

    def _guides(self, s: LTXSettings, p: Pass, timesteps: np.ndarray | None = None) -> list[StepGuide]:
        """Per-step guidance (`passes.step_guides`); the user's flags win over the pass's lists."""
        ref = self.reference(s)
        if timesteps is None:
            timesteps = np.asarray(self._schedule(s, p, ref).timesteps) if ref in ("condition", "official") \
                else np.zeros(s.steps)
        extra = self.options.extra or {}
        given = {"guidance": self.options.guidance, "stg": extra.get("stg"), "rescale": extra.get("guidance_rescale"),
                 "skip_blocks": extra.get("stg_skip_blocks"), "cfg_star": extra.get("cfg_star")}
        return passes.step_guides(s, p, timesteps, given, official=ref == "official",
                                  official_layout=self.layout == "official")

    # --- sampling ------------------------------------------------------------------------------

    def _stepper(self, s: LTXSettings, plan: PassPlan, latents_shape: tuple[int, ...]):
        """The pass's stepper: per-token Euler on the pass's schedule (conditioned references), else the
        folder's scheduler at the pass's size (I2V: the first frame kept)."""
        if plan.reference in ("condition", "official"):
            cond = plan.cond
            noise_scale = float(s.image_cond_noise_scale) if cond.token_mask is not None else 0.0
            return PerTokenEuler(sigmas=np.asarray(plan.schedule.sigmas, np.float32),
                                 timesteps=np.asarray(plan.schedule.timesteps, np.float32),
                                 mask=None if cond.token_mask is None else np.asarray(cond.token_mask),
                                 init_tokens=None if cond.init_tokens is None else np.asarray(cond.init_tokens),
                                 noise_scale=noise_scale)
        inner = self.stepper(dataclasses.replace(s, height=plan.height, width=plan.width), latents_shape)
        if plan.reference == "i2v":
            return KeepFirstFrame(inner=inner, keep=np.asarray(plan.cond.token_mask)[..., None])
        return inner

    def _knobs(self, run: Run, s: LTXSettings, plan: PassPlan, index: int, expert: int) -> dict:
        guide = plan.guides[index]
        knobs = {"scale": jnp.float32(guide.guidance), "stg": jnp.float32(guide.stg),
                 "rescale": jnp.float32(guide.rescale)}
        if plan.noisy:
            knobs["noise"] = jnp.asarray(run.host_noise(plan.noise_stream, index, plan.shape))
            knobs["noise_scale"] = jnp.float32(s.image_cond_noise_scale)
        return knobs

    @staticmethod
    def pass_predictor(plan: PassPlan, expert: int, dit: LTXVideoTransformer, step: int) -> LTXPredict:
        guide = plan.guides[step]  # this step's branch set (a new configuration when it changes)
        ref = plan.reference
        cfg = guide.guidance > 1.0
        stg = guide.stg > 0.0
        stg_row = stg and bool(guide.skip)
        if ref == "official":
            rescale = stg and guide.rescale != 1.0
        else:
            rescale = cfg and guide.rescale > 0.0
        return LTXPredict(ref, cfg, stg, stg_row, cfg and guide.cfg_star, rescale, guide.skip if stg_row else (),
                          dit.cfg.num_layers, jnp.dtype(dit.dtype).name, plan.noisy)

    def dit_parts(self, s: LTXSettings) -> list[DiTPart]:
        return [self.component("transformer")]

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: LTXSettings) -> LTXVideoTransformer:
        # activations in the weights' dtype (bf16 as shipped; --dtype float32 for parity); residuals fp32
        return LTXVideoTransformer(self.dit_config, dtype=jnp.dtype(tree["blocks/attn1/to_q/kernel"].dtype))

    def sample(self, run: Run, s: LTXSettings, noise: np.ndarray, cond: LTXPrompt) -> jax.Array:
        """One pass, or two around the latent upsampler (multi-scale); the DiT is placed once for both."""
        first, *second = self._passes(s)
        with Denoisers(run, self, s) as denoisers:
            latents = self._pass(run, denoisers, s, first, noise, None, cond)
            if not second:
                return latents
            up = self._upsample(run, s, latents)
            return self._pass(run, denoisers, s, second[0], run.host_noise(4, 0, tuple(up.shape)), np.asarray(up), cond)

    def _pass(self, run: Run, denoisers: Denoisers, s: LTXSettings, p: Pass, noise: np.ndarray,
              init: np.ndarray | None, prompt: LTXPrompt) -> jax.Array:
        """One denoising pass at `p`'s size from `noise` (and, second pass, the upsampled latents `init`)."""
        ref = self.reference(s)
        cfg = self.dit_config
        s_pass = dataclasses.replace(s, height=p.height, width=p.width)
        f, h, w = self._grid(self.padding(s).frames, p.height, p.width)
        token_mask = init_tokens = None
        num_extra = 0
        schedule = None
        if ref in ("ltx", "i2v"):
            tokens = L.pack(noise, cfg.patch_size, cfg.patch_size_t)
            coords = rope.grid_coords(1, f, h, w, cfg, frame_rate=s.fps, vae_temporal=self.vae_config.temporal_ratio,
                                      vae_spatial=self.vae_config.spatial_ratio)
            if ref == "i2v":
                image = self._encode_items(run, s, p, [ConditionItem("--image", 0)], prompt.images)[0]
                tokens, token_mask = L.image_to_video_latents(image.latents, noise)
        else:
            schedule = self._schedule(s, p, ref)
            items = ([ConditionItem("--image", 0)] if "image" in prompt.images else []) + \
                [ConditionItem.parse(c, s.frames) for c in s.condition_frame]
            conditions = self._encode_items(run, s, p, items, prompt.images)
            sigma = float(schedule.sigmas[0]) if init is not None else None
            causal = ref != "official" or self.dit_config.causal_temporal_positioning is not False
            prepared = L.prepare_conditioned(noise, conditions, latents=init, sigma=sigma, causal_fix=causal)
            tokens, token_mask, num_extra = prepared.tokens, prepared.mask, prepared.num_extra
            init_tokens = tokens.copy() if conditions else None
            coords = rope.video_coords(prepared.pixel_ids[:1], cfg, frame_rate=s.fps)
        cos, sin = rope.rope_tables(coords[:1], cfg)
        state = LTXCondition(prompt.text.text, prompt.text.mask, cos, sin, None if token_mask is None else np.asarray(token_mask, np.float32),
                             init_tokens)
        # the scheduler's grid has s.steps entries (ltx, i2v): the guidance list must too
        timesteps = np.zeros(s.steps) if schedule is None else np.asarray(schedule.timesteps)
        noisy = ref in ("condition", "official") and init_tokens is not None and s.image_cond_noise_scale > 0
        plan = PassPlan(ref, schedule, state, tuple(self._guides(s, p, timesteps)), noisy, tuple(tokens.shape),
                        p.height, p.width, 5 if p.second else 1)
        stepper = self._stepper(s_pass, plan, tuple(tokens.shape))
        steps = Schedule(stepper, (0,) * stepper.num_steps, partial(self._knobs, run, s_pass, plan))
        out = denoise(run, denoisers, steps, np.asarray(tokens, np.float32), state, partial(self.pass_predictor, plan),
                      stage="refine" if p.second else "denoise", noise_stream=plan.noise_stream)
        out = out[:, num_extra:]
        return L.unpack(out, f, h, w, cfg.patch_size, cfg.patch_size_t)

    def _encode_items(self, run: Run, s: LTXSettings, p: Pass, items: list[ConditionItem],
                      images: Mapping[str, np.ndarray]) -> list[L.Condition]:
        """Each item's normalised latents at the pass's size (a posterior draw each, then its blend noise)."""
        if not items:
            return []
        from vidax.zoo.video_io import read_video

        vae, params = self._vae(run)
        offset = SECOND_PASS_CONDITION_NOISE if p.second else 0
        out = []
        for k, item in enumerate(items):
            if item.path == "--image":
                frames = [images["image"]]
            elif Path(item.path).suffix.lower() in (".mp4", ".mov", ".mkv", ".webm", ".avi"):
                frames = list(read_video(item.path))
                frames = frames[:L.trim_conditioning_frames(item.frame_index, len(frames), s.frames)]
            else:
                from vidax.zoo.video_io import read_image

                frames = [read_image(item.path)]
            if (len(frames) - 1) % self.vae_config.temporal_ratio:
                raise PipelineError(f"{item.path}: a conditioning video needs 8k+1 frames, got {len(frames)}")
            pixels = self._condition_pixels(s, p, frames)
            tiles = self._tiles(s, encode_peak_bytes(self.vae_config, pixels.shape[2], p.height, p.width), params)
            moments = vae.encode(params, jnp.asarray(pixels), tiling=tiles)
            eps = run.host_noise(3, offset + 2 * k, (1, moments.shape[1] // 2, *moments.shape[2:]))
            z = L.sample_posterior(np.asarray(moments), eps)
            z = L.normalize(z, np.asarray(params["latents_mean"]), np.asarray(params["latents_std"]))
            blend = None
            if item.frame_index > 0:
                n = z.shape[2]
                shape = (1, z.shape[1], n if n <= 2 else 2, *z.shape[3:])
                blend = run.host_noise(3, offset + 2 * k + 1, shape)
            out.append(L.Condition(np.asarray(z, np.float32), item.frame_index, item.strength, blend))
        run.done(params)
        return out

    def _condition_pixels(self, s: LTXSettings, p: Pass, frames: Sequence[np.ndarray]) -> np.ndarray:
        """A condition's frames as the VAE takes them, `[1, 3, n, H, W]` at the pass's size. At an official
        padded size: each frame at the requested size, zero-padded by the run's margins (`inference.py`'s
        `load_media_file`), then resized bilinearly to the pass's size where it differs (the pipeline's
        `resize_tensor`: a multi-scale pass)."""
        pad = self.padding(s)
        if not pad.spatial:
            return np.concatenate([vae_image(np.asarray(f, np.uint8), p.height, p.width) for f in frames], axis=2)
        pixels = L.pad_pixels(np.concatenate([vae_image(np.asarray(f, np.uint8), s.height, s.width)
                                              for f in frames], axis=2), pad)
        if pixels.shape[3:] == (p.height, p.width):
            return pixels
        hwc = pixels[0].transpose(1, 2, 3, 0)  # [n, H, W, 3]
        resized = np.stack([np.asarray(_resize(jnp.asarray(f), (p.height, p.width))) for f in hwc])
        return resized.transpose(3, 0, 1, 2)[None]

    def _vae(self, run: Run) -> tuple[LTXVideoVAE, Any]:
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        return LTXVideoVAE(self.vae_config), params

    def _upsample(self, run: Run, s: LTXSettings, latents: jax.Array) -> jax.Array:
        """The official `_upsample_latents` + `adain_filter_latent`: de-normalise, x2, normalise, AdaIN."""
        part = self.component("latent_upsampler")
        params = run.load(part.component, part.spec, part.subfolders)
        _, vae_params = self._vae(run)
        mean, std = vae_params["latents_mean"], vae_params["latents_std"]
        scaling = self.vae_config.scaling_factor
        with run.timer.stage("upsample"):
            raw = L.denormalize(latents, mean, std, scaling)
            up = LTXLatentUpsampler(self.upsampler_config)(params, raw)
            up = L.normalize(up, mean, std, scaling)
            if s.adain_factor:
                up = L.adain(up, latents, s.adain_factor)
            up.block_until_ready()
        run.done((params, vae_params))
        return up

    # --- decode --------------------------------------------------------------------------------

    def decode(self, run: Run, s: LTXSettings, latents: jax.Array) -> Decoded:
        """Final latents -> float32 frames `[F, H, W, 3]` in [0, 1]: resized to the (padded) size after a
        multi-scale run, as `LTXMultiScalePipeline`; an official padded run cropped back to the request
        (`inference.py`)."""
        vae, params = self._vae(run)
        cfg = self.vae_config
        z = jnp.asarray(latents, jnp.float32)
        mean, std = params["latents_mean"], params["latents_std"]
        timestep = None
        tone = self._passes(s)[-1].tone_map or 0.0  # the last pass's
        scale = s.decode_noise_scale if s.decode_noise_scale is not None else s.decode_timestep
        eps = jnp.asarray(run.host_noise(2, 0, tuple(z.shape))) if cfg.timestep_conditioning else None
        if self.layout == "official":  # noise and tone map on the normalised latents (official vae_decode order)
            if eps is not None:
                z = L.decode_input(z, eps, scale)
            if tone:
                z = L.tone_map(z, tone)
            z = L.denormalize(z, mean, std, cfg.scaling_factor)
        else:
            if tone:
                z = L.tone_map(z, tone)
            z = L.denormalize(z, mean, std, cfg.scaling_factor)
            if eps is not None:
                z = L.decode_input(z, eps, scale)
        if cfg.timestep_conditioning:
            timestep = jnp.full((z.shape[0],), s.decode_timestep, jnp.float32)
        frames, height, width = (z.shape[2] - 1) * cfg.temporal_ratio + 1, *(n * cfg.spatial_ratio for n in z.shape[3:])
        tiles = self._tiles(s, decode_peak_bytes(cfg, frames, height, width), params)
        def maps(k, shape):  # the 0.9.1 decoder's noise maps, in the reference's draw order
            return run.host_noise(2, 1 + k, shape)

        video = np.asarray(vae.decode(params, z, timestep, maps, tiling=tiles), np.float32)
        run.done(params)
        frames = np.clip(video[0] / 2 + 0.5, 0.0, 1.0).transpose(1, 2, 3, 0)  # [F, H, W, 3]
        pad = self.padding(s)
        if frames.shape[1:3] != (pad.height, pad.width):  # frame by frame: one compiled resize, the video on the host
            frames = np.stack([np.asarray(_resize(jnp.asarray(f), (pad.height, pad.width))) for f in frames])
        if pad == L.Padding(s.frames, s.height, s.width):
            return Decoded(np.asarray(frames, np.float32))
        frames = L.crop_padding(frames, pad, s.frames)
        return Decoded(np.asarray(frames, np.float32), settings={"padded_size": [pad.frames, pad.height, pad.width]})

    def _tiles(self, s: LTXSettings, working: int, params: Any) -> TileSizes | None:
        """The VAE's tiles: --vae-tiling / --no-vae-tiling, else tiles only when the whole video's call (its
        fp32 working set `working` and the weights `params`) would not fit the device."""
        return tiles_for(s.vae_tiling, working + sum(leaf.nbytes for leaf in jax.tree.leaves(params)))

    # --- memory --------------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the planner needs at the requested size: the largest pass's tokens, the widest branch
        batch (CFG + STG: 3), T5-XXL, the VAE and its one-shot decode."""
        images = {}
        s = self.resolve_settings(options, images)
        cfg, vae_cfg = self.dit_config, self.vae_config
        dit = LTXVideoTransformer(cfg)
        sizes = dit.memory_sizes(dim=cfg.inner_dim, ffn_dim=cfg.ffn_dim, heads=cfg.num_attention_heads,
                                 text_dim=cfg.inner_dim)
        passes, pad = self._passes(s), self.padding(s)
        tokens = max(math.prod(self._grid(pad.frames, p.height, p.width)) for p in passes)
        batch = 1
        for p in passes:
            for g in self._guides(s, p):
                batch = max(batch, 1 + (g.guidance > 1.0) + (g.stg > 0.0 and bool(g.skip)))
        width = 4 if options.dtype == "float32" else 2
        t5 = self._t5_json() or {}
        ids = jnp.zeros((1, 8), jnp.int32)
        t5_params = abstract_param_count(T5EncoderModel(T5Config.from_hf_config(t5)), ids, jnp.ones_like(ids)) \
            if t5 else 4_760_000_000
        vae_params = sum(math.prod(shape) for shape in LTXVideoVAE(vae_cfg).param_shapes().values())
        last = passes[-1]
        whole = decode_peak_bytes(vae_cfg, pad.frames, last.height, last.width)
        tiles = tiles_for(s.vae_tiling, vae_params * width + whole)
        return quantized_job(Job(  # --weights-dtype counted
            sizes,
            tokens=tokens,
            text_tokens=s.max_sequence_length or TEXT[self.reference(s)][0],
            batch=batch,
            weight_bytes=width,
            activation_bytes=width,
            residual_bytes=4,
            text_encoder_params=t5_params,
            text_encoder_bytes=width,
            vae_params=vae_params,
            vae_weight_bytes=4 if options.dtype == "float32" else None,
            vae_peak_activation_bytes=decode_peak_bytes(vae_cfg, pad.frames, last.height, last.width, tiles),
            blockwise_attention=platform() == "cpu",
            step_input_bytes=2 * tokens * cfg.inner_dim * 4,  # RoPE cos and sin, [1, S, inner_dim] fp32, whole
            accelerator_units=rope_product_units(cfg.inner_dim // cfg.num_attention_heads),
        ), dit, options.weights_dtype)


def rope_product_units(head_dim: int) -> float:
    """Activation units (bf16 `[B, S, D]`) of the self-attention's RoPE products on one TPU device. XLA's v5e buffer
    report of the LTX-Video-2B step (768x512, 121 frames, CFG + STG; 64-wide heads) holds the rotation's two fp32
    products of q and of k (`parts.rope.rotate_interleaved`) as four fp32 `[B, S, heads, 64]` buffers laid out for
    the head split, each padded to 128 lanes: 4 x 2 (fp32) x 2 (padding) units, 18.7 units missing without them.
    LTX-Video-13B's 128-wide heads fuse them (its offloaded chunk within 12% of XLA without the term)."""
    return 4 * 2 * 2 if head_dim < 128 else 0.0


@partial(jax.jit, static_argnums=1)
def _resize(frame: jax.Array, size: tuple[int, int]) -> jax.Array:
    """One frame `[H, W, 3]` resized bilinearly (the official multi-scale pipeline's final resize)."""
    return jax.image.resize(frame, (*size, frame.shape[-1]), "bilinear", antialias=False)


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _describe(reference: str) -> str:
    return {"condition": "LTXConditionPipeline", "official": "official pipeline"}.get(reference, reference)


FAMILY = LTXVideoFamily
