"""The family contract: what a model family supplies, as typed pieces that take values and return values.

A family (`zoo/<family>/family.py`, exporting `FAMILY`) subclasses `Family` and supplies only what
is its own. Each piece takes what it needs as arguments and returns what it makes; the runtime of
one generation (stage weights, host noise, mesh, progress) is the `Run` it is handed:

    configs    cached properties over `self.read_config(...)` (checkpoint first, the registry's
               `config` tables when there is no checkpoint yet: `--plan`)
    settings   `settings_class`, `flags`, `folder_settings()`, `check_settings(s)`, `latent_shape(s)`,
               `size_for_image(image, s)`, `image_roles()`
    encode     `encode(run, s, inputs) -> cond` (any pytree: text features, image condition, ...)
    schedule   `stepper(s, shape)`, `experts(s, timesteps)`, `step_knobs(s, stepper, i, expert)`;
               `schedule(s, shape)` bundles them as a `Schedule` value
    velocity   `dit_parts(s)`, `build_dit(part, tree, s)`, `predictor(s, expert, dit, step)` -> a
               frozen, hashable `predict(run_dit, latents, timestep, cond, knobs)` (CFG with
               `cfg_predict`)
    sample     `sample(run, s, latents, cond) -> latents`: one `denoise` pass by default; a family
               whose story differs (LTX-Video's two passes, LTX-2's I2V frame, Wan TI2V's first frame)
               composes `Denoisers`, `schedule` and `denoise` in its own short `sample`
    decode     `decode(run, s, latents) -> Decoded` (frames `[F, H, W, 3]` in [0, 1], audio if any)
    memory     `memory_job(options) -> planner.Job`

`vidax.zoo.generator.generation.generate_video` runs them top to bottom. What every family does the same way
lives in shared modules: settings resolution and checks here, stage weights and host noise in
`vidax.zoo.generator.stages`, the sampling loop with experts, offload and the mesh in `vidax.zoo.generator.denoise`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.translator import ModelEntry, load_registry
from vidax.translator import MODEL_FILE
from vidax.zoo.generator.denoise import Denoisers, Schedule, denoise
from vidax.zoo.weights.dit_file import check_dit_files, dit_file, load_dit_file
from vidax.zoo.weights.quantize import check_weights_dtype
from vidax.zoo.generator.options import GenerateOptions, load_latents, seeded_noise
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.progress import Progress
from vidax.zoo.weights.source import WeightsSource
from vidax.zoo.generator.stages import Run

# --sampler names -> the diffusers scheduler class each stands for (flow matching)
FLOW_SAMPLERS = {"euler": "FlowMatchEulerDiscreteScheduler", "unipc": "UniPCMultistepScheduler",
                 "dpm++": "DPMSolverMultistepScheduler"}
_FLOW_MODE = {"prediction_type": "flow_prediction", "use_flow_sigmas": True}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """What one generation runs with. Defaults come from the model's registry `settings`, then the
    checkpoint folder (its scheduler config), then the user's flags. Families subclass it with
    their own fields; a family flag sets the field of its name.

    Args:
      height, width, frames: the video size.
      steps: sampling steps.
      guidance: classifier-free guidance scale (<= 1: no negative branch).
      shift: flow shift of the schedule (None: the scheduler config's; flow-matching families).
      sampler: one of the family's `samplers` (flow matching: "euler", "unipc", "dpm++"; CogVideoX: "ddim",
        "dpm"); None: the folder's scheduler class.
      fps: frames per second of the MP4, and the model's input where the family conditions on it.
      negative_prompt: the negative prompt of the guidance branch.
    """

    height: int
    width: int
    frames: int
    steps: int = 50
    guidance: float = 5.0
    shift: float | None = None
    sampler: str | None = None
    fps: float = 16.0
    negative_prompt: str = ""

    @property
    def guided(self) -> bool:
        return self.guidance > 1.0


@dataclasses.dataclass(frozen=True)
class Flag:
    """A `vidax-gen` flag only one family has; its value lands in the settings field `field`.

    `kind` is float, int, str, bool (a `--x/--no-x` pair), or Path; `multiple` repeats it (a tuple);
    `image` marks a conditioning image (it goes to `GenerateOptions.images` under `field`).
    """

    name: str
    field: str
    kind: type
    help: str
    multiple: bool = False
    image: bool = False


@dataclasses.dataclass(frozen=True)
class DiTPart:
    """A component of the model (a denoiser: two for Wan2.2 A14B's experts): where its weights are."""

    component: str
    spec: str
    subfolders: tuple[str | None, ...] = (None,)
    dtype: str | None = None  # the registry's dtype for it (when the user gives no --dtype)
    files: tuple[str, ...] | None = None  # the registry's file globs (one release among several)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The request's conditioning inputs, read and checked: images as RGB uint8 `[H, W, 3]`."""

    prompt: str
    negative_prompt: str | None
    images: Mapping[str, np.ndarray]  # option name ("image", "last_image", ...) -> image


def cfg_predict(run: Callable, cond: tuple, uncond: tuple | None, scale, *, rescale: float = 0.0):
    """`run(*inputs)` for the prompt and (when guided) the negative prompt as one batch, then CFG.

    The two branches' inputs are joined on the batch axis (`sharding.cfg_batch`: on "data" when
    dp = 2) and the output split again. `uncond` None runs the prompt branch alone.
    """
    from vidax.zoo.samplers import guide
    from vidax.zoo.compute.sharding import cfg_batch, cfg_split

    if uncond is None:
        return run(*cond).astype(jnp.float32)
    out = run(*cfg_batch(cond, uncond)).astype(jnp.float32)
    positive, negative = cfg_split(out)
    return guide(positive, negative, scale, rescale=rescale)


@dataclasses.dataclass(frozen=True)
class Decoded:
    """What `decode` makes: float32 frames `[F, H, W, 3]` in [0, 1]; for models that make sound, the
    waveform `[channels, samples]` and its rate; `latents` when the final latents to save are not the
    sampler's (LTX-2: the video part of the joint tokens); `settings` the model adds to the sidecar."""

    frames: np.ndarray
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    latents: np.ndarray | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class ConfigNotFound(PipelineError):
    """A config the family needs is in neither the checkpoint nor the registry."""


class Family:
    """Base of every model family; see the module docstring for what a subclass supplies.

    Args:
      entry: the model's registry entry (its variant selected).
      options: the request (its weights source is resolved lazily: `--plan` needs configs only).
      source: an already resolved weights source (embedded models pass theirs).
    """

    name: ClassVar[str]
    settings_class: ClassVar[type[Settings]] = Settings
    flags: ClassVar[tuple[Flag, ...]] = ()
    samplers: ClassVar[tuple[str, ...]] = tuple(FLOW_SAMPLERS)
    dit_rules: ClassVar[Any] = None  # None: the shared TRANSFORMER_RULES
    size_multiple: ClassVar[int] = 16  # height and width are multiples of this (the reference's check_inputs)
    frame_step: ClassVar[int] = 4  # frames are frame_step * k + 1 (1: any count; see fit_sizes)
    default_negative_prompt: ClassVar[str] = ""
    # diffusers' `cache_context` names of a guided step's DiT calls (one per CFG branch; one name where
    # the reference pipeline batches both): the step-cache log's branches
    cache_contexts: ClassVar[tuple[str, ...]] = ("cond", "uncond")

    def __init__(self, entry: ModelEntry, options: GenerateOptions, source: WeightsSource | None = None):
        self.entry = entry
        self.name = entry.name
        self.options = options
        self._given_source = source
        self._select_recorded_variant()

    # --- sources and configs ---------------------------------------------------------------

    @cached_property
    def source(self) -> WeightsSource:
        """Where weights and configs come from: `--weights`, the embedded model, or the Hub (the
        diffusers-layout repo when there is one: the layout whose one repo holds every tower)."""
        if self._given_source is not None:
            return self._given_source
        if self.entry.embedded and self.options.weights is None:
            return importlib.import_module(self.entry.embedded).source()
        layout = "diffusers" if "diffusers" in self.entry.repos else self.entry.default_layout
        revision = self.entry.revision_of(layout) if self.options.weights is None else None
        default = self.entry.repo(layout) if self.entry.repos else None  # an embedded model has no repo
        return WeightsSource.resolve(self.options.weights, default, revision)

    @cached_property
    def source_or_none(self) -> WeightsSource | None:
        """The source when it resolves without a download (local, converted, cached); else None."""
        try:
            return self.source
        except Exception as err:  # offline, not cached: the registry's configs stand in
            from vidax.translator import TranslatorError

            if isinstance(err, (TranslatorError, PipelineError)):
                return None
            raise

    def read_config(self, name: str, *paths: str) -> dict | None:
        """A config: the first of `paths` in the checkpoint (converted folders: in it or its source),
        else the registry's `config.<name>` table, else None."""
        source = self.source_or_none
        if source is not None:
            found = source.read_json(*paths, component=name) if paths else None
            if found is not None:
                return found
        table = self.entry.config.get(name)
        return dict(table) if table is not None else None

    def require_config(self, name: str, *paths: str) -> dict:
        found = self.read_config(name, *paths)
        if found is None:
            where = self.source_or_none.label if self.source_or_none else "the registry"
            raise ConfigNotFound(f"{self.name}: no {name} config ({', '.join(paths) or name}) in {where}")
        return found

    def _select_recorded_variant(self) -> None:
        """A converted folder's recorded variant wins over the name's (`vidax-gen hunyuanvideo-1.5
        --weights ckpt` runs the variant `vidax-convert --variant` converted)."""
        weights = self.options.weights or (self._given_source.root if self._given_source else None)
        if weights is None or not self.entry.choices:
            return
        path = Path(str(weights)) / MODEL_FILE
        recorded = json.loads(path.read_text()).get("variant") if path.is_file() else None
        if recorded is None or recorded == self.entry.variant:
            return
        if recorded not in self.entry.choices:
            raise PipelineError(f"{path}: variant {recorded!r} is not one of {self.name}'s ({', '.join(self.entry.choices)})")
        base = load_registry()[self.entry.alias_of or self.entry.name]
        self.entry = dataclasses.replace(base.select(recorded), name=self.entry.name)

    # --- settings (override the hooks) -----------------------------------------------------

    def folder_settings(self) -> dict:
        """Settings the checkpoint folder decides (e.g. its scheduler's shift), over the registry's."""
        return {}

    def derived_settings(self, s: Settings) -> dict:
        """Defaults that follow from other settings (e.g. a sampler's companion knob), applied before the checks."""
        return {}

    def check_settings(self, s: Settings) -> None:
        """Family checks beyond the common ones (raise PipelineError)."""

    def check_images(self, s: Settings, images: Mapping[str, np.ndarray]) -> None:
        """Family checks of the conditioning inputs against the settings (raise PipelineError)."""

    def size_for_image(self, image: np.ndarray, s: Settings) -> tuple[int, int] | None:
        """(height, width) for an image-to-video request that gave no size (None: the native size)."""
        return None

    def image_roles(self) -> dict[str, bool]:
        """Image options this model takes (`image`, `last_image`, ...) -> whether each is required."""
        return {}

    def resolve_settings(self, options: GenerateOptions, images: Mapping[str, np.ndarray] | None = None) -> Settings:
        """Registry defaults <- the folder <- the user's flags; validated (one-line errors before any work)."""
        cls = self.settings_class
        fields = {f.name for f in dataclasses.fields(cls)}
        native = dict(self.entry.settings)
        preset = dict(self.entry.preset_settings)  # a preset's (a distilled LoRA's) settings win over the folder's
        unknown = sorted((set(native) | set(preset)) - fields)
        if unknown:
            raise PipelineError(f"{self.name}: registry settings {', '.join(unknown)} are not {self.name.split('-')[0]} "
                                f"settings ({', '.join(sorted(fields))})")
        native.setdefault("negative_prompt", self.default_negative_prompt)
        s = cls(**{**native, **self.folder_settings(), **preset})
        given = {k: getattr(options, k) for k in ("height", "width", "frames", "steps", "guidance", "shift",
                                                   "sampler", "fps", "negative_prompt")
                 if getattr(options, k) is not None}
        given.update(self._family_options(options))
        image = (images or {}).get("image")
        if image is not None and options.height is None and options.width is None:
            size = self.size_for_image(image, dataclasses.replace(s, **given))
            if size is not None:
                given.update(height=size[0], width=size[1])
        s = dataclasses.replace(s, **given)
        s = dataclasses.replace(s, **self.derived_settings(s))
        self._check_common(s)
        check_dit_files(options, self.name, self.entry.components)
        check_weights_dtype(options, self.entry.family)
        s = self.fit_sizes(s)
        self.check_settings(s)
        self.check_images(s, images or {})
        return s

    def fit_sizes(self, s: Settings) -> Settings:
        """The settings at the size the reference runs a request it accepts (e.g. Wan floors height and width
        to VAE x patch and frames to 4k+1); PipelineError for one it accepts but cannot run. Default: as asked."""
        return s

    def _family_options(self, options: GenerateOptions) -> dict:
        known = {flag.field for flag in self.flags}
        extra = dict(options.extra or {})
        unknown = sorted(set(extra) - known)
        if unknown:
            have = ", ".join(flag.name for flag in self.flags) or "none"
            raise PipelineError(f"{self.name} takes no {', '.join('--' + k.replace('_', '-') for k in unknown)} "
                                f"(its own flags: {have})")
        return extra

    def _check_common(self, s: Settings) -> None:
        if s.steps < 1:
            raise PipelineError(f"--steps must be at least 1, got {s.steps}")
        if s.sampler is not None and s.sampler not in self.samplers:
            raise PipelineError(f"unknown sampler {s.sampler!r} for {self.name} (choose from {', '.join(self.samplers)})")
        if s.fps <= 0:
            raise PipelineError(f"--fps must be positive, got {s.fps}")
        step = self.size_multiple
        for what, value in (("height", s.height), ("width", s.width), ("frames", s.frames)):
            if value < 1:
                raise PipelineError(f"--{what} must be positive, got {value}")
        for what, value in (("height", s.height), ("width", s.width)):
            if value % step:
                nearest = max(step, round(value / step) * step)
                raise PipelineError(f"--{what} {value} is not a multiple of {step} for this model; nearest valid: {nearest}")
        t = self.frame_step
        if (s.frames - 1) % t:
            nearest = max(1, round((s.frames - 1) / t) * t + 1)
            raise PipelineError(f"--frames {s.frames} is not of the form {t}k+1; nearest valid: {nearest}")

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        """`[1, C, F', H', W']` of the initial noise (the `--latents` layout)."""
        raise NotImplementedError

    # --- inputs -----------------------------------------------------------------------------

    def read_inputs(self, options: GenerateOptions) -> Inputs:
        """The request's images, read and checked against what the model takes."""
        from vidax.zoo.video_io import read_image

        roles = self.image_roles()
        given = {k: v for k, v in (options.images or {}).items() if v is not None}
        if options.image is not None:
            given["image"] = options.image
        for role in given:
            if role not in roles:
                what = "image-to-video conditioning" if role == "image" else f"--{role.replace('_', '-')}"
                raise PipelineError(f"{self.name} takes no {what} (it is {self._kind()})")
        for role, required in roles.items():
            if required and role not in given:
                raise PipelineError(f"{self.name} is an image-to-video model: give --{role.replace('_', '-')} PATH")
        return Inputs(options.prompt, None, {role: read_image(path) for role, path in given.items()})

    def _kind(self) -> str:
        return "text-to-video only" if not self.image_roles() else f"conditioned on {', '.join(self.image_roles())}"

    def initial_latents(self, s: Settings, options: GenerateOptions) -> np.ndarray:
        """`--latents`, else standard normal noise from the seed, drawn on the host."""
        shape = self.latent_shape(s)
        if options.latents is not None:
            return load_latents(options.latents, shape)
        return seeded_noise(options.seed, shape)

    # --- weights ----------------------------------------------------------------------------

    def folders(self, name: str) -> tuple[str | None, ...]:
        """The folders a registry component may sit in: every layout's, in a local model folder and in
        its repo (None: the root); `(name,)` for a component the registry does not list."""
        comp = self.entry.components.get(name) or self.entry.all_components.get(name)
        if comp is None:
            return (name,)
        layouts = list(self.entry.repos) or [None]
        return tuple(dict.fromkeys(comp.folder(layout, local) for layout in layouts for local in (True, False)))

    def config_paths(self, name: str, *files: str) -> list[str]:
        """`files` inside the component's own folder (`name/`, as diffusers repos and vidax-convert
        outputs hold it) and inside each of its registry folders."""
        folders = dict.fromkeys([name, *(f for f in self.folders(name) if f)])
        return [f"{folder}/{file}" for folder in folders for file in files]

    def component(self, name: str) -> DiTPart:
        """A registry component: its spec and the folders it may sit in (every layout's, local and Hub)."""
        comp = self.entry.components.get(name) or self.entry.all_components.get(name)
        if comp is None or comp.spec is None:
            raise PipelineError(f"{self.name}: the registry has no convertible component {name!r}")
        return DiTPart(name, comp.spec, self.folders(name), comp.dtype, comp.files(None))

    def load_tree(self, component: str, spec: str, subfolders: Sequence[str | None] = (None,),
                  dtype: str | None = None, *, progress: Progress | None = None, loras: tuple | None = None):
        """A component's host tree (mmapped where possible), not placed (`Run.load` places it); `loras`
        replaces the component's own adapters (`()`: the base, for a LoRA switched on the placed weights)."""
        part = self.entry.components.get(component)
        dtype = dtype or (part.dtype if part is not None else None)
        loras = self.adapters.get(component, ()) if loras is None else loras
        if dit_file(self.options, component) is not None:  # --transformer FILE
            return load_dit_file(dit_file(self.options, component), component, spec, dtype, progress, loras=loras)
        files = part.files(None) if part is not None else None
        return self.source.load(component, spec, subfolders, dtype=dtype, progress=progress or Progress(), files=files,
                                loras=loras)

    # --- LoRA adapters -------------------------------------------------------------------------

    @cached_property
    def adapters(self) -> dict[str, tuple]:
        """The LoRAs of each denoiser component (`--lora`, `--lora-2`), resolved and hashed; `prepare` reads it
        first, so a missing file or a second-expert LoRA on a one-expert model is one line before any work."""
        from vidax.translator.lora import resolve_for

        preset = self.entry.loras
        if any(preset.values()) and self.source.kind == "converted" and "loras" in self._recorded_model():
            preset = {}  # `vidax-convert PRESET` baked them in already
        requests = {option: (*preset.get(option, ()), *getattr(self.options, option)) for option in ("lora", "lora_2")}
        return resolve_for(self.name, self.entry.components, requests)

    def _recorded_model(self) -> dict:
        """A converted folder's `vidax_model.json` ({} when there is none)."""
        path = Path(self.source.root) / MODEL_FILE
        return json.loads(path.read_text()) if path.is_file() else {}

    def lora_settings(self) -> dict:
        """What a video's sidecar records of the LoRAs: per component, each one's source, strength and sha256."""
        if not self.adapters:
            return {}
        return {"loras": {component: [a.record() for a in found] for component, found in self.adapters.items()}}

    # --- the denoiser (override the hooks) --------------------------------------------------

    def dit_parts(self, s: Settings) -> list[DiTPart]:
        """The model's denoisers; the expert index of `experts` picks one per step."""
        raise NotImplementedError

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: Settings):
        """The DiT module for a converted tree (sizes from the tree or the configs)."""
        raise NotImplementedError

    def experts(self, s: Settings, timesteps: np.ndarray) -> list[int]:
        """Which denoiser runs at each step (one DiT: always 0)."""
        return [0] * len(timesteps)

    def predictor(self, s: Settings, expert: int, dit: Any, step: int):
        """A frozen (hashable) callable `predict(run, latents, timestep, cond, knobs) -> model output`
        for the loaded denoiser `dit` at `step` (a per-step branch set is a new configuration)."""
        raise NotImplementedError

    def cache_branches(self, s: Settings) -> tuple[str, ...]:
        """The `cache_contexts` a step of `s` calls the DiT under (unguided: the first only)."""
        return self.cache_contexts if self.needs_negative(s) else self.cache_contexts[:1]

    def needs_negative(self, s: Settings) -> bool:
        """Whether any step runs the negative prompt's branch (its text is encoded only then)."""
        return s.guided

    def step_knobs(self, s: Settings, stepper: Any, index: int, expert: int) -> Any:
        """Per-step values the predictor reads as data (default: the guidance scale)."""
        return {"scale": jnp.float32(s.guidance)}

    def schedule(self, s: Settings, latents_shape: tuple[int, ...]) -> Schedule:
        """One pass's schedule: `stepper`, the expert of each step, and `step_knobs` per step."""
        stepper = self.stepper(s, latents_shape)
        experts = tuple(self.experts(s, np.asarray(stepper.timesteps)))
        return Schedule(stepper, experts, partial(self.step_knobs, s, stepper))

    @property
    def transformer_rules(self):
        """The DiT's sharding rules (the shared `TRANSFORMER_RULES` unless the family has its own)."""
        from vidax.zoo.compute.sharding import TRANSFORMER_RULES

        return self.dit_rules or TRANSFORMER_RULES

    def scheduler_config(self) -> dict:
        """The folder's scheduler config (else the registry's `config.scheduler`)."""
        return self.read_config("scheduler", "scheduler/scheduler_config.json") or {}

    def stepper(self, s: Settings, latents_shape: tuple[int, ...]):
        """The folder's scheduler (or the `--sampler` in its place) on `s.steps` steps at `s.shift`."""
        from vidax.zoo.samplers import stepper_from_config

        config = dict(self.scheduler_config())
        if s.sampler is not None and config.get("_class_name") != FLOW_SAMPLERS[s.sampler]:
            config = {"_class_name": FLOW_SAMPLERS[s.sampler], "num_train_timesteps":
                      config.get("num_train_timesteps", 1000)}
            if s.sampler != "euler":
                config.update(_FLOW_MODE)
        if s.shift is not None:
            config.update(flow_shift=s.shift, shift=s.shift)
        # diffusers' FlowMatchEuler and UniPC (flow sigmas) take a pipeline's own grid; DPM++ does not
        takes = config.get("_class_name") in (FLOW_SAMPLERS["euler"], FLOW_SAMPLERS["unipc"]) and not config.get(
            "use_karras_sigmas")
        sigmas = self.base_sigmas(s) if takes else None
        return stepper_from_config(config, s.steps, seq_len=self.tokens(s), sigmas=sigmas)

    def base_sigmas(self, s: Settings) -> np.ndarray | None:
        """Unshifted sigmas the reference pipeline passes to its flow-match Euler scheduler (None: its own)."""
        return None

    def tokens(self, s: Settings) -> int | None:
        """Video tokens per sample (for dynamically shifted schedules)."""
        return None

    def heads(self) -> int:
        """Attention heads of the DiT (tp and sp must divide them)."""
        raise NotImplementedError

    # --- the shared steps -------------------------------------------------------------------

    def encode(self, run: Run, s: Settings, inputs: Inputs) -> Any:
        """Text (and image) conditioning, as the predictor takes it."""
        raise NotImplementedError

    def sample(self, run: Run, s: Settings, latents: np.ndarray, cond: Any) -> jax.Array:
        """The denoising story from the initial latents to the final ones (default: one pass)."""
        with Denoisers(run, self, s) as denoisers:
            return denoise(run, denoisers, self.schedule(s, latents.shape), latents, cond, partial(self.predictor, s))

    def decode(self, run: Run, s: Settings, latents: jax.Array) -> Decoded:
        """Final latents -> float32 frames `[F, H, W, 3]` in [0, 1] (and whatever else the model makes)."""
        raise NotImplementedError

    def memory_job(self, options: GenerateOptions):
        """What the memory planner needs at the requested size (configs only, nothing loaded)."""
        raise NotImplementedError

    def check_multiprocess_source(self) -> None:
        """Across processes the weights come from a converted folder: each process then maps only the
        slices its own devices hold (a checkpoint converted on the fly would pass whole tensors
        through every host)."""
        from vidax.zoo.compute.distributed import multiprocess

        if multiprocess() and self.source.kind != "converted":
            raise PipelineError(f"a multi-process run reads a vidax-convert output folder (each process maps only its "
                                f"own slices); {self.source.label} is a {self.source.kind}: convert it first with "
                                f"`vidax-convert {self.name} --out DIR` and pass --weights DIR on every host")

    def make_mesh(self, options: GenerateOptions):
        """The DiT's mesh (None on one device); encoders and VAE run on one device."""
        from vidax.zoo.compute.mesh import check_heads, make_mesh

        from vidax.zoo.compute.distributed import multiprocess

        dp, tp, sp = (1 if d is None else d for d in (options.dp, options.tp, options.sp))
        check_heads(self.heads(), tp, sp)
        if multiprocess() and dp * tp * sp != jax.device_count():
            raise PipelineError(f"a multi-process run spans all {jax.device_count()} devices of its "
                                f"{jax.process_count()} processes: dp*tp*sp = {dp * tp * sp} must equal it")
        mesh = make_mesh(dp, tp, sp)  # a clear error when the devices do not suffice
        return mesh if mesh.size > 1 else None
