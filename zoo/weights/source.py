"""Where a model's weights and configs come from: a converted folder, a checkpoint folder or file, a Hub repo.

    source = WeightsSource.resolve(options.weights, default_repo)   # converted DIR, folder or repo id
    tree = source.load("transformer", "wan/transformer", subfolders, dtype="float32")
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from collections.abc import Mapping, Sequence

import numpy as np

from vidax.translator import MANIFEST, SourceError, convert, load, looks_like_repo, read_manifest
from vidax.translator.lora import merge_converted
from vidax.zoo.compute.progress import Progress

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
