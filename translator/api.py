"""The public entry points: convert a checkpoint through a spec into a host tree."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from vidax.translator import executor
from vidax.translator.fetch import sources
from vidax.translator.dtypes import policy_dtype
from vidax.translator.executor import LeafPlan
from vidax.translator.spec import Spec, load_spec


class LazyTree(Mapping):
    """A planned, fully accounted conversion whose leaves are computed when accessed.

    `save_tree` streams it chunk by chunk, so a whole model never sits in memory at once.
    """

    def __init__(self, spec: Spec, source: sources.Source, leaves: list[LeafPlan]):
        self.spec, self.source = spec, source
        self.leaves = {leaf.path: leaf for leaf in leaves}

    def __getitem__(self, path: str) -> np.ndarray:
        return executor.materialize(self.leaves[path], self.source.checkpoint)

    def __iter__(self) -> Iterator[str]:
        return iter(self.leaves)

    def __len__(self) -> int:
        return len(self.leaves)

    def chunks(self, path: str, alloc=executor.host_empty) -> Iterator[np.ndarray]:
        return executor.chunks(self.leaves[path], self.source.checkpoint, alloc)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {p: leaf.shape for p, leaf in self.leaves.items()}

    @property
    def nbytes(self) -> int:
        return sum(leaf.nbytes for leaf in self.leaves.values())


def convert(spec: Spec | str | Path, source: str | Path, expected: Mapping[str, tuple[int, ...]] | None = None, *,
            layout: str | None = None, dtype: str | None = None, revision: str | None = None,
            subfolder: str | None = None, lazy: bool = False, headers_only: bool = False,
            files: tuple[str, ...] | None = None, loras: Sequence = ()) -> dict[str, np.ndarray] | LazyTree:
    """Convert a PyTorch checkpoint into a flat host tree ``{"a/b/kernel": np.ndarray}``.

    Args:
      spec: a loaded `Spec`, a shipped spec name (``"wan/transformer"``) or a spec file path.
      source: a checkpoint file, a model folder, or a Hub repo id (``"Wan-AI/Wan2.1-T2V-1.3B"``).
      expected: optional flat mapping path -> shape; every produced leaf must appear with that
        shape and every expected leaf must be produced.
      layout: force one of the spec's layouts instead of detecting it from the key signature.
      dtype: override the spec's default dtype (``float32``, ``bfloat16``, ``float16``, ``keep``);
        the spec's path rules (e.g. fp32 norms) still apply.
      revision: Hub revision (branch, tag or commit) when `source` is a repo id.
      subfolder: folder inside the repo or local folder that holds the model root.
      lazy: return a `LazyTree` (leaves computed on access) instead of a dict.
      headers_only: with `lazy`, a Hub repo's safetensors headers are read without downloading the
        weights (when the Hub answers): the tree is planned and accounted, its leaves cannot be read.
      files: globs that replace the spec layouts' own (one release's file in a repo that holds several).
      loras: `vidax.translator.lora.Adapter`s merged into the checkpoint's tensors (float32) before the
        spec's ops run (`translator/lora.py`).

    Returns:
      The host tree. Leaves whose layout and dtype already match are zero-copy read-only views of
      the memory-mapped file; the others are fresh arrays.

    Raises:
      TranslatorError: SpecError, SourceError, FormatError, or AccountingError listing every
        unaccounted key, unfired rule and missing or misshapen leaf at once.
    """
    if headers_only and not lazy:
        raise ValueError("headers_only plans a conversion: it needs lazy=True")
    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    if files:
        spec = spec.with_files(tuple(files))
    opened = sources.resolve(spec, source, revision=revision, subfolder=subfolder, layout=layout,
                             headers_only=headers_only)
    if loras:
        from vidax.translator.lora import merge

        opened.checkpoint = merge(opened.checkpoint, spec.name, list(loras))
    override = policy_dtype(dtype, "dtype") if dtype is not None else "spec"
    leaves = executor.plan(spec, opened.layout, opened.checkpoint, expected, override)
    if loras:  # merged tensors that only feed bf16 leaves come back bf16: raw-bit copies, as without LoRAs
        opened.checkpoint.narrow_for(leaves)
    tree = LazyTree(spec, opened, leaves)
    return tree if lazy else {path: tree[path] for path in tree}


def read_metadata(spec: Spec | str | Path, source: str | Path, *, layout: str | None = None,
                  revision: str | None = None, subfolder: str | None = None,
                  files: tuple[str, ...] | None = None) -> dict[str, str]:
    """The safetensors `__metadata__` of the checkpoint files `spec` reads from `source` (merged
    over shards): LTX-Video's official single files carry their model config there. Local files are
    read to their header only; a Hub repo's headers are fetched with range requests when the Hub
    answers (else the files are downloaded as `convert` would).
    """
    spec = spec if isinstance(spec, Spec) else load_spec(spec)
    if files:
        spec = spec.with_files(tuple(files))
    opened = sources.resolve(spec, source, revision=revision, subfolder=subfolder, layout=layout, headers_only=True)
    return dict(opened.checkpoint.metadata)
