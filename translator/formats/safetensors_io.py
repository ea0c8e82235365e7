"""Safetensors reading (own header parser over mmap, zero-copy views) and streaming writing.

Layout of a file: 8-byte little-endian header length N, N bytes of JSON, then the data section.
Every tensor's `data_offsets` are relative to the data section; together they must tile it exactly.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidax.translator.dtypes import SAFETENSORS_DTYPES, safetensors_code
from vidax.translator.errors import FormatError, brief, describe

HEADER_CAP = 100 * 1024 * 1024  # the reference implementation refuses larger headers too
MAX_OFFSET = 1 << 62  # a dimension or byte offset above this is corrupt
MAX_RANK = 64
_PAGE = mmap.PAGESIZE


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its file, dtype, shape and byte span in the file."""

    name: str
    path: Path
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def _fail(path: Path, what: str, tensor: str | None = None) -> FormatError:
    where = f"{path}" + (f", tensor {brief(tensor, 120)}" if tensor else "")
    return FormatError(f"{where}: {what}")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"the name {brief(next(k for k in keys if keys.count(k) > 1))} appears twice in one object")
    return dict(pairs)


def _read_header(path: Path, size: int, fh) -> tuple[dict, int]:
    if size < 8:
        raise _fail(path, f"truncated file ({size} bytes, no header length)")
    (n,) = struct.unpack("<Q", fh.read(8))
    if n > HEADER_CAP:
        raise _fail(path, f"header length {n} above the {HEADER_CAP}-byte cap")
    if 8 + n > size:
        raise _fail(path, f"header length {n} runs past the end of the {size}-byte file (truncated?)")
    raw = fh.read(n)
    try:
        header = json.loads(raw, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON, 4,300-digit ints, deep nesting, twice-named
        raise _fail(path, f"header is not valid JSON ({describe(err)})") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    return header, 8 + n


def _is_offset(value: object) -> bool:
    return type(value) is int and 0 <= value < MAX_OFFSET


def _tensor_info(path: Path, name: str, entry: object, base: int, data_len: int) -> TensorInfo:
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise _fail(path, "entry lacks dtype, shape or data_offsets", name)
    code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(code, str) or code not in SAFETENSORS_DTYPES:
        raise _fail(path, f"unknown dtype {brief(code)}", name)
    if not (isinstance(shape, list) and len(shape) <= MAX_RANK and all(_is_offset(d) for d in shape)):
        raise _fail(path, f"invalid shape {brief(shape)}", name)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_offset(o) for o in offsets)):
        raise _fail(path, f"invalid data_offsets {brief(offsets)}", name)
    begin, end = offsets
    if not 0 <= begin <= end <= data_len:
        raise _fail(path, f"data_offsets {offsets} out of bounds of the {data_len}-byte data section", name)
    dtype = SAFETENSORS_DTYPES[code]
    expected = math.prod(shape) * dtype.itemsize
    if expected != end - begin:
        raise _fail(path, f"shape {brief(shape)} x {code} is {brief(expected)} bytes but data_offsets span {end - begin}", name)
    return TensorInfo(name, path, dtype, tuple(shape), base + begin, base + end)


def _check_tiling(path: Path, infos: list[TensorInfo], base: int, data_len: int) -> None:
    cursor = base
    for info in sorted(infos, key=lambda i: (i.start, i.end)):
        if info.start < cursor:
            raise _fail(path, "data_offsets overlap the previous tensor", info.name)
        if info.start > cursor:
            raise _fail(path, f"gap of {info.start - cursor} bytes before this tensor's data", info.name)
        cursor = info.end
    if cursor != base + data_len:
        raise _fail(path, f"{base + data_len - cursor} bytes of the data section belong to no tensor")


class SafetensorsFile:
    """One safetensors file, memory-mapped; `array(name)` is a zero-copy read-only view."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                header, base = _read_header(self.path, size, fh)
                self._mmap = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except OSError as err:
            raise FormatError(f"{self.path}: cannot read ({err.strerror})") from None
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise _fail(self.path, "__metadata__ must map strings to strings")
        self.metadata: dict[str, str] = meta
        infos = [_tensor_info(self.path, k, v, base, size - base) for k, v in header.items()]
        _check_tiling(self.path, infos, base, size - base)
        self.tensors: dict[str, TensorInfo] = {i.name: i for i in infos}

    def array(self, name: str) -> np.ndarray:
        info = self.tensors[name]
        count = math.prod(info.shape)
        if count == 0:
            return np.empty(info.shape, info.dtype)
        return np.frombuffer(self._mmap, info.dtype, count, info.start).reshape(info.shape)

    def release(self, name: str) -> None:
        """Drop the pages of `name` from this process's resident set (they stay in the page cache)."""
        info = self.tensors[name]
        start = info.start - info.start % _PAGE
        length = info.end - start
        if self._mmap is None or length <= 0 or not hasattr(mmap, "MADV_DONTNEED"):
            return
        self._mmap.madvise(mmap.MADV_DONTNEED, start, length)


def drop_pages(array: np.ndarray) -> bool:
    """Drop the pages under `array`, a view of a file mapping, from this process's resident set (they stay in the
    page cache; reading the view again faults them back). For a host tree whose leaves went to an accelerator:
    their pages no longer need to count in the host's memory. False when `array` is no view of a mapping."""
    mapping = array
    while mapping is not None and not isinstance(mapping, mmap.mmap):  # views, then numpy's memoryview of the map
        mapping = mapping.obj if isinstance(mapping, memoryview) else getattr(mapping, "base", None)
    if mapping is None or not hasattr(mmap, "MADV_DONTNEED") or array.nbytes == 0:
        return False
    start = array.ctypes.data - np.frombuffer(mapping, np.uint8).ctypes.data
    aligned = start - start % _PAGE
    mapping.madvise(mmap.MADV_DONTNEED, aligned, start + array.nbytes - aligned)
    return True


def read_index(path: Path) -> dict[str, Path]:
    """Parse a `*.safetensors.index.json`: tensor name -> shard path (shards must exist, beside or below it)."""
    try:
        index = json.loads(path.read_text())
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError
    except (OSError, ValueError, RecursionError, LookupError, TypeError):
        raise FormatError(f"{path}: not a valid safetensors index (needs a 'weight_map' object)") from None
    shards = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise FormatError(f"{path}: shard {brief(shard)} of tensor {brief(name)} is not a file name in its folder")
        shard_path = path.parent / shard
        if not shard_path.is_file():
            raise FormatError(f"{path}: shard {brief(shard)} of tensor {brief(name)} is missing")
        shards[name] = shard_path
    return shards


# ----------------------------------------------------------------------------- writing


# Where the data starts, files vidax writes put it at a multiple of this (the header is padded with spaces, as the
# format allows), so that each tensor whose predecessors' sizes are multiples of it starts aligned too: JAX's CPU
# client places an array of 64-byte-aligned memory without copying it (an mmapped folder stays file pages).
DATA_ALIGNMENT = 64


def header_bytes(entries: Iterable[tuple[str, np.dtype, tuple[int, ...]]], metadata: dict[str, str]) -> bytes:
    """Serialise a header for tensors laid out back to back in the given order, the data starting at a multiple
    of `DATA_ALIGNMENT` bytes."""
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, dtype, shape in entries:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        header[name] = {"dtype": safetensors_code(dtype), "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % DATA_ALIGNMENT)
    return struct.pack("<Q", len(raw)) + raw


def write_chunks(fh, chunks: Iterator[np.ndarray]) -> None:
    """Write arrays' bytes in C order without an intermediate copy when they are contiguous."""
    for chunk in chunks:
        fh.write(np.ascontiguousarray(chunk).reshape(-1).view(np.uint8))
