"""A checkpoint as one key space over its files (safetensors shards, index.json, PyTorch zip)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vidax.translator.formats import scaled_io
from vidax.translator.formats.comfy_prefix import Unprefixed, unprefixed
from vidax.translator.errors import FormatError
from vidax.translator.formats.safetensors_io import SafetensorsFile, TensorInfo, read_index

TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")


def open_file(path: Path):
    """Open one checkpoint file by its suffix; both readers expose `tensors`, `array`, `release`."""
    if path.name.endswith(".safetensors"):  # fp8/int8 weights with their scales read dequantized
        return scaled_io.wrap(SafetensorsFile(path))
    if path.suffix in TORCH_SUFFIXES:
        from vidax.translator.formats.torch_zip import TorchZipFile

        return TorchZipFile(path)
    if path.suffix == ".gguf":  # quantized DiTs for ComfyUI (city96's, QuantStack's)
        from vidax.translator.formats.gguf_io import GGUFFile

        return GGUFFile(path)
    raise FormatError(f"{path}: unsupported checkpoint file type (want .safetensors, index.json, .gguf, "
                      f"{', '.join(TORCH_SUFFIXES)})")


def expand_files(paths: list[Path]) -> list[Path]:
    """Replace index.json files by their shards, keeping order and dropping duplicates."""
    out: dict[Path, None] = {}
    for path in paths:
        if path.name.endswith(".index.json"):
            for shard in read_index(path).values():
                out[shard] = None
        else:
            out[path] = None
    return list(out)


class Checkpoint:
    """Every tensor of a set of files, addressed by key; arrays are zero-copy views."""

    def __init__(self, paths: list[Path]):
        self.paths = expand_files([Path(p) for p in paths])
        self._index([open_file(path) for path in self.paths])

    @classmethod
    def from_readers(cls, readers: list) -> "Checkpoint":
        """One key space over readers already opened (each with `path`, `tensors`, `array`, `release`)."""
        checkpoint = cls.__new__(cls)
        checkpoint.paths = [reader.path for reader in readers]
        checkpoint._index(readers)
        return checkpoint

    def without_comfy_prefix(self) -> "Checkpoint | None":
        """The same tensors with ComfyUI's `model.diffusion_model.` prefix dropped from their keys
        (`comfy_prefix`), or None when no key carries it."""
        readers = list(dict.fromkeys(self._owner.values()))
        names = [unprefixed(reader.tensors, reader.path) for reader in readers]
        if not any(names):
            return None
        return Checkpoint.from_readers([Unprefixed(r, n) if n else r for r, n in zip(readers, names)])

    def _index(self, readers: list) -> None:
        self._owner: dict[str, object] = {}
        self.metadata: dict[str, str] = {}
        for reader in readers:
            self.metadata.update(getattr(reader, "metadata", {}))
            for key in reader.tensors:
                if key in self._owner:
                    raise FormatError(f"{reader.path}: tensor {key!r} also appears in {self._owner[key].path}")
                self._owner[key] = reader

    def keys(self) -> list[str]:
        return list(self._owner)

    def info(self, key: str) -> TensorInfo:
        return self._owner[key].tensors[key]

    def path_of(self, key: str):
        """The file that holds `key`."""
        return self._owner[key].path

    def array(self, key: str) -> np.ndarray:
        return self._owner[key].array(key)

    def release(self, key: str) -> None:
        self._owner[key].release(key)

    @property
    def nbytes(self) -> int:
        return sum(self.info(k).nbytes for k in self._owner)
