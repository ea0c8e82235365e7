"""Closed sets of dtype names: the safetensors codes and the names a spec or the CLI may use."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from vidax.translator.errors import SpecError

# safetensors dtype code -> numpy dtype (little-endian, as the format stores them).
SAFETENSORS_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
SAFETENSORS_CODES: dict[np.dtype, str] = {v: k for k, v in SAFETENSORS_DTYPES.items()}

# Names a spec's dtype policy or `--dtype` may use; "keep" leaves the source dtype unchanged.
POLICY_DTYPES: dict[str, np.dtype | None] = {
    "float32": np.dtype("float32"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype("float16"),
    "keep": None,
}


def policy_dtype(name: str, where: str) -> np.dtype | None:
    """Parse a dtype-policy name through the closed set; `where` names the spec field for the error."""
    if name not in POLICY_DTYPES:
        raise SpecError(f"{where}: unknown dtype {name!r} (choose from {', '.join(POLICY_DTYPES)})")
    return POLICY_DTYPES[name]


def safetensors_code(dtype: np.dtype) -> str:
    try:
        return SAFETENSORS_CODES[np.dtype(dtype)]
    except KeyError:
        raise SpecError(f"dtype {dtype} cannot be stored in safetensors") from None
