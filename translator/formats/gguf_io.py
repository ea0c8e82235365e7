"""GGUF files (city96's and QuantStack's quantized DiTs for ComfyUI) read through the `gguf` package.

A GGUF file is a header of typed key/value fields and tensor descriptions, then the tensors' data, each
either plain (F32, F16, BF16) or in ggml's block formats (Q8_0: 32 values share an fp16 scale; the K
formats: 256 values in sub-blocks with 6-bit scales and mins under fp16 super-scales). `gguf.GGUFReader`
memory-maps the file; a tensor is dequantized only when the executor asks for it, one at a time, with
`gguf.quants.dequantize`, which computes in float32 (an fp16 scale widened to fp32, then fp32 products),
so the weights are exactly ggml's values. Plain tensors are zero-copy views in their own dtype (the
executor widens bf16 and fp16 to fp32 exactly).

What ComfyUI-GGUF's converter writes, and this reader follows:
- `general.architecture` names the DiT (`wan`, `hyvid`, `ltxv`, `cosmos`); a file of another
  architecture than the spec's family is refused before any tensor is read.
- keys are the ORIGINAL checkpoint's (Wan's `blocks.0.self_attn.q.weight`), sometimes under ComfyUI's
  `model.diffusion_model.` prefix, which is dropped (`comfy_prefix`, as for every single-file source).
- ggml tensors have at most 4 dimensions: a 5-D convolution weight is either stored whole in F32 or
  flattened, with its shape in the array field `comfy.gguf.orig_shape.<tensor name>` (torch order);
  a tensor without that field has the reverse of its ggml dimensions (numpy order).
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.translator.formats.comfy_prefix import unprefixed
from vidax.translator.errors import FormatError, SourceError, brief, describe
from vidax.translator.formats.safetensors_io import TensorInfo

# ggml types read, by name: plain ones are views in their own dtype, the others dequantized to float32
PLAIN = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype(ml_dtypes.bfloat16)}
QUANTIZED = ("Q8_0", "Q6_K", "Q5_K", "Q5_0", "Q4_K", "Q4_0")
SUPPORTED = (*PLAIN, *QUANTIZED)

ARCHITECTURE_FIELD = "general.architecture"
ORIG_SHAPE_FIELD = "comfy.gguf.orig_shape."

# family folder of a spec (`wan/transformer` -> wan) -> the `general.architecture` of its GGUF DiTs
ARCHITECTURES = {"wan": "wan", "hunyuan_video": "hyvid", "ltx_video": "ltxv", "cosmos": "cosmos"}

# what gguf's reader raises on a damaged or foreign file (bad magic, truncated tables, bad UTF-8)
_READ_ERRORS = (ValueError, OSError, IndexError, KeyError, OverflowError, TypeError, EOFError)


def _open_reader(path: Path):
    import gguf

    try:
        return gguf.GGUFReader(path)
    except _READ_ERRORS as err:
        raise FormatError(f"{path}: not a readable GGUF file ({describe(err)})") from None


def _string_field(reader, key: str) -> str | None:
    import gguf

    field = reader.get_field(key)
    if field is None:
        return None
    if list(field.types) != [gguf.GGUFValueType.STRING]:
        raise FormatError(f"{reader.data.filename}: field {key} is not a string")
    return bytes(field.parts[field.data[-1]]).decode("utf-8", errors="replace")


def _orig_shape(reader, path: Path, name: str) -> tuple[int, ...] | None:
    """The torch-order shape ComfyUI-GGUF recorded for a flattened tensor, or None."""
    import gguf

    field = reader.get_field(ORIG_SHAPE_FIELD + name)
    if field is None:
        return None
    if list(field.types) != [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]:
        raise FormatError(f"{path}, tensor {brief(name, 120)}: {ORIG_SHAPE_FIELD}{name} is not an array of int32")
    shape = tuple(int(field.parts[i][0]) for i in field.data)
    if any(d < 0 for d in shape):
        raise FormatError(f"{path}, tensor {brief(name, 120)}: original shape {list(shape)} has a negative size")
    return shape


class GGUFFile:
    """One GGUF file, memory-mapped, exposing the reader interface of the translator (`tensors`,
    `array`, `release`, `path`, `metadata`): shapes are the original checkpoint's, `array(name)` the
    tensor dequantized (quantized types, float32) or viewed (plain types)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._reader = _open_reader(self.path)
        self.architecture = _string_field(self._reader, ARCHITECTURE_FIELD)
        self.metadata: dict[str, str] = {ARCHITECTURE_FIELD: self.architecture} if self.architecture else {}
        self._entries: dict[str, tuple[object, str, tuple[int, ...]]] = {}
        self.tensors: dict[str, TensorInfo] = {}
        unsupported = []
        names = unprefixed([t.name for t in self._reader.tensors], self.path) or {}  # a GGUF's keys are the original's
        bare = {name: key for key, name in names.items()}
        for tensor in self._reader.tensors:
            kind = getattr(tensor.tensor_type, "name", str(tensor.tensor_type))
            if kind not in SUPPORTED:
                unsupported.append(f"{tensor.name} ({kind})")
                continue
            self._add(tensor, kind, bare.get(tensor.name, tensor.name))
        if unsupported:
            listed = ", ".join(unsupported[:8]) + (f" and {len(unsupported) - 8} more" if len(unsupported) > 8 else "")
            raise FormatError(f"{self.path}: GGUF tensor types not supported: {listed} (supported: {', '.join(SUPPORTED)})")

    def _add(self, tensor, kind: str, key: str) -> None:
        shape = _orig_shape(self._reader, self.path, tensor.name) or tuple(int(d) for d in reversed(tensor.shape.tolist()))
        if math.prod(shape) != int(tensor.n_elements):
            raise FormatError(f"{self.path}, tensor {brief(tensor.name, 120)}: original shape {list(shape)} does not hold "
                              f"its {int(tensor.n_elements)} values")
        dtype = PLAIN.get(kind, np.dtype("<f4"))
        start = int(tensor.data_offset)
        self._entries[key] = (tensor, kind, shape)
        self.tensors[key] = TensorInfo(key, self.path, dtype, shape, start, start + int(tensor.n_bytes))

    def array(self, name: str) -> np.ndarray:
        import gguf

        tensor, kind, shape = self._entries[name]
        if kind in PLAIN:
            return tensor.data.view(PLAIN[kind]).reshape(shape)
        return gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)

    def release(self, name: str) -> None:
        """Drop the pages of `name` from this process's resident set (they stay in the page cache)."""
        backing = getattr(self._reader.data, "_mmap", None)
        info = self.tensors[name]
        start = info.start - info.start % mmap.PAGESIZE
        if backing is None or info.end <= start or not hasattr(mmap, "MADV_DONTNEED"):
            return
        backing.madvise(mmap.MADV_DONTNEED, start, info.end - start)


def check_architecture(spec_name: str, files: list[Path], metadata: dict[str, str]) -> None:
    """A GGUF source must name the architecture of the spec's family (one line otherwise)."""
    ggufs = [p for p in files if p.name.endswith(".gguf")]
    if not ggufs:
        return
    family = spec_name.split("/", 1)[0]
    wanted = ARCHITECTURES.get(family)
    found = metadata.get(ARCHITECTURE_FIELD)
    if wanted is None:
        raise SourceError(f"{ggufs[0]}: GGUF files are read for the DiTs of {', '.join(ARCHITECTURES)}, not for {spec_name}")
    if found != wanted:
        what = f"architecture {found!r}" if found else f"no {ARCHITECTURE_FIELD}"
        raise SourceError(f"{ggufs[0]}: a GGUF of {what}, not {wanted!r} as {spec_name} needs")
