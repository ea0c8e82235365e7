"""`vidax-train lora` as one library call: `train_lora(TrainOptions(...))`.

    data folder -> cached latents and text embeddings (vidax.train.data)
    frozen DiT (the registry's dtype: bf16 for the real models) + fresh LoRA (or --resume's) -> `steps`
    `train_step`s -> the LoRA file (vidax.train.export), checkpoints every `checkpoint_every` steps.

Every step's randomness (its rows, noise and noise levels) is named by the seed and the step number alone,
so a run resumed from a checkpoint continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec

from vidax.train import data
from vidax.train.export import FORMATS, save_lora
from vidax.train.lora import DEFAULT_TARGETS, LoraConfig, init_lora, targeted
from vidax.train.objective import SAMPLINGS, AdamW, Objective, train_step
from vidax.translator import VidaxError
from vidax.translator.output import write_file


class TrainError(VidaxError, ValueError):
    """A training request that cannot run (the CLI prints it as one line)."""


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """Every setting of one LoRA training run (None: the model's native value).

    Args:
      model: registered model name (`vidax-gen --list`); Wan 2.1 / 2.2 single-expert DiTs.
      data: folder of clips / images with same-name `.txt` captions.
      out: the LoRA `.safetensors` to write.
      weights: checkpoint folder or Hub repo (None: the registry's / the embedded model).
      rank, alpha, targets: the LoRA (alpha None: = rank; targets as PEFT's `target_modules`).
      steps, lr, batch, seed: the optimisation (AdamW, weight decay `weight_decay`).
      height, width, frames: the training size (None: the model's native one).
      format: "peft" (diffusers) or "comfy" keys.
      resume: a checkpoint `train_lora` wrote (`<out>.ckpt.npz`) to continue from.
      checkpoint_every: write the checkpoint every this many steps (and at the end); 0: at the end only.
      sampling, shift: noise-level sampling ("shift": musubi-tuner's shifted sigmoid; "uniform").
      dtype: the frozen base weights' dtype (None: the registry's).
      dp, tp, sp: data, tensor and sequence parallel degrees.
      cache: the encodings' folder (None: `<data>/.vidax-cache`).
    """

    model: str
    data: Path
    out: Path
    weights: str | None = None
    rank: int = 16
    alpha: float | None = None
    targets: tuple[str, ...] = DEFAULT_TARGETS
    steps: int = 1000
    lr: float = 1e-4
    weight_decay: float = 0.01
    batch: int = 1
    seed: int = 0
    height: int | None = None
    width: int | None = None
    frames: int | None = None
    format: str = "peft"
    resume: Path | None = None
    checkpoint_every: int = 0
    sampling: str = "shift"
    shift: float = 3.0
    dtype: str | None = None
    dp: int = 1
    tp: int = 1
    sp: int = 1
    cache: Path | None = None

    def check(self) -> None:
        for name in ("steps", "batch", "dp", "tp", "sp"):
            if getattr(self, name) < 1:
                raise TrainError(f"--{name} must be at least 1, got {getattr(self, name)}")
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise TrainError(f"--lr must be a positive number, got {self.lr}")
        if self.format not in FORMATS:
            raise TrainError(f"--format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.sampling not in SAMPLINGS:
            raise TrainError(f"--timestep-sampling must be one of {', '.join(SAMPLINGS)}, got {self.sampling!r}")
        if self.checkpoint_every < 0:
            raise TrainError(f"--checkpoint-every must be 0 or more, got {self.checkpoint_every}")
        if self.batch % self.dp:
            raise TrainError(f"--batch {self.batch} must be a multiple of --dp {self.dp}")
        if not str(self.out).endswith(".safetensors"):
            raise TrainError(f"--out must name a .safetensors file, got {self.out}")

    def lora_config(self) -> LoraConfig:
        return LoraConfig(self.rank, self.alpha, tuple(self.targets))

    def recipe(self) -> dict:
        """What a checkpoint must agree on to be resumed (and what the LoRA file records)."""
        keep = ("model", "weights", "rank", "alpha", "targets", "lr", "weight_decay", "batch", "seed", "sampling",
                "shift", "dtype")
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items() if k in keep}


Progress = Callable[[int, int, float, float], None]  # (step done, total, loss, steps per second)


@dataclasses.dataclass
class Prepared:
    """Everything a run needs before its first step (`prepare`)."""

    model: Any
    base: Any
    encoded: list[data.Encoded]
    settings: dict
    mesh: Any
    rules: Any


def prepare(options: TrainOptions) -> Prepared:
    """The frozen DiT placed and the data encoded (from the cache when it can)."""
    from vidax.zoo.compute.mesh import make_mesh
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.generator.stages import Run

    options.check()
    gen = GenerateOptions(model=options.model, prompt="", weights=options.weights, height=options.height,
                          width=options.width, frames=options.frames, seed=options.seed, release_stages=False)
    family = make_pipeline(options.model, gen)
    if family.entry.family != "wan" or family.vace or family.model.two_experts or family.model.transformer.has_image:
        raise TrainError(f"{options.model}: vidax-train lora trains Wan 2.1 / 2.2 text-to-video DiTs with one expert")
    s = family.resolve_settings(gen)
    settings = {"model": options.model, "weights": str(options.weights), "height": s.height, "width": s.width,
                "frames": s.frames, "max_sequence_length": s.max_sequence_length}
    part = family.dit_parts(s)[0]
    tree = family.load_tree(part.component, part.spec, part.subfolders, options.dtype or part.dtype)
    model = family.build_dit(part, tree, s)
    targeted(traverse_util.unflatten_dict(dict(tree), sep="/")["blocks"], options.targets)  # before any encoding
    encoded = _encode(family, Run(family, gen), s, options, settings)
    mesh = make_mesh(options.dp, options.tp, options.sp) if options.dp * options.tp * options.sp > 1 else None
    rules = family.transformer_rules
    return Prepared(model, _place(model, tree, mesh, rules), encoded, settings, mesh, rules)


def _encode(family, run, s, options: TrainOptions, settings: dict) -> list[data.Encoded]:
    from vidax.zoo.parts.wan_vae import WanVAE, normalize_latents

    items = data.find_items(options.data)
    vae = WanVAE(family.model.vae)
    part = family.component("vae")

    def encode_video(video):
        params = run.load(part.component, part.spec, part.subfolders)
        return normalize_latents(family.model.vae, vae.encode(params, jnp.asarray(video)))

    def encode_text(caption):
        return family.encode_prompts(run, caption, None, s.max_sequence_length)

    try:
        return data.encode_items(items, settings, options.cache or options.data / data.CACHE_FOLDER,
                                 encode_video, encode_text)
    finally:
        run.close()


def _place(model, tree, mesh, rules):
    if mesh is None:
        return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))
    from vidax.zoo.compute.sharding import place

    return place(tree, model.logical_specs(), rules, mesh)


def step_key(seed: int, step: int) -> jax.Array:
    """The key of step `step`'s noise and noise levels."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 1), step)


def batch_arrays(prep: Prepared, options: TrainOptions, step: int) -> tuple[jax.Array, jax.Array]:
    """Step `step`'s (latents, text embeddings), split over the mesh's data axis when there is one."""
    rows = data.batch_rows(prep.encoded, options.batch, options.seed, step)
    latents = np.stack([prep.encoded[r].latents for r in rows])
    text = np.stack([prep.encoded[r].text for r in rows])
    if prep.mesh is None:
        return jnp.asarray(latents), jnp.asarray(text)
    rows_on_data = NamedSharding(prep.mesh, PartitionSpec("data"))
    return jax.device_put(latents, rows_on_data), jax.device_put(text, rows_on_data)


def train_lora(options: TrainOptions, progress: Progress | None = None, prep: Prepared | None = None) -> Path:
    """Train, checkpoint and write the LoRA; returns `options.out`.

    Args:
      progress: called after every step with (step, total, loss, steps per second).
      prep: `prepare(options)`'s result, when the caller made it already.
    """
    options.check()
    prep = prep or prepare(options)
    config = options.lora_config()
    adamw = AdamW(options.lr, options.weight_decay)
    # a bf16 base keeps the hidden state in bf16 between blocks (what the backward keeps of each block), as
    # the PyTorch trainers' bf16 DiTs do; fp32 keeps fp32 (the parity setting)
    bf16 = any(leaf.dtype == jnp.bfloat16 for leaf in jax.tree.leaves(prep.base["blocks"]))
    objective = Objective(scale=config.scale, sampling=options.sampling, shift=options.shift,
                          carry_dtype="bfloat16" if bf16 else None)
    if options.resume is not None:
        lora, opt_state, start = load_checkpoint(options.resume, options, prep, adamw)
    else:
        lora = init_lora(jax.random.key(options.seed), prep.base["blocks"], config)
        opt_state, start = adamw.init(lora), 0
    began = time.perf_counter()
    for step in range(start, options.steps):
        latents, text = batch_arrays(prep, options, step)
        with mesh_context(prep):
            lora, opt_state, loss = train_step(prep.model, objective, adamw, prep.base, lora, opt_state, latents, text,
                                               step_key(options.seed, step))
        done = step + 1
        if progress is not None:
            progress(done, options.steps, float(loss), (done - start) / (time.perf_counter() - began))
        if options.checkpoint_every and done % options.checkpoint_every == 0 and done < options.steps:
            save_checkpoint(checkpoint_path(options.out), lora, opt_state, done, options)
    save_checkpoint(checkpoint_path(options.out), lora, opt_state, options.steps, options)
    settings = {**options.recipe(), "steps": options.steps, **{k: prep.settings[k] for k in ("height", "width", "frames")}}
    return save_lora(options.out, jax.device_get(lora), config, options.format, settings=settings)


def mesh_context(prep: Prepared):
    """`use_mesh` of the run's mesh and DiT rules (nothing on one device)."""
    import contextlib

    from vidax.zoo.compute.runtime import use_mesh

    return use_mesh(prep.mesh, prep.rules) if prep.mesh is not None else contextlib.nullcontext()


# --- checkpoints -----------------------------------------------------------------------------


def checkpoint_path(out: Path) -> Path:
    """`style.safetensors` -> `style.ckpt.npz` beside it."""
    out = Path(out)
    return out.with_name(out.name[: -len(".safetensors")] + ".ckpt.npz")


def save_checkpoint(path: Path, lora, opt_state, step: int, options: TrainOptions) -> Path:
    """The LoRA, the optimiser state (leaves in jax's tree order) and the step, whole or not at all."""
    import io

    leaves = jax.tree.leaves(jax.device_get((lora, opt_state)))
    buffer = io.BytesIO()
    np.savez(buffer, step=np.asarray(step), recipe=np.asarray(json.dumps(options.recipe(), sort_keys=True)),
             **{f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)})
    return write_file(path, buffer.getvalue())


def load_checkpoint(path: Path, options: TrainOptions, prep: Prepared, adamw: AdamW):
    """(lora, opt_state, step) of a checkpoint made with the same recipe (one error line otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise TrainError(f"--resume {path}: no such checkpoint")
    with np.load(path) as saved:
        recipe = json.loads(str(saved["recipe"]))
        if recipe != json.loads(json.dumps(options.recipe(), sort_keys=True)):
            diff = sorted(k for k in recipe if recipe.get(k) != options.recipe().get(k))
            raise TrainError(f"--resume {path}: made with other settings ({', '.join(diff)})")
        leaves = [saved[f"leaf_{i}"] for i in range(len(saved.files) - 2)]
        step = int(saved["step"])
    template = init_lora(jax.random.key(0), prep.base["blocks"], options.lora_config())
    treedef = jax.tree.structure((template, adamw.init(template)))
    if treedef.num_leaves != len(leaves):
        raise TrainError(f"--resume {path}: does not hold this LoRA's parameters")
    lora, opt_state = jax.tree.unflatten(treedef, [jnp.asarray(leaf) for leaf in leaves])
    if step > options.steps:
        raise TrainError(f"--resume {path}: already at step {step}, past --steps {options.steps}")
    return lora, opt_state, step
