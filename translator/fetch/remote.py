"""A Hub checkpoint's tensor table read from its safetensors headers alone (HTTP range requests).

`vidax-convert MODEL --check` plans and verifies a conversion from keys, shapes and dtypes, so it
need not download tens of gigabytes of weights: each file's header is a few hundred kilobytes.
Files that are not safetensors (`.pth`) have no header to read this way; the caller downloads those.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
from pathlib import PurePosixPath

import numpy as np

from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.dtypes import SAFETENSORS_DTYPES
from vidax.translator.errors import FormatError, SourceError
from vidax.translator.formats.safetensors_io import TensorInfo


class HeaderReader:
    """One remote safetensors file as `Checkpoint` reads a file (`path`, `tensors`, `metadata`), without its data."""

    def __init__(self, path: PurePosixPath, tensors: dict[str, TensorInfo], metadata: dict[str, str]):
        self.path, self.tensors, self.metadata = path, tensors, metadata

    def array(self, key: str) -> np.ndarray:
        raise SourceError(f"{key}: only the checkpoint's headers were read (a --check); convert without it")

    def release(self, key: str) -> None:
        pass


def glob_match(path: str, pattern: str) -> bool:
    """Path-aware glob: `*` stays within one folder level, as with Path.glob."""
    parts, pattern_parts = path.split("/"), pattern.split("/")
    return len(parts) == len(pattern_parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pattern_parts))


def _read_header(repo: str, filename: str, revision: str | None) -> HeaderReader:
    import huggingface_hub

    parsed = huggingface_hub.parse_safetensors_file_metadata(repo, filename, revision=revision)
    path = PurePosixPath(filename)
    tensors = {}
    for key, remote in parsed.tensors.items():
        if remote.dtype not in SAFETENSORS_DTYPES:
            raise FormatError(f"{repo}/{filename}, tensor {key!r}: unknown dtype {remote.dtype!r}")
        begin, end = remote.data_offsets
        tensors[key] = TensorInfo(key, path, SAFETENSORS_DTYPES[remote.dtype], tuple(remote.shape), begin, end)
    return HeaderReader(path, tensors, dict(parsed.metadata or {}))


def _shards(repo: str, index: str, revision: str | None) -> list[str]:
    """The shard files an index.json names (the index itself is small and downloaded)."""
    import huggingface_hub

    path = huggingface_hub.hf_hub_download(repo, index, revision=revision)
    with open(path) as fh:
        weight_map = json.load(fh).get("weight_map", {})
    folder = posixpath.dirname(index)
    return list(dict.fromkeys(posixpath.join(folder, shard) if folder else shard for shard in weight_map.values()))


def header_checkpoint(repo: str, files: list[str], globs: list[str], revision: str | None = None,
                      subfolder: str | None = None) -> Checkpoint | None:
    """The headers of the files of `repo` (its listing `files`) matching the first glob of `globs` that
    matches any (under `subfolder`); None when those are not all safetensors (no header to read)."""
    prefix = f"{subfolder.strip('/')}/" if subfolder else ""
    relative = [f[len(prefix):] for f in files if f.startswith(prefix)]
    for glob in globs:
        hits = [f for f in relative if glob_match(f, glob)]
        indexes = [f for f in relative if glob_match(f, glob + ".index.json") or (f in hits and f.endswith(".index.json"))]
        if not hits and not indexes:
            continue
        names = [prefix + f for f in hits if not f.endswith(".index.json")]
        if indexes:
            names = [s for index in sorted(set(indexes)) for s in _shards(repo, prefix + index, revision)]
        if not all(n.endswith(".safetensors") for n in names):
            return None
        return Checkpoint.from_readers([_read_header(repo, name, revision) for name in names])
    return None
