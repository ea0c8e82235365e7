"""Header-only checkpoints: the real models' tensor tables written as safetensors files whose data region
is never written (the file is truncated to its full size: a sparse file, no disk blocks), so a 14B model's
layout costs a few hundred kilobytes. What the translator plans from is the header; nothing reads the data.

The tables come from the reference classes built on the meta device (no memory), under the names their
libraries save (`references.saved_state`).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import torch

# safetensors dtype codes of the torch dtypes the meta models carry (floats are written as bf16, as released)
_CODES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL", torch.uint8: "U8"}
_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1}

Table = dict  # key -> (shape, safetensors dtype code)


def table_of(state: dict) -> Table:
    """`{key: (shape, code)}` of a (meta) state dict."""
    return {k: (tuple(v.shape), _CODES[v.dtype]) for k, v in state.items()}


def write_header_only(table: Table, path: Path) -> Path:
    """A safetensors file holding `table`'s header, its data region a hole of the full size."""
    header, offset = {}, 0
    for key, (shape, code) in sorted(table.items()):
        size = math.prod(shape) * _SIZES[code]
        header[key] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return path

