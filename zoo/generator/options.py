"""One generation's request and result: `GenerateOptions` (every setting, checked when built),
`GenerateResult`, the initial latents (seeded noise, `--latents`, `--save-latents`) and the room `--out` needs.

Where the weights come from is `vidax.zoo.weights.source`; progress and stage timing are
`vidax.zoo.compute.progress`; the library call behind `vidax-gen` is `vidax.zoo.api.generate`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vidax.translator.lora import LoraError, parse_request
from vidax.translator.output import StagedFiles
from vidax.zoo.errors import PipelineError


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenerateOptions:
    """Every setting of one generation; None means the model's native default.

    Args:
      model: registered model name (`vidax-gen --list`).
      variant: one of the model's variants (`hunyuanvideo-1.5`: "480p_t2v", "720p_i2v", ...; None: its default,
        or the one a converted `--weights` folder records)
      prompt: the text prompt.
      negative_prompt: the negative prompt for classifier-free guidance (default: the family's).
      image: conditioning image for image-to-video.
      images: further conditioning images a family takes, by role (`{"last_image": path}`).
      weights: converted folder, local checkpoint folder (official or diffusers layout) or Hub repo id.
      height, width, frames, steps: video size and number of sampling steps.
      guidance: classifier-free guidance scale (≤ 1 disables guidance).
      shift: flow shift of the schedule.
      sampler: the model's samplers (flow matching: "euler", "unipc", "dpm++"; CogVideoX: "ddim", "dpm");
        default: the checkpoint's scheduler.
      fps: frames per second of the video (and the model's input where the family conditions on it).
      seed: seed of the initial noise and of any noise drawn during sampling or decoding.
      tp, sp, dp: tensor, sequence and data parallel degrees; all None (with no offload_chunk) lets the
        memory planner choose the fastest layout that fits the devices (1 for any left unset otherwise).
      release_stages: free each stage's weights from the devices when the stage ends (text encoder,
        DiT, VAE); False keeps them placed.
      offload_chunk: keep the DiT's block weights in host memory and stream this many blocks at a
        time to the devices (None: all weights resident).
      latents: `.npy` of initial latents, replacing the seeded noise.
      save_latents: also write the final latents next to the video (`out.latents.npy`).
      out: `.mp4` or `.npy` output path.
      dtype: weights/compute dtype override ("float32", "bfloat16"); default the specs' policy.
      compile_cache: use jax's persistent compilation cache (None: on unless VIDAX_NO_COMPILE_CACHE=1).
      extra: the family's own settings by field name (its `Family.flags`: `{"guidance_2": 3.0}`).
      transformer, transformer_2: a checkpoint file (GGUF or safetensors, quantized or not) holding that
        denoiser's weights in place of `weights`' (Wan2.2 A14B's second expert: transformer_2).
      weights_dtype: "fp8" or "int8" keeps the DiT's block linear weights 8-bit on the device, one scale
        per output channel (`vidax.zoo.weights.quantize`); "bf16"/None: as converted.
      lora: LoRAs merged into the DiT (`transformer`) as it is loaded, each `SOURCE[=STRENGTH]` (a
        `.safetensors` file, a folder holding one, or a Hub repo `owner/name[/file.safetensors]`; strength
        1.0 by default, negative allowed); several add up (docs/LORA.md).
      lora_2: the same for Wan2.2 A14B's second (low-noise) expert, `transformer_2`.
      cache: a step cache (`vidax.zoo.step_caches.methods.METHODS`; docs/CACHING.md); None: every step runs the DiT.
      cache_interval, cache_warmup, cache_order, cache_stop: TaylorSeer's `cache_interval`,
        `disable_cache_before_step`, `max_order`, `disable_cache_after_step` (None: diffusers' defaults).
      cache_threshold: first-block cache's and MagCache's `threshold`; cache_max_skip, cache_retention:
        MagCache's `max_skip_steps`, `retention_ratio`; mag_ratios: `.npy` of its per-step ratios;
        cache_calibrate: run MagCache's calibration (no step skipped) and write the ratios to this `.npy`.
      cache_coefficients, cache_use_ret_steps: TeaCache's published coefficient set (None: the model's)
        and the reference's `use_ret_steps` (Wan's time projection `e0`); its `rel_l1_thresh` is cache_threshold.
      cache_start_percent, cache_end_percent: EasyCache's `start_percent`, `end_percent` (ComfyUI's node;
        its `reuse_threshold` is cache_threshold).
    """

    model: str
    prompt: str
    variant: str | None = None
    negative_prompt: str | None = None
    image: Path | None = None
    images: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    weights: str | None = None
    height: int | None = None
    width: int | None = None
    frames: int | None = None
    steps: int | None = None
    guidance: float | None = None
    shift: float | None = None
    sampler: str | None = None
    fps: float | None = None
    seed: int = 0
    tp: int | None = None
    sp: int | None = None
    dp: int | None = None
    offload_chunk: int | None = None
    release_stages: bool = True
    latents: Path | None = None
    save_latents: bool = False
    out: Path = Path("out.mp4")
    dtype: str | None = None
    compile_cache: bool | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    transformer: Path | None = None
    transformer_2: Path | None = None
    weights_dtype: str | None = None
    lora: tuple[str, ...] = ()
    lora_2: tuple[str, ...] = ()
    cache: str | None = None
    cache_interval: int | None = None
    cache_warmup: int | None = None
    cache_order: int | None = None
    cache_stop: int | None = None
    cache_threshold: float | None = None
    cache_max_skip: int | None = None
    cache_retention: float | None = None
    mag_ratios: Path | None = None
    cache_calibrate: Path | None = None
    cache_coefficients: str | None = None
    cache_use_ret_steps: bool | None = None
    cache_start_percent: float | None = None
    cache_end_percent: float | None = None

    def __post_init__(self):
        check_options(self)


DTYPES = ("float32", "bfloat16")  # --dtype: float32 is the parity setting; default: the specs' policy
MAX_SEED = 2**64 - 1  # NumPy seeds any non-negative integer; a 64-bit one is what a sidecar or a server stores
PARALLEL_FIELDS = ("tp", "sp", "dp", "offload_chunk")


def flag_name(field: str) -> str:
    """`guidance_2` -> `--guidance-2` (the vidax-gen flag of a settings field)."""
    return "--" + field.replace("_", "-")


def check_options(options: GenerateOptions) -> None:
    """The request's own values, checked before any work (one line each): what vidax-gen and a server both
    rely on, run whenever `GenerateOptions` is built. Settings that depend on the model (sizes, steps,
    sampler) are its family's checks (`Family.resolve_settings`)."""
    if options.dtype is not None and options.dtype not in DTYPES:
        raise PipelineError(f"unknown --dtype {options.dtype!r} (choose from {', '.join(DTYPES)})")
    seed = options.seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise PipelineError(f"--seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
    check_finite({**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)}, **(options.extra or {})})
    if options.fps is not None and options.fps <= 0:
        raise PipelineError(f"--fps must be positive, got {options.fps:g}")
    for field in ("lora", "lora_2"):  # SOURCE[=STRENGTH]: a bad strength is one line before any work
        for text in getattr(options, field):
            try:
                parse_request(text)
            except LoraError as err:
                raise PipelineError(str(err).replace("--lora ", flag_name(field) + " ", 1)) from None
    for field in PARALLEL_FIELDS:
        value = getattr(options, field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
            raise PipelineError(f"{flag_name(field)} must be a positive integer, got {value!r}")


def check_finite(values: Mapping[str, Any]) -> None:
    """Every float among `values` (settings by field name; a repeated flag's tuple too) is a finite number:
    NaN or an infinity would run the whole generation and then poison its output and sidecar."""
    for field, value in values.items():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, numbers.Real) and not isinstance(item, numbers.Integral) and not math.isfinite(item):
                raise PipelineError(f"{flag_name(field)} must be a finite number, got {item}")


@dataclasses.dataclass
class GenerateResult:
    """What a pipeline produced: frames `[F, H, W, 3]` float32 in [0, 1], latents, settings and stage times;
    for models that generate sound, the waveform `[channels, samples]` float32 and its sample rate."""

    frames: np.ndarray
    latents: np.ndarray
    fps: float
    settings: dict
    times: dict[str, float]
    audio: np.ndarray | None = None
    sample_rate: int | None = None


# --- latents ---------------------------------------------------------------------------------


NPY_MAGIC = b"\x93NUMPY"  # the first bytes of every .npy file


def seeded_noise(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal float32 initial latents from `seed`, drawn on the host (NumPy PCG64).

    The same seed gives the same video on CPU, GPU or TPU and under any mesh, and the draw costs
    nothing to compile (a cold `jax.random.normal` compiles for seconds on CPU).
    """
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def load_latents(path: str | Path, shape: tuple[int, ...]) -> np.ndarray:
    """Initial latents from a `.npy` file, float32, checked against the shape the settings imply."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path}: latents file not found")
    not_npy = PipelineError(f"{path}: not a .npy file of numbers (write the latents with numpy.save, or --save-latents)")
    try:
        with open(path, "rb") as fh:
            if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:  # text, .npz, pickles: np.load would suggest allow_pickle
                raise not_npy
            fh.seek(0)
            latents = np.load(fh, allow_pickle=False)
    except (ValueError, EOFError):
        raise not_npy from None
    except OSError as err:
        raise PipelineError(f"{path}: cannot read latents ({err.strerror or err})") from None
    if latents.dtype.kind not in "fiu":
        raise not_npy
    if latents.ndim == len(shape) - 1:
        latents = latents[None]
    if tuple(latents.shape) != tuple(shape):
        raise PipelineError(f"{path}: latents have shape {tuple(latents.shape)}, these settings need {tuple(shape)}")
    return np.asarray(latents, np.float32)


def latents_path(out: str | Path) -> Path:
    """`out.mp4` -> `out.latents.npy`."""
    return Path(out).with_suffix(".latents.npy")


def save_latents(out: str | Path, latents: np.ndarray, files: StagedFiles | None = None) -> Path:
    """The final latents as `out.latents.npy` (float32), whole or not at all (or staged in `files`)."""
    from vidax.zoo.video_io import save_npy

    return save_npy(latents_path(out), np.asarray(latents, np.float32), files)


def check_output_room(options: GenerateOptions, s: Any, latent_shape: Sequence[int] = ()) -> None:
    """Before any work: room on `--out`'s disk for the outputs of settings `s` (its frames, height,
    width and fps) and, asked, the latents of `latent_shape` (the writing process only)."""
    from vidax.zoo.compute.distributed import is_writer
    from vidax.zoo.video_io import check_room, output_bytes

    if not is_writer():
        return
    latents = math.prod(latent_shape) * 4 if options.save_latents and latent_shape else 0
    check_room(options.out, output_bytes(options.out, s.frames, s.height, s.width, s.fps) + latents)
