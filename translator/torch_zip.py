"""PyTorch zip checkpoints (`torch.save` since 1.6: .pth/.pt/.bin) read without torch.

The pickle inside is run by a restricted unpickler: `find_class` hands out harmless stand-ins for
the few globals a state dict needs (tensor and parameter rebuilders, storage types, OrderedDict)
and refuses every other global *before* the pickle can call it, so a malicious file executes
nothing. Storages are zero-copy views of the memory-mapped file when stored uncompressed (as
torch writes them).
"""

from __future__ import annotations

import collections
import math
import mmap
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.translator.errors import FormatError
from vidax.translator.safetensors_io import TensorInfo

_STORAGE_DTYPES = {
    "DoubleStorage": np.dtype("<f8"), "FloatStorage": np.dtype("<f4"), "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype(ml_dtypes.bfloat16), "LongStorage": np.dtype("<i8"), "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"), "CharStorage": np.dtype("i1"), "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"), "Float8_e4m3fnStorage": np.dtype(ml_dtypes.float8_e4m3fn),
    "Float8_e5m2Storage": np.dtype(ml_dtypes.float8_e5m2),
}
WRAPPER_KEYS = ("state_dict", "module", "model")
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # zip local file header, 30 bytes


@dataclass(frozen=True)
class _StorageType:
    dtype: np.dtype


@dataclass
class _Tensor:
    """A tensor as the unpickler rebuilds it: a strided view description of one storage."""

    storage: str
    dtype: np.dtype
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    key, dtype = storage
    return _Tensor(key, dtype, int(storage_offset), tuple(size), tuple(stride))


def _rebuild_parameter(data, *_ignored):
    return data


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGE_DTYPES.items()},
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, path: Path):
        import io

        super().__init__(io.BytesIO(data))
        self.path = path

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise FormatError(f"{self.path}: pickle refers to {module}.{name}, which is not allowed in a checkpoint "
                              "(refused without executing it)") from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise FormatError(f"{self.path}: unsupported persistent id {pid!r:.80}")
        return (str(pid[2]), pid[1].dtype)


def _flatten(obj, prefix: str, out: dict, extras: dict) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            _flatten(value, f"{prefix}{key}.", out, extras)
    elif isinstance(obj, _Tensor):
        out[prefix[:-1]] = obj
    else:
        extras[prefix[:-1]] = obj


def _unwrap(obj):
    """Real checkpoints nest the state dict under `state_dict`, `module` or `model`."""
    while isinstance(obj, dict):
        inner = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), dict)), None)
        if inner is None:
            return obj
        obj = inner
    return obj


class TorchZipFile:
    """A torch.save zip archive; `tensors` describes every tensor, `array(name)` is a strided view."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.metadata: dict[str, str] = {}
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as err:
            raise FormatError(f"{self.path}: not a PyTorch zip checkpoint ({err}); legacy torch.save files are not supported") from None
        with open(self.path, "rb") as fh:
            self._mmap = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        pkl = [n for n in self._zip.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise FormatError(f"{self.path}: expected one <archive>/data.pkl, found {len(pkl)}")
        self._prefix = pkl[0][: -len("data.pkl")]
        try:
            root = _RestrictedUnpickler(self._zip.read(pkl[0]), self.path).load()
        except FormatError:
            raise
        except Exception as err:  # truncated or corrupt pickle stream
            raise FormatError(f"{self.path}: corrupt pickle in {pkl[0]} ({type(err).__name__}: {err})") from None
        raw: dict[str, _Tensor] = {}
        self.extras: dict[str, object] = {}
        _flatten(_unwrap(root), "", raw, self.extras)
        self._storages: dict[str, np.ndarray] = {}
        self._raw = raw
        self.tensors = {name: self._info(name, t) for name, t in raw.items()}

    def _storage(self, key: str, dtype: np.dtype, tensor: str) -> tuple[np.ndarray, int]:
        entry = f"{self._prefix}data/{key}"
        try:
            info = self._zip.getinfo(entry)
        except KeyError:
            raise FormatError(f"{self.path}, tensor {tensor!r}: storage {entry} missing from the archive") from None
        if info.compress_type != zipfile.ZIP_STORED:
            data = np.frombuffer(self._zip.read(entry), np.uint8)  # compressed: one unavoidable copy
            return data, -1
        header = self._mmap[info.header_offset: info.header_offset + _LOCAL_HEADER.size]
        if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise FormatError(f"{self.path}, tensor {tensor!r}: bad zip local header for {entry}")
        fields = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        if start + info.file_size > len(self._mmap):
            raise FormatError(f"{self.path}, tensor {tensor!r}: storage {entry} runs past the end of the file (truncated?)")
        return np.frombuffer(self._mmap, np.uint8, info.file_size, start), start

    def _info(self, name: str, t: _Tensor) -> TensorInfo:
        data, start = self._storage(t.storage, t.dtype, name)
        numel = data.size // t.dtype.itemsize
        if len(t.shape) != len(t.stride) or any(d < 0 for d in t.shape) or any(s < 0 for s in t.stride):
            raise FormatError(f"{self.path}, tensor {name!r}: invalid size {t.shape} / stride {t.stride}")
        last = t.offset + sum((d - 1) * s for d, s in zip(t.shape, t.stride)) if math.prod(t.shape) else t.offset - 1
        if t.offset < 0 or last >= numel:
            raise FormatError(f"{self.path}, tensor {name!r}: size {list(t.shape)} / stride {list(t.stride)} at offset "
                              f"{t.offset} exceeds its storage of {numel} elements")
        self._storages[t.storage] = data
        begin = max(start, 0) + t.offset * t.dtype.itemsize
        end = max(start, 0) + (last + 1) * t.dtype.itemsize
        return TensorInfo(name, self.path, t.dtype, t.shape, begin, max(end, begin))

    def array(self, name: str) -> np.ndarray:
        t = self._raw[name]
        storage = self._storages[t.storage]
        usable = storage.size - storage.size % t.dtype.itemsize
        flat = storage[:usable].view(t.dtype)
        if math.prod(t.shape) == 0:
            return np.empty(t.shape, t.dtype)
        strides = tuple(s * t.dtype.itemsize for s in t.stride)
        return np.lib.stride_tricks.as_strided(flat[t.offset:], t.shape, strides, writeable=False)

    def release(self, name: str) -> None:
        info = self.tensors[name]
        start = info.start - info.start % mmap.PAGESIZE
        if hasattr(mmap, "MADV_DONTNEED") and info.end > start and self._zip.getinfo(f"{self._prefix}data/{self._raw[name].storage}").compress_type == zipfile.ZIP_STORED:
            self._mmap.madvise(mmap.MADV_DONTNEED, start, info.end - start)
