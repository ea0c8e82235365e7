"""Synthetic converted folders: what `vidax-convert MODEL --out DIR` writes from the real checkpoint, every
leaf of every component at its real shape and dtype, filled with seeded random values instead of the
released weights (`vidax-convert MODEL --synthetic --out DIR`). No download, no torch: a machine can be
tried at a model's real size before fetching tens of GB, and accelerator runs need real-size weights
without the Hub.

- Shapes: the zoo module each component's spec converts into, built from the component's config
  (`vidax.zoo.plan.spec_shapes`; `tests/realscale` checks those trees against the reference checkpoints).
  Dtypes: the spec's dtype policy, as converting a checkpoint applies it (a "keep" leaf, which takes
  the checkpoint's own dtype, is bfloat16, as the releases ship).
- Values: N(0, 0.02) for weights, embeddings and biases; 1 + N(0, 0.02) for norm scales and the
  latent statistics' std (`INITS`), so activations stay finite through a real-size forward. Each
  leaf draws from its own generator seeded by (seed, component, path): the same seed gives the same
  bytes whatever is written first.
- Configs: the registry's `config.<component>` tables (an embedded model's own folder), written where
  the diffusers layout keeps them; tokenizers: a stand-in of the encoder's kind with its vocabulary
  size (`vidax.zoo.parts.synthetic_tokenizer`).
- Writing: `vidax.translator.output.save_tree`, streamed one chunk at a time (bounded memory at any
  model size), atomic per component; `vidax_model.json`, which marks the folder complete and
  synthetic, is removed first and written last.

    plan = synthetic_plan(SyntheticOptions("wan2.1-t2v-1.3b"))      # shapes, dtypes, bytes; nothing written
    write_synthetic(SyntheticOptions("wan2.1-t2v-1.3b", out=Path("ckpt/wan13b-synthetic")))
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import ml_dtypes
import numpy as np

from vidax.translator.dtypes import policy_dtype
from vidax.translator.errors import OutputError, SourceError
from vidax.translator.models import MODEL_FILE, ConversionHooks
from vidax.translator.output import MANIFEST, read_manifest, save_tree, staged_files, write_file
from vidax.translator.registry import ModelEntry, get_model
from vidax.translator.spec import load_spec

STD = 0.02
# (leaf path regex, values): the first match decides; everything else is N(0, STD)
INITS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"(.*/)?(scale|gamma|latents_std|timestep_scale_multiplier)"), "one"),  # norm scales, std
)
KEEP_DTYPE = np.dtype(ml_dtypes.bfloat16)  # a "keep" leaf takes the checkpoint's dtype: the releases' bf16
CHUNK_ELEMENTS = 8 << 20  # values drawn and written per chunk (16-32 MB): memory stays bounded
SCHEDULER_FILE = "scheduler/scheduler_config.json"
MODEL_INDEX_FILE = "model_index.json"


@dataclass(frozen=True)
class SyntheticOptions:
    """One synthetic folder request (the `vidax-convert --synthetic` flags)."""

    model: str
    out: Path | None = None
    components: tuple[str, ...] = ()
    dtype: str | None = None
    variant: str | None = None
    seed: int = 0
    check: bool = False  # plan only: shapes, dtypes and bytes, nothing written


@dataclass(frozen=True)
class Leaf:
    shape: tuple[int, ...]
    dtype: np.dtype
    init: str  # "normal" or "one"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def leaf_init(path: str) -> str:
    return next((init for pattern, init in INITS if pattern.fullmatch(path)), "normal")


@lru_cache(maxsize=None)
def _quantiles() -> np.ndarray:
    """65536 evenly spaced quantiles of N(0, 1) (float64): a uniform 16-bit index into them is a draw from
    N(0, 1) at 16-bit resolution, several times faster than a Gaussian generator (bf16 holds no more)."""
    normal = NormalDist()
    return np.array([normal.inv_cdf((i + 0.5) / 65536) for i in range(65536)])


@lru_cache(maxsize=None)
def _table(init: str, dtype: np.dtype) -> np.ndarray:
    """The 65536 values a leaf of `init` and `dtype` draws from, in that dtype."""
    values = (1.0 if init == "one" else 0.0) + STD * _quantiles()
    return values.astype(np.float32).astype(dtype)


class SyntheticTree:
    """One component's synthetic leaves, streamed as `save_tree` streams a `LazyTree` (`leaves`, `chunks`)."""

    def __init__(self, component: str, spec, leaves: dict[str, Leaf], seed: int):
        self.component, self.spec, self.leaves, self.seed = component, spec, leaves, seed

    def __len__(self) -> int:
        return len(self.leaves)

    def __iter__(self) -> Iterator[str]:
        return iter(self.leaves)

    @property
    def nbytes(self) -> int:
        return sum(leaf.nbytes for leaf in self.leaves.values())

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {p: leaf.shape for p, leaf in self.leaves.items()}

    def _generator(self, path: str) -> np.random.Generator:
        digest = hashlib.sha256(f"{self.component}/{path}".encode()).digest()
        return np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])

    def chunks(self, path: str, alloc: Callable[[tuple[int, ...], np.dtype], np.ndarray]) -> Iterator[np.ndarray]:
        """The leaf's values in C order, flat chunks of at most `CHUNK_ELEMENTS`, each in a buffer from `alloc`."""
        leaf = self.leaves[path]
        if not np.issubdtype(leaf.dtype, np.floating) and leaf.dtype != KEEP_DTYPE:
            raise OutputError(f"{self.component}/{path}: no synthetic values for {leaf.dtype} leaves")
        table = _table(leaf.init, leaf.dtype).view(f"u{leaf.dtype.itemsize}")
        rng, total = self._generator(path), math.prod(leaf.shape)
        for start in range(0, total, CHUNK_ELEMENTS):
            n = min(CHUNK_ELEMENTS, total - start)
            out = alloc((n,), leaf.dtype)
            np.take(table, rng.integers(0, 65536, n, dtype=np.uint16), out=out.view(table.dtype), mode="clip")
            yield out

    def __getitem__(self, path: str) -> np.ndarray:
        """One leaf whole, at its shape (tests, small models)."""
        leaf = self.leaves[path]
        return np.concatenate(list(self.chunks(path, np.empty)) or [np.empty(0, leaf.dtype)]).reshape(leaf.shape)


@dataclass
class SyntheticPlan:
    """What a synthetic folder holds: per component its leaves, the configs and the tokenizers."""

    entry: ModelEntry
    trees: dict = field(default_factory=dict)  # component -> SyntheticTree
    configs: dict = field(default_factory=dict)  # file path in the folder -> config dict
    tokenizers: dict = field(default_factory=dict)  # folder -> (text encoder spec, its config)
    layout: str = "diffusers"

    @property
    def nbytes(self) -> int:
        return sum(tree.nbytes for tree in self.trees.values())


def component_configs(entry: ModelEntry) -> dict[str, dict]:
    """Each component's config (and `scheduler`, `model_index`): the registry's tables, or an embedded
    model's shipped folder."""
    if not entry.embedded:
        return {name: dict(table) for name, table in entry.config.items()}
    root = importlib.import_module(entry.embedded).source().root
    files = {name: f"{name}/config.json" for name in entry.components}
    files.update(scheduler=SCHEDULER_FILE, model_index=MODEL_INDEX_FILE)
    return {name: json.loads((root / rel).read_text()) for name, rel in files.items() if (root / rel).is_file()}


def _leaf_dtypes(spec, shapes: Mapping[str, tuple], dtype: str | None) -> dict[str, np.dtype]:
    """The dtype converting a checkpoint gives each leaf: the spec's policy (or the override's default)."""
    default = spec.dtype.default if dtype is None else policy_dtype(dtype, "--dtype")
    return {path: spec.dtype.for_leaf(path, default) or KEEP_DTYPE for path in shapes}


def _names(entry: ModelEntry, opts: SyntheticOptions) -> list[str]:
    names = list(opts.components) or list(entry.components)
    unknown = [n for n in names if n not in entry.components]
    if unknown:
        raise SourceError(f"model {entry.name} has no component(s) {', '.join(unknown)} (has: {', '.join(entry.components)})")
    return names


def synthetic_plan(opts: SyntheticOptions) -> SyntheticPlan:
    """Every leaf (shape, dtype, values' kind), config and tokenizer of `opts`' synthetic folder; reads and
    writes nothing. Raises `SourceError` (one line) for what cannot be synthesized."""
    from vidax.zoo.plan.spec_shapes import spec_shapes
    from vidax.zoo.parts.synthetic_tokenizer import DIT_TOKENIZER_FOLDERS, TOKENIZERS, tokenizer_folder

    entry = get_model(opts.model)
    entry = entry.select(opts.variant) if opts.variant else entry
    configs = component_configs(entry)
    plan = SyntheticPlan(entry, layout="diffusers" if "diffusers" in entry.repos or entry.embedded else entry.default_layout)
    for name in _names(entry, opts):
        component = entry.components[name]
        if component.spec is None:
            continue  # configs and tokenizers: written below from the components they serve
        if name not in configs:
            raise SourceError(f"{entry.name}: no config of {name} recorded (models.toml `config.{name}`): its shapes are unknown")
        spec = load_spec(component.spec)
        try:
            shapes = spec_shapes(component.spec, configs[name])
        except KeyError as err:  # a spec of the user's own (VIDAX_MODELS) with no zoo module here
            raise SourceError(f"{entry.name}: {name}: {err.args[0]}") from None
        dtypes = _leaf_dtypes(spec, shapes, opts.dtype or component.dtype)
        leaves = {p: Leaf(tuple(s), np.dtype(dtypes[p]), leaf_init(p)) for p, s in shapes.items()}
        plan.trees[name] = SyntheticTree(name, spec, leaves, opts.seed)
        plan.configs[f"{name}/config.json"] = configs[name]
        if name.startswith("text_encoder"):
            if component.spec not in TOKENIZERS:
                raise SourceError(f"{entry.name}: no synthetic tokenizer for {name} ({component.spec}; there is one for "
                                  f"{', '.join(TOKENIZERS)}): leave it out with --components")
            plan.tokenizers[tokenizer_folder(name)] = (component.spec, configs[name])
        if component.spec in DIT_TOKENIZER_FOLDERS:  # the DiT reads the prompt's ids itself (Cosmos3)
            plan.tokenizers[DIT_TOKENIZER_FOLDERS[component.spec]] = (component.spec, configs[name])
    for name, rel in (("scheduler", SCHEDULER_FILE), ("model_index", MODEL_INDEX_FILE)):
        if name in configs:
            plan.configs[rel] = configs[name]
    _check_files_only(entry, _names(entry, opts), plan)
    return plan


# Files-only components a synthetic folder may go without: the families read an image processor's settings with
# defaults from the image encoder's own config when its `preprocessor_config.json` is absent.
OPTIONAL_FILES = frozenset({"image_processor", "feature_extractor"})


def _check_files_only(entry: ModelEntry, names: list[str], plan: SyntheticPlan) -> None:
    """Every selected files-only component (tokenizers, scheduler) is in the plan, or one line; one the registry
    marks optional may be left out (LTX-Video-13B-distilled's scheduler: its passes name their timesteps)."""
    missing = [n for n in names if entry.components[n].spec is None and n not in plan.tokenizers
               and n not in OPTIONAL_FILES and not entry.components[n].optional
               and not any(rel.startswith(f"{n}/") for rel in plan.configs)
               and not (MODEL_INDEX_FILE in plan.configs and _copies(entry.components[n], MODEL_INDEX_FILE))]
    if missing:
        raise SourceError(f"{entry.name}: no synthetic stand-in for {', '.join(missing)} (no recorded config or "
                          "tokenizer of its kind): leave it out with --components")


def _copies(component, file: str) -> bool:
    """Whether a files-only component is that one file (Cosmos3's `pipeline`: `model_index.json`)."""
    return any(file in ([globs] if isinstance(globs, str) else list(globs)) for globs in component.copy.values())


def _check_room(out: Path, nbytes: int) -> None:
    """One line before any work when the disk cannot hold the folder."""
    probe = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    free = shutil.disk_usage(probe).free
    if nbytes > free:
        raise OutputError(f"{out}: needs {nbytes / 1e9:.2f} GB, {free / 1e9:.2f} GB free on its disk")


def _manifest(plan: SyntheticPlan, name: str, opts: SyntheticOptions) -> dict:
    tree = plan.trees[name]
    return {"model": plan.entry.name, "variant": plan.entry.variant, "component": name, "spec": tree.spec.name,
            "spec_digest": tree.spec.digest, "layout": plan.layout, "dtype": opts.dtype or "spec default",
            "source": {"origin": f"synthetic:seed={opts.seed}", "repo": None, "revision": None, "files": []},
            "synthetic": {"seed": opts.seed, "values": f"N(0, {STD}); norm scales and latent std 1 + N(0, {STD})"}}


def _forget_completion(out: Path) -> None:
    """Remove an earlier `vidax_model.json`: until this run writes its own, the folder does not look complete."""
    record = out / MODEL_FILE
    if record.is_file():
        record.unlink()


def write_synthetic(opts: SyntheticOptions, hooks: ConversionHooks | None = None) -> SyntheticPlan:
    """Write (or with `check`, only plan) the synthetic folder of `opts`.

    Args:
      opts: model, output folder (default `out/MODEL-synthetic`), components, dtype, variant, seed.
      hooks: progress callbacks (`writing` per component, `done` per component and per file group).

    Returns:
      The plan that was written.

    Raises:
      SourceError: a component that cannot be synthesized (no config, no stand-in tokenizer).
      OutputError: the folder cannot be written or its disk has no room.
    """
    hooks = hooks or ConversionHooks()
    plan = synthetic_plan(opts)
    if opts.check:
        return plan
    out = Path(opts.out) if opts.out is not None else Path("out") / f"{plan.entry.name}-synthetic"
    _check_room(out, plan.nbytes)
    if out.exists() and (out / MODEL_FILE).is_file():
        _forget_completion(out)
    for name, tree in plan.trees.items():
        written = save_tree(tree, out / name, _manifest(plan, name, opts), progress=hooks.writing(name, tree.nbytes))
        hooks.done(name, f"{'wrote' if written else 'up to date,'} {out / name} ({tree.nbytes / 1e9:.3f} GB, synthetic)")
    _write_files(plan, out, hooks)
    record = {"model": plan.entry.name, "family": plan.entry.family, "variant": plan.entry.variant,
              "tags": list(plan.entry.variants), "layout": plan.layout,
              "component_layouts": {name: plan.layout for name in plan.trees}, "synthetic": {"seed": opts.seed}}
    write_file(out / MODEL_FILE, json.dumps(record, indent=1) + "\n")  # last: the folder is now complete
    return plan


def _write_files(plan: SyntheticPlan, out: Path, hooks: ConversionHooks) -> None:
    """The configs and the stand-in tokenizers, all whole or none replaced."""
    from vidax.zoo.parts.synthetic_tokenizer import write_tokenizer

    with staged_files() as files:
        for rel, config in plan.configs.items():
            write_file(out / rel, json.dumps(config, indent=1, default=list) + "\n", files)
        for folder, (spec, config) in plan.tokenizers.items():
            write_tokenizer(spec, config, out / folder, lambda path, text: write_file(path, text, files))
    written = [*plan.configs, *(f"{folder}/" for folder in plan.tokenizers)]
    hooks.done("configs", f"wrote {', '.join(written) or 'nothing'} in {out}")


def synthetic_note(weights: str | Path | None) -> str | None:
    """The line `vidax-gen` prints when `--weights` is a synthetic folder, else None."""
    if weights is None:
        return None
    try:
        record = json.loads((Path(weights) / MODEL_FILE).read_text())
    except (OSError, ValueError):
        return None
    synthetic = record.get("synthetic") if isinstance(record, dict) else None
    if not synthetic:
        return None
    return (f"note: {weights} holds synthetic weights (random values at the real shapes, seed {synthetic.get('seed')}, "
            "from vidax-convert --synthetic): the video will be noise, not the model's")


def is_synthetic_component(folder: str | Path) -> bool:
    """Whether a converted component folder was written by `write_synthetic` (its manifest says so)."""
    return (Path(folder) / MANIFEST).is_file() and bool(read_manifest(folder).get("synthetic"))
