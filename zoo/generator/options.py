"""Family-agnostic pipeline pieces: options, progress and stage timing, weights sources, latents I/O.

A family (`zoo/<family>/family.py`, run by `vidax.zoo.generator.generation`) reaches its weights and the stage
bookkeeping through these, mostly by way of the `Run` it is handed (`vidax.zoo.generator.stages`):

    source = WeightsSource.resolve(options.weights, default_repo)   # converted DIR, folder or repo id
    tree = source.load("transformer", "wan/transformer", subfolders, dtype="float32")
    with timer.stage("text encode"): ...
    release(device_tree)                                            # before the next stage needs memory

`generate` is the library call behind `vidax-gen`: it chooses the layout, builds the family, runs
`vidax.zoo.generator.generation.generate_video` and writes the outputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import numbers
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from vidax.translator import SourceError, convert, load
from vidax.translator import VidaxError
from vidax.translator import MANIFEST, read_manifest
from vidax.translator import looks_like_repo
from vidax.translator.lora import LoraError, merge_converted, parse_request
from vidax.translator.output import StagedFiles, staged_files


class PipelineError(VidaxError, ValueError):
    """A generation request the pipeline cannot honour (bad size, frame count, latents, image)."""


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


class Progress:
    """Progress hooks a pipeline calls; the default does nothing (the CLI shows rich bars).

    `begin(stage, total)` opens a stage (total: steps or bytes, None when unknown), `advance(stage,
    amount, note)` moves it, `end(stage, seconds)` closes it.
    """

    def begin(self, stage: str, total: int | None = None) -> None:
        pass

    def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
        pass

    def end(self, stage: str, seconds: float) -> None:
        pass


class StageTimer:
    """Wall time per named stage, reported through `Progress`; results are blocked on before the clock stops."""

    def __init__(self, progress: Progress | None = None):
        self.progress = progress or Progress()
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[None]:
        self.progress.begin(name, total)
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.times[name] = self.times.get(name, 0.0) + seconds
            self.progress.end(name, seconds)


def release(tree: Any) -> None:
    """Free the device buffers of a finished stage's weights now, not when Python gets to them."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted():
            leaf.delete()


# --- weights sources -------------------------------------------------------------------------


# Files besides the weights that a pipeline reads: configs, scheduler, tokenizers (official Wan
# keeps its tokenizer under google/umt5-xxl/).
CONFIG_PATTERNS = ("*.json", "*/*.json", "*/*.model", "*/*.txt", "*/*.jinja", "google/*/*")


def _is_converted(folder: Path) -> bool:
    return (folder / MANIFEST).is_file() or any(folder.glob(f"*/{MANIFEST}"))


@dataclasses.dataclass(frozen=True)
class WeightsSource:
    """Where a model's weights and configs come from.

    kind "converted": a `vidax-convert` output (one subfolder per component with a manifest);
    "folder": a local model folder in official or diffusers layout; "file": one checkpoint file
    (configs then come from its header or the registry); "repo": a Hub repo id, whose configs are
    fetched into the Hugging Face cache and weights converted through the translator.
    """

    kind: str
    root: Path | None
    repo: str | None = None
    revision: str | None = None

    @classmethod
    def resolve(cls, weights: str | Path | None, default_repo: str | None, revision: str | None = None) -> "WeightsSource":
        """The source named by `--weights` (default: the model's registered repo)."""
        text = str(weights) if weights is not None else default_repo
        if text is None:
            raise SourceError("no --weights given and the model has no default repo")
        path = Path(text).expanduser()
        if path.is_dir():
            return cls("converted" if _is_converted(path) else "folder", path)
        if path.is_file():  # one checkpoint file (LTX-Video's official single files): converted on the fly
            return cls("file", path)
        if looks_like_repo(text):
            return cls("repo", _fetch_configs(text, revision), repo=text, revision=revision)
        raise SourceError(f"{text}: no such folder, and not a Hub repo id (org/name)")

    @property
    def label(self) -> str:
        """What a sidecar records: the folder, or `org/name@commit` for a Hub repo (its cached snapshot)."""
        if self.kind != "repo":
            return str(self.root)
        commit = self.root.name if self.root is not None and self.root.parent.name == "snapshots" else self.revision
        return f"{self.repo}@{commit}" if commit else self.repo

    def config_root(self, component: str = "") -> Path | None:
        """The folder holding configs: the model root, or for a converted DIR the source it records
        (the component's own manifest first, else any component's)."""
        if self.kind != "converted":
            return self.root
        manifests = [self.root / component / MANIFEST, self.root / MANIFEST, *sorted(self.root.glob(f"*/{MANIFEST}"))]
        for manifest in manifests:
            if manifest.is_file():
                recorded = read_manifest(manifest.parent)  # "configs": a DiT converted from its own file (--transformer)
                origin = str(recorded.get("configs") or recorded.get("source", {}).get("origin", ""))
                found = _origin_root(origin)
                if found is not None:
                    return found
        return None

    def read_json(self, *relative: str, component: str = "") -> dict | None:
        """The first of `relative` JSON files found (converted DIR: in it, then in its recorded source)."""
        roots = [self.root] if self.kind == "converted" else []
        roots += [r for r in [self.config_root(component)] if r is not None]
        for root in roots:
            for rel in relative:
                if (root / rel).is_file():
                    return json.loads((root / rel).read_text())
        return None

    def find(self, *relative: str, component: str = "") -> Path | None:
        """The first of `relative` paths (files or folders) that exists, searched like `read_json`."""
        roots = [self.root] if self.kind == "converted" else []
        roots += [r for r in [self.config_root(component)] if r is not None]
        for root in roots:
            for rel in relative:
                if (root / rel).exists():
                    return root / rel
        return None

    def load(self, component: str, spec: str, subfolders: Sequence[str | None] = (None,), *,
             dtype: str | None = None, progress: Progress | None = None,
             files: Sequence[str] | None = None, loras: Sequence = ()) -> Mapping[str, np.ndarray]:
        """The host tree of one component (mmapped where the source allows).

        Args:
          component: name in a converted DIR (`transformer`, `vae`, `text_encoder`, ...).
          spec: conversion spec name for folders and repos (`wan/transformer`).
          subfolders: folders inside the model root to try in order (None = the root; the spec's
            file globs then find `transformer/...` themselves).
          dtype: override the spec's default dtype.
          progress: reports a "convert COMPONENT" stage in MiB (checkpoints converted on the fly).
          files: globs replacing the spec's (the registry component's own file).
          loras: `vidax.translator.lora.Adapter`s merged into the checkpoint as it is converted.
        """
        source = self.repo if self.kind == "repo" else self.root
        if self.kind == "converted":
            folder = self.root / component
            if (folder / MANIFEST).is_file():
                tree = load(folder)
                tree = tree if dtype is None else {p: _cast(a, dtype) for p, a in tree.items()}
                # LoRAs merge in the target layout; the recorded source is read for its headers only
                return merge_converted(tree, read_manifest(folder), list(loras)) if loras else tree
            # a component vidax-convert did not write is converted from the source the others came from
            source = self.config_root(component)
            if source is None:
                raise SourceError(f"{self.root}: converted folder has no {component}/ and records no source to convert it from")
        first_error = None
        for subfolder in subfolders:
            try:
                lazy = convert(spec, source, dtype=dtype, revision=self.revision, subfolder=subfolder, lazy=True,
                               files=files, loras=loras)
            except SourceError as err:
                first_error = first_error or err
                continue
            return _materialize(lazy, f"convert {component}", progress or Progress())
        raise first_error


    def shapes(self, component: str, spec: str, subfolders: Sequence[str | None] = (None,)) -> dict[str, tuple]:
        """The converted tree's leaf shapes, without reading the weights (Hub: the safetensors headers)."""
        if self.kind == "converted" and (self.root / component / MANIFEST).is_file():
            return {p: tuple(a.shape) for p, a in load(self.root / component).items()}
        source = self.repo if self.kind == "repo" else (self.config_root(component) if self.kind == "converted"
                                                         else self.root)
        first_error = None
        for subfolder in subfolders:
            try:
                lazy = convert(spec, source, revision=self.revision, subfolder=subfolder, lazy=True,
                               headers_only=self.kind == "repo")
            except SourceError as err:
                first_error = first_error or err
                continue
            return dict(lazy.shapes())
        raise first_error


def _materialize(lazy, stage: str, progress: Progress) -> dict[str, np.ndarray]:
    """Every leaf of a planned conversion, with progress in MiB (small leaves round up to count)."""
    progress.begin(stage, max(1, lazy.nbytes >> 20))
    start, tree = time.perf_counter(), {}
    for path in lazy:
        tree[path] = lazy[path]
        progress.advance(stage, tree[path].nbytes >> 20)
    progress.end(stage, time.perf_counter() - start)
    return tree


def _cast(array: np.ndarray, dtype: str) -> np.ndarray:
    """A converted leaf under a dtype override: "float32" upcasts every float leaf; otherwise the
    converted folder's own dtype policy stands (it already chose bf16 and kept fp32 where needed)."""
    if dtype == "float32" and np.issubdtype(array.dtype, np.floating) and array.dtype != np.float32:
        return array.astype(np.float32)
    if dtype == "float32" and array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    return array


def _origin_root(origin: str) -> Path | None:
    if origin.startswith("hf://"):
        return _fetch_configs(origin[len("hf://"):], None)
    path = Path(origin)
    if path.is_file():
        path = path.parent
    # a component folder (`.../transformer`) sits inside the model root that holds model_index.json
    for folder in (path, path.parent):
        if (folder / "model_index.json").is_file() or (folder / "config.json").is_file():
            return folder
    return path if path.is_dir() else None


def _fetch_configs(repo: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=list(CONFIG_PATTERNS)))
    except LocalEntryNotFoundError:
        raise SourceError(f"{repo}: not in the local Hugging Face cache and the Hub is unreachable or offline") from None
    except HfHubHTTPError as err:
        raise SourceError(f"{repo}: Hub download failed ({str(err).splitlines()[0]})") from None


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


# --- memory plan and layout choice ---------------------------------------------------------------


def _layout_given(options: GenerateOptions) -> bool:
    return any(v is not None for v in (options.tp, options.sp, options.dp, options.offload_chunk))


@dataclasses.dataclass
class LayoutPlan:
    """The memory planner's answer for one request.

    rows: `(Layout, Prediction, fits)`, fastest first (one row: the layout the flags gave).
    chosen: the fastest row that fits, or None.
    devices, device_bytes: what it planned for.
    size: the video it planned for ("832x480, 81 frames").
    idle: devices that even the largest layout of `rows` leaves without work.
    given: whether the rows are the layout the flags gave.
    """

    rows: list
    chosen: tuple | None
    devices: int
    device_bytes: int
    size: str
    idle: int
    given: bool = False

    def idle_note(self) -> str:
        """Why some devices would get no work ("" when every one can)."""
        if not self.idle:
            return ""
        used = self.devices - self.idle
        why = (f"the layout given uses {used}" if self.given else f"layouts use at most {used} (tp and sp split "
               "the attention heads in powers of two, dp is 1 or 2)")
        return f"{self.idle} of the {self.devices} devices would stay idle: {why}"


def plan_layouts(pipeline: Any, options: GenerateOptions, devices: int | None = None,
                 device_bytes: int | None = None) -> LayoutPlan:
    """The memory planner's table for this model and size, for the layout flags given (`--tp/--sp/--dp/
    --offload-chunk`: that layout alone, checked as a run would check it) or else every candidate.
    Devices and their memory default to the local backend's.
    """
    from vidax.zoo.compute.distributed import multiprocess
    from vidax.zoo.compute.planner import device_memory_bytes, plan

    if not hasattr(pipeline, "memory_job"):
        raise PipelineError(f"{options.model}: this family has no memory model for --plan yet")
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, numbers.Integral) or devices < 1):
        raise PipelineError(f"--devices must be a positive integer, got {devices!r}")
    if device_bytes is not None and device_bytes <= 0:
        raise PipelineError(f"--device-memory must be positive, got {device_bytes / 2**30:g} GiB")
    local_devices, local_bytes = device_memory_bytes()
    devices, device_bytes = devices or local_devices, device_bytes or local_bytes
    job = pipeline.memory_job(options)
    s = pipeline.resolve_settings(options)
    if _layout_given(options):
        rows = [_given_layout(job, options, devices, device_bytes)]
        chosen = rows[0] if rows[0][2] else None
    else:
        rows, chosen = plan(job, devices, device_bytes, options.release_stages, all_devices=multiprocess())
    idle = devices - max((row[0].devices for row in rows), default=0)
    return LayoutPlan(rows, chosen, devices, device_bytes, f"{s.width}x{s.height}, {s.frames} frames", idle,
                      _layout_given(options))


def _given_layout(job: Any, options: GenerateOptions, devices: int, device_bytes: int) -> tuple:
    """The row of the layout the flags name (1 for a degree left unset), refused as a run would refuse it."""
    from vidax.zoo.compute.distributed import multiprocess
    from vidax.zoo.compute.mesh import check_heads
    from vidax.zoo.compute.planner import Layout, predict

    layout = Layout(options.dp or 1, options.tp or 1, options.sp or 1, options.offload_chunk)
    check_heads(job.dit.heads, layout.tp, layout.sp)
    if layout.devices > devices or (multiprocess() and layout.devices != devices):
        raise PipelineError(f"dp*tp*sp = {layout.dp}*{layout.tp}*{layout.sp} = {layout.devices} devices; "
                            f"the plan is for {devices} (--devices N plans for more)")
    prediction = predict(job, layout, options.release_stages)
    return layout, prediction, prediction.total <= device_bytes


def choose_layout(pipeline: Any, options: GenerateOptions) -> tuple[GenerateOptions, str]:
    """Fill in tp/sp/dp/offload: the user's flags when given, else the planner's fastest fitting layout.

    Returns the options to run with and a line saying what was chosen and why.
    """
    if _layout_given(options) or not hasattr(pipeline, "memory_job"):
        ones = {k: getattr(options, k) or 1 for k in ("tp", "sp", "dp")}
        return dataclasses.replace(options, **ones), "as given"
    planned = plan_layouts(pipeline, options)
    rows, chosen, devices, device_bytes = planned.rows, planned.chosen, planned.devices, planned.device_bytes
    if chosen is None:
        smallest = min(rows, key=lambda row: row[1].total)
        raise PipelineError(
            f"{options.model} at this size needs about {smallest[1].total / 2**30:.1f} GiB per device even with "
            f"{smallest[0].describe()}; {devices} device(s) have {device_bytes / 2**30:.1f} GiB (see --plan)")
    from vidax.zoo.compute.distributed import multiprocess

    if jax.default_backend() == "cpu" and not multiprocess():  # CPU "devices" share the host's cores: spread only when one does not fit
        single = next(row for row in rows if row[0].devices == 1 and row[0].offload_chunk is None)
        chosen = single if single[2] else chosen
    layout, prediction, _ = chosen
    chosen_options = dataclasses.replace(
        options, tp=layout.tp, sp=layout.sp, dp=layout.dp, offload_chunk=layout.offload_chunk)
    idle = f"; {devices - layout.devices} of the {devices} devices idle" if layout.devices < devices else ""
    return chosen_options, (f"{layout.describe()} chosen by the memory planner "
                            f"(predicted {prediction.total / 2**30:.2f} of {device_bytes / 2**30:.1f} GiB per device{idle})")


# --- the library call behind vidax-gen --------------------------------------------------------


def generate(options: GenerateOptions, progress: Progress | None = None, *, cache: Any = None) -> GenerateResult:
    """Build the model's pipeline, generate, and write the video, its sidecar JSON and (asked) the latents.

    Args:
      options: every setting (`GenerateOptions`, checked when built); the output path is checked (a
        writable folder, and room for the output's estimate once the size is known) before any work.
      progress: hooks for progress display (the CLI passes rich bars). A hook may raise (Ctrl-C's
        KeyboardInterrupt, a cancelled job) to stop the run: the outputs are committed only after the
        last hook returns, so a stopped run writes nothing.
      cache: a `vidax.zoo.generator.stages.StageCache` whose placed weights this run reuses and adds to (the
        server keeps one for its life); None: each stage's weights are released when it ends.

    Returns:
      The result, with `settings["outputs"]` naming the files written.
    """
    from vidax.zoo.compute.distributed import agree, is_writer, request_record, run_guard, same_everywhere
    from vidax.zoo.generator.generation import generate_video
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.compute.runtime import configure_compile_cache
    from vidax.zoo.video_io import check_output_path

    timer = StageTimer(progress)
    try:
        same_everywhere("request", lambda: request_record(options))  # several processes: all asked for the same run
        check_output_path(options.out, writable=is_writer())
        configure_compile_cache(options.compile_cache)
        with timer.stage("load"):
            pipeline = make_pipeline(options.model, options)
            pipeline.source  # the weights must be reachable before a layout is planned for them
        options, choice = choose_layout(pipeline, options)
    except BaseException as err:  # every process learns of it (multi-process runs), then it is raised
        agree(err, "preparation")
        raise
    with run_guard():  # an error this process alone hits stops its peers too
        result = generate_video(pipeline, options, progress, cache=cache)  # agrees once its preparation is over
    result.times = {**timer.times, **result.times}
    if is_writer():  # one process writes the outputs
        write_outputs(options, result, timer, choice)
    return result


def write_outputs(options: GenerateOptions, result: GenerateResult, timer: StageTimer, choice: str) -> None:
    """The video (and its audio), the latents when asked, and the sidecar: written under temporary names
    in the "write" stage and renamed into place together after it ends (a full disk, an error or an
    interrupt leaves none of them)."""
    from vidax.zoo.video_io import audio_path, sidecar_path, write_frames, write_sidecar

    outputs = {"video": str(options.out)}
    if result.audio is not None:  # muxed into the MP4 (AAC), or lossless beside a .npy
        lossless = Path(options.out).suffix.lower() == ".npy"
        outputs["audio"] = str(audio_path(options.out) if lossless else options.out)
        outputs["sample_rate"] = result.sample_rate
    with staged_files() as files, timer.stage("write"):
        start = time.perf_counter()
        write_frames(options.out, result.frames, result.fps, audio=result.audio, sample_rate=result.sample_rate,
                     files=files)
        if options.save_latents:
            outputs["latents"] = str(save_latents(options.out, result.latents, files))
        result.times["write"] = time.perf_counter() - start
        outputs["sidecar"] = str(sidecar_path(options.out))
        result.settings = {**result.settings, "outputs": outputs, "stage_seconds": result.times,
                           "layout_choice": choice}
        write_sidecar(options.out, result.settings, files)
    result.times["write"] = timer.times["write"]


def check_output_room(options: GenerateOptions, s: Any, latent_shape: Sequence[int] = ()) -> None:
    """Before any work: room on `--out`'s disk for the outputs of settings `s` (its frames, height,
    width and fps) and, asked, the latents of `latent_shape` (the writing process only)."""
    from vidax.zoo.compute.distributed import is_writer
    from vidax.zoo.video_io import check_room, output_bytes

    if not is_writer():
        return
    latents = math.prod(latent_shape) * 4 if options.save_latents and latent_shape else 0
    check_room(options.out, output_bytes(options.out, s.frames, s.height, s.width, s.fps) + latents)
