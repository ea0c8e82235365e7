"""Header-only checkpoints: the real models' tensor tables written as safetensors files whose data region
is never written (the file is truncated to its full size: a sparse file, no disk blocks), so a 14B model's
layout costs a few hundred kilobytes. What the translator plans from is the header; nothing reads the data.

The tables come from the reference classes built on the meta device (no memory), saved as their libraries
save them: diffusers' `save_pretrained` writes `state_dict()` as is; transformers' drops tied weights and
reverts its load-time renamings (`revert_weight_conversion`), so the keys are the ones on the Hub.
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


def diffusers_table(model: torch.nn.Module) -> Table:
    """What diffusers' `save_pretrained` writes: the state dict as it is."""
    return table_of(model.state_dict())


def transformers_table(model) -> Table:
    """What transformers' `save_pretrained` writes: tied weights dropped, load-time renamings reverted."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = remove_tied_weights_from_state_dict(model.state_dict(), model)
    return table_of(revert_weight_conversion(model, state))
