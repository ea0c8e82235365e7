"""`vidax-train lora` as one library call: `train_lora(TrainOptions(...))`.

    data folders -> samples (buckets, windows) -> cached latents and conditions (vidax.train.data, the family's
    encoders: vidax.train.families)
    frozen DiT(s) (the registry's dtype: bf16 for the real models; --weights-dtype int8/fp8) + fresh LoRA(s) (or
    --resume's) -> `steps` `train_step`s -> the LoRA file(s) (vidax.train.export), checkpoints every
    `checkpoint_every` steps, validation and samples every `validation_every` / `sample_every` steps
    (vidax.train.monitor) beside the losses and their plot in `<out stem>.train/`.

Every step's randomness (its rows, caption dropout, first-frame rows, expert, noise and noise levels) is named by
the seed and the step number alone, so a run resumed from a checkpoint continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vidax.train import data, placement
from vidax.train.export import FORMATS, save_lora
from vidax.train.families import Expert, TrainFamily, train_family
from vidax.train.lora import LoraConfig, init_lora, targeted
from vidax.train.monitor import Monitor
from vidax.train.placement import make_run_mesh, place_base
from vidax.train.objective import REMAT, SAMPLINGS, AdamW, Objective, range_share, train_step
from vidax.translator import VidaxError
from vidax.translator.output import write_file

EXPERT_CHOICES = ("high", "low", "both")


class TrainError(VidaxError, ValueError):
    """A training request that cannot run (the CLI prints it as one line)."""


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Every setting of one LoRA training run (None: the model's native value).

    Args:
      model: registered model name (`vidax-gen --list`): docs/TRAINING.md lists the families trained.
      data: folder(s) of clips / images with same-name `.txt` captions; repeats: how often each folder's samples
        count (one per folder, or one for all).
      out: the LoRA `.safetensors` to write (`--expert both`: `<stem>_high_noise` and `<stem>_low_noise`).
      weights: checkpoint folder or Hub repo (None: the registry's / the embedded model).
      rank, alpha, targets: the LoRA (alpha None: = rank; targets as PEFT's `target_modules`, None: the family's).
      steps, lr, batch, seed: the optimisation (AdamW, weight decay `weight_decay`).
      height, width, frames: the training size (None: the model's native one); buckets: aspect buckets at that
        area (False: every sample at that size); frame_stride, windows: how clips become samples.
      caption_dropout: the share of rows trained on the empty caption.
      first_frame_p: the share of rows given their first latent frame clean (TI2V-5B, LTX-2; None: the family's).
      expert: Wan2.2 A14B's `high`, `low` or `both` (None: both).
      format: "peft" (diffusers) or "comfy" keys.
      resume: a checkpoint `train_lora` wrote (`<out>.ckpt.npz`) to continue from.
      checkpoint_every: write the checkpoint every this many steps (and at the end); 0: at the end only.
      sampling, shift: noise-level sampling ("shift": musubi-tuner's shifted sigmoid; "uniform"; None: the family's,
        uniform for CogVideoX, shift for the others).
      dtype: the frozen base weights' dtype (None: the registry's); weights_dtype: "int8" / "fp8" keeps the
        base's block kernels 8-bit on the device.
      remat: what each block's checkpoint keeps (`objective.REMAT`).
      offload: the frozen base's blocks in host memory, brought to the device block by block, and each block's
        input in host memory until the backward pass (a base larger than the chip: Wan2.1-14B on a 16 GB TPU).
      dp, tp, sp: data, tensor and sequence parallel degrees.
      cache: the encodings' folder (None: `<first data folder>/.vidax-cache`).
      validation: a folder of held-out clips scored every `validation_every` steps at `validation_sigmas`.
      sample_prompts: a text file of prompts (one a line) generated every `sample_every` steps with
        `sample_steps` sampling steps.
      extra: the family's own settings by field name, as `GenerateOptions.extra` (`{"max_sequence_length": 256}`).
    """

    model: str
    data: Path | tuple[Path, ...]
    out: Path
    weights: str | None = None
    rank: int = 16
    alpha: float | None = None
    targets: tuple[str, ...] | None = None
    steps: int = 1000
    lr: float = 1e-4
    weight_decay: float = 0.01
    batch: int = 1
    seed: int = 0
    height: int | None = None
    width: int | None = None
    frames: int | None = None
    repeats: tuple[int, ...] = ()
    buckets: bool = True
    frame_stride: int = 1
    windows: int = 1
    caption_dropout: float = 0.0
    first_frame_p: float | None = None
    expert: str | None = None
    format: str = "peft"
    resume: Path | None = None
    checkpoint_every: int = 0
    sampling: str | None = None
    shift: float = 3.0
    dtype: str | None = None
    weights_dtype: str | None = None
    remat: str = "full"
    offload: bool = False
    dp: int = 1
    tp: int = 1
    sp: int = 1
    cache: Path | None = None
    validation: Path | None = None
    validation_every: int = 0
    validation_sigmas: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    sample_prompts: Path | None = None
    sample_every: int = 0
    sample_steps: int | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def folders(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in ((self.data,) if isinstance(self.data, (str, Path)) else self.data))

    def folder_repeats(self) -> list[int]:
        if not self.repeats:
            return [1] * len(self.folders)
        return list(self.repeats) * len(self.folders) if len(self.repeats) == 1 else list(self.repeats)

    def check(self) -> None:
        for name in ("steps", "batch", "dp", "tp", "sp", "frame_stride", "windows"):
            if getattr(self, name) < 1:
                raise TrainError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("checkpoint_every", "validation_every", "sample_every"):
            if getattr(self, name) < 0:
                raise TrainError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise TrainError(f"--lr must be a positive number, got {self.lr}")
        for name in ("caption_dropout", "first_frame_p"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise TrainError(f"--{name.replace('_', '-')} must be within [0, 1], got {value}")
        if not all(0.0 <= s < 1.0 for s in self.validation_sigmas) or not self.validation_sigmas:
            raise TrainError(f"--validation-sigmas must be noise levels in [0, 1), got {list(self.validation_sigmas)}")
        if self.repeats and len(self.repeats) not in (1, len(self.folders)) or any(r < 1 for r in self.repeats):
            raise TrainError(f"--repeats takes one count of at least 1 per --data folder (or one for all), got "
                             f"{list(self.repeats)} for {len(self.folders)} folder(s)")
        choices = {"format": (self.format, FORMATS), "timestep-sampling": (self.sampling or "shift", SAMPLINGS),
                   "remat": (self.remat, tuple(REMAT)), "expert": (self.expert or "both", EXPERT_CHOICES)}
        for flag, (value, allowed) in choices.items():
            if value not in allowed:
                raise TrainError(f"--{flag} must be one of {', '.join(allowed)}, got {value!r}")
        if self.offload and self.dp * self.tp * self.sp > 1:
            raise TrainError("--offload runs on one device (no --dp/--tp/--sp)")
        if self.batch % self.dp:
            raise TrainError(f"--batch {self.batch} must be a multiple of --dp {self.dp}")
        if not str(self.out).endswith(".safetensors"):
            raise TrainError(f"--out must name a .safetensors file, got {self.out}")
        for flag, path in (("--validation", self.validation), ("--sample-prompts", self.sample_prompts)):
            if path is not None and not Path(path).exists():
                raise TrainError(f"{flag} {path}: no such {'folder' if flag == '--validation' else 'file'}")

    def lora_config(self, family: TrainFamily) -> LoraConfig:
        return LoraConfig(self.rank, self.alpha, tuple(self.targets) if self.targets else family.default_targets)

    def recipe(self) -> dict:
        """What a checkpoint must agree on to be resumed (and what the LoRA file records)."""
        keep = ("model", "weights", "rank", "alpha", "targets", "lr", "weight_decay", "batch", "seed", "sampling",
                "shift", "dtype", "weights_dtype", "repeats", "buckets", "frame_stride", "windows",
                "caption_dropout", "first_frame_p", "expert", "extra")
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items() if k in keep}


Progress = Callable[[int, int, float, float], None]  # (step done, total, loss, steps per second)
Report = Callable[[str], None]  # a line for the user (validation losses, samples written)


@dataclasses.dataclass
class Denoiser:
    """One DiT being trained: its expert, module, frozen params, input builder and objective."""

    expert: Expert
    model: Any
    base: Any
    inputs: Any
    objective: Objective


@dataclasses.dataclass
class Prepared:
    """Everything a run needs before its first step (`prepare`)."""

    family: TrainFamily
    settings: Any  # the family's settings at the training size
    denoisers: list[Denoiser]
    samples: list[data.Sample]
    encoded: list[data.Encoded]
    empty_text: dict | None
    validation: list[data.Encoded]
    mesh: Any
    rules: Any
    first_frame_p: float

    @property
    def weights(self) -> list[int]:
        return [s.item.repeats for s in self.samples]


def prepare(options: TrainOptions, encoding: Callable[[int, int], None] | None = None) -> Prepared:
    """The frozen DiT(s) placed and the data encoded (from the cache when it can); `encoding(done, total)`
    after each sample encoded."""
    from vidax.zoo.generator.stages import Run
    from vidax.zoo.registry import make_pipeline

    options.check()
    gen = _generate_options(options)
    zoo_family = make_pipeline(options.model, gen)
    family = train_family(zoo_family)
    s = zoo_family.resolve_settings(gen)
    family.check()
    experts = _chosen(family.experts(s), options)
    config = options.lora_config(family)
    loaded = []
    for expert in experts:  # every target checked before any encoding
        part = zoo_family.component(expert.component)
        tree = zoo_family.load_tree(part.component, part.spec, part.subfolders, options.dtype or part.dtype)
        targeted(traverse_util.unflatten_dict(dict(tree), sep="/")["blocks"], config.targets)
        loaded.append((expert, part, tree))
    run = Run(zoo_family, gen)
    try:
        samples, encoded, empty, validation = _encode(family, run, s, options, encoding)
    finally:
        run.close()
    mesh = make_run_mesh(options.dp, options.tp, options.sp)
    rules = zoo_family.transformer_rules
    bf16 = options.dtype != "float32" and any(jnp.dtype(t.dtype) == jnp.bfloat16 for t in loaded[0][2].values())
    denoisers = []
    for expert, part, tree in loaded:
        model = zoo_family.build_dit(part, tree, s)
        # a bf16 base keeps the hidden state in bf16 between blocks (what the backward keeps of each block), as
        # the PyTorch trainers' bf16 DiTs do; fp32 keeps fp32 (the parity setting)
        objective = Objective(scale=config.scale, sampling=options.sampling or family.default_sampling,
                              shift=options.shift, low=expert.low,
                              high=expert.high, loss=family.loss(s), carry_dtype="bfloat16" if bf16 else None,
                              remat="offload" if options.offload else options.remat, stream=options.offload)
        base = place_base(model, tree, mesh, rules, options.weights_dtype, stream=options.offload)
        denoisers.append(Denoiser(expert, model, base, family.inputs(model, s), objective))
    p = family.first_frame_p if options.first_frame_p is None else options.first_frame_p
    return Prepared(family, s, denoisers, samples, encoded, empty, validation, mesh, rules, p)


def _generate_options(options: TrainOptions):
    from vidax.zoo.generator.options import GenerateOptions

    return GenerateOptions(model=options.model, prompt="", weights=options.weights, height=options.height,
                           width=options.width, frames=options.frames, seed=options.seed, release_stages=False,
                           weights_dtype=options.weights_dtype, extra=dict(options.extra))


def _chosen(experts: list[Expert], options: TrainOptions) -> list[Expert]:
    if len(experts) == 1:
        if options.expert is not None:
            raise TrainError(f"--expert is for two-expert models (Wan2.2 A14B): {options.model} has one DiT")
        return experts
    wanted = options.expert or "both"
    return experts if wanted == "both" else [e for e in experts if e.name.startswith(wanted)]


def _encode(family: TrainFamily, run, s, options: TrainOptions, encoding):
    """(samples, their encodings, the empty caption's text or None, the validation encodings)."""
    settings = {"model": options.model, "weights": str(options.weights), "format": 2, **family.encoding_settings(s)}
    framing = data.Framing(s.height, s.width, s.frames, family.grid, options.buckets, options.frame_stride,
                           options.windows, family.frame_step)
    cache = options.cache or options.folders[0] / data.CACHE_FOLDER

    def encode(sample, pixels):
        return family.encode(run, family.sized(s, *sample.size), pixels, sample.item.caption)

    samples = data.plan_samples(data.find_items(list(options.folders), options.folder_repeats()), framing)
    encoded = data.encode_samples(samples, settings, cache, encode, encoding)
    empty = None
    if options.caption_dropout > 0:
        empty = data.encode_caption("", settings, cache, lambda caption: family.encode_text(run, s, caption))
    validation = []
    if options.validation is not None:
        held = data.plan_samples(data.find_items([options.validation]), framing)
        validation = data.encode_samples(held, settings, cache, encode)
    cut = family.trim([e.cond for e in encoded + validation] + ([empty] if empty is not None else []))
    trimmed = lambda cond: {k: v[:cut[k]] if k in cut else v for k, v in cond.items()}  # noqa: E731
    encoded, validation = ([data.Encoded(e.latents, trimmed(e.cond)) for e in group] for group in (encoded, validation))
    return samples, encoded, empty if empty is None else trimmed(empty), validation


# --- each step's draws ---------------------------------------------------------------------------


def step_key(seed: int, step: int) -> jax.Array:
    """The key of step `step`'s noise and noise levels."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 1), step)


def step_expert(prep: Prepared, options: TrainOptions, step: int) -> int:
    """Which denoiser step `step` trains: with two, the high-noise one as often as its share of the noise levels
    (the share musubi-tuner's one-run A14B training gives it), from a generator named by (seed, step)."""
    if len(prep.denoisers) == 1:
        return 0
    high = prep.denoisers[0].objective
    share = range_share(dataclasses.replace(high, low=0.0, high=1.0), high.low, high.high)
    return 0 if np.random.default_rng([options.seed, step, 2]).random() < share else 1


def batch_arrays(prep: Prepared, options: TrainOptions, step: int) -> dict:
    """Step `step`'s batch (latents, conditions, `first_frame` rows), split over the mesh's data axis when there
    is one."""
    rows, dropped = data.batch_rows(prep.encoded, prep.weights, options.batch, options.seed, step,
                                    options.caption_dropout)
    batch = data.collate(prep.encoded, rows, dropped, prep.empty_text, prep.family.text_keys)
    rng = np.random.default_rng([options.seed, step, 3])
    batch["first_frame"] = (rng.random(options.batch) < prep.first_frame_p).astype(np.float32)
    batch.update(prep.family.extras(batch, rng, prep.settings))
    return place_batch(prep, batch)


def place_batch(prep: Prepared, batch: dict) -> dict:
    return placement.place_batch(prep.mesh, batch)


def mesh_context(prep: Prepared):
    """`use_mesh` of the run's mesh and DiT rules (nothing on one device)."""
    return placement.mesh_context(prep.mesh, prep.rules)


# --- the run ---------------------------------------------------------------------------------------


def out_paths(options: TrainOptions, prep: Prepared) -> list[Path]:
    """The LoRA file of each denoiser trained: `--out`, or with both A14B experts `<stem>_<expert>.safetensors`."""
    out = Path(options.out)
    if len(prep.denoisers) == 1:
        return [out]
    stem = out.name[: -len(".safetensors")]
    return [out.with_name(f"{stem}_{d.expert.name}.safetensors") for d in prep.denoisers]


def run_folder(out: Path) -> Path:
    """`style.safetensors` -> `style.train/` beside it: the losses, their plot and the samples."""
    out = Path(out)
    return out.with_name(out.name[: -len(".safetensors")] + ".train")


def train_lora(options: TrainOptions, progress: Progress | None = None, prep: Prepared | None = None,
               report: Report | None = None) -> list[Path]:
    """Train, checkpoint, validate and write the LoRA(s); returns the files written.

    Args:
      progress: called after every step with (step, total, loss, steps per second).
      prep: `prepare(options)`'s result, when the caller made it already.
      report: called with a line for each validation score and sample written.
    """
    options.check()
    prep = prep or prepare(options)
    config = options.lora_config(prep.family)
    adamw = AdamW(options.lr, options.weight_decay)
    if options.resume is not None:
        states, start = load_checkpoint(options.resume, options, prep, adamw)
    else:
        states, start = fresh_states(prep, config, options.seed, adamw), 0
    save = functools.partial(write_loras, options, prep, config)
    monitor = Monitor(options, prep, config, run_folder(options.out), save, report, resumed_at=start)
    began = time.perf_counter()
    for step in range(start, options.steps):
        index = step_expert(prep, options, step)
        d = prep.denoisers[index]
        batch = batch_arrays(prep, options, step)
        with mesh_context(prep):
            lora, opt_state, loss = train_step(d.model, d.inputs, d.objective, adamw, d.base, *states[index], batch,
                                               step_key(options.seed, step))
        states[index] = (lora, opt_state)
        done = step + 1
        monitor.step(done, float(loss), d.expert.name)
        if progress is not None:
            progress(done, options.steps, float(loss), (done - start) / (time.perf_counter() - began))
        monitor.after(done, states)
        if options.checkpoint_every and done % options.checkpoint_every == 0 and done < options.steps:
            save_checkpoint(checkpoint_path(options.out), states, done, options)
    save_checkpoint(checkpoint_path(options.out), states, options.steps, options)
    monitor.finish(options.steps, states)
    return write_loras(options, prep, config, states, out_paths(options, prep))


def fresh_states(prep: Prepared, config: LoraConfig, seed: int, adamw: AdamW) -> list[tuple]:
    """Each denoiser's fresh LoRA (PEFT's init, from the seed; the second expert's from its own key) and AdamW state."""
    out = []
    for i, d in enumerate(prep.denoisers):
        lora = init_lora(jax.random.fold_in(jax.random.key(seed), 1000 + i) if i else jax.random.key(seed),
                         d.base["blocks"], config)
        out.append((lora, adamw.init(lora)))
    return out


def write_loras(options: TrainOptions, prep: Prepared, config: LoraConfig, states, paths: list[Path]) -> list[Path]:
    settings = {**options.recipe(), "steps": options.steps,
                **{k: getattr(prep.settings, k) for k in ("height", "width", "frames")}}
    spec_of = {d.expert.component: prep.family.family.component(d.expert.component).spec for d in prep.denoisers}
    return [save_lora(path, jax.device_get(lora), config, options.format, settings={**settings, "expert": d.expert.name},
                      spec=spec_of[d.expert.component], group=prep.family.block_list)
            for path, d, (lora, _) in zip(paths, prep.denoisers, states)]


# --- checkpoints -----------------------------------------------------------------------------


def checkpoint_path(out: Path) -> Path:
    """`style.safetensors` -> `style.ckpt.npz` beside it."""
    out = Path(out)
    return out.with_name(out.name[: -len(".safetensors")] + ".ckpt.npz")


def save_checkpoint(path: Path, states, step: int, options: TrainOptions) -> Path:
    """Every denoiser's LoRA and optimiser state (leaves in jax's tree order) and the step, whole or not at all."""
    import io

    leaves = jax.tree.leaves(jax.device_get(list(states)))
    buffer = io.BytesIO()
    np.savez(buffer, step=np.asarray(step), recipe=np.asarray(json.dumps(options.recipe(), sort_keys=True)),
             **{f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)})
    return write_file(path, buffer.getvalue())


def load_checkpoint(path: Path, options: TrainOptions, prep: Prepared, adamw: AdamW):
    """(states, step) of a checkpoint made with the same recipe (one error line otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise TrainError(f"--resume {path}: no such checkpoint")
    with np.load(path) as saved:
        recipe = json.loads(str(saved["recipe"]))
        want = json.loads(json.dumps(options.recipe(), sort_keys=True))
        if recipe != want:
            diff = sorted(k for k in set(recipe) | set(want) if recipe.get(k) != want.get(k))
            raise TrainError(f"--resume {path}: made with other settings ({', '.join(diff)})")
        leaves = [saved[f"leaf_{i}"] for i in range(len(saved.files) - 2)]
        step = int(saved["step"])
    template = fresh_states(prep, options.lora_config(prep.family), 0, adamw)
    treedef = jax.tree.structure(template)
    if treedef.num_leaves != len(leaves):
        raise TrainError(f"--resume {path}: does not hold this LoRA's parameters")
    states = [tuple(s) for s in jax.tree.unflatten(treedef, [jnp.asarray(leaf) for leaf in leaves])]
    if step > options.steps:
        raise TrainError(f"--resume {path}: already at step {step}, past --steps {options.steps}")
    return states, step
