"""8-bit safetensors with scales (fp8 and int8 DiTs for ComfyUI and friends), dequantized as read.

The files people download to fit a DiT in memory store its linear weights in 8 bits beside a scale, in
a few spellings (the layer is the weight's key without `.weight`):

| who | weight | scale | also |
|---|---|---|---|
| ComfyUI, legacy | F8 `.weight` | fp32 `.scale_weight` (per tensor) | `scaled_fp8` marker tensor, `.scale_input` |
| ComfyUI, current | F8 / I8 `.weight` | `.weight_scale` | `.input_scale`; format per layer in `.comfy_quant` (JSON bytes) or the header's `_quantization_metadata` |
| lightx2v | F8 / I8 `.weight` | `.weight_scale` per output channel (`[out, 1]`) | |
| LTX-2 fp8 | F8 `.weight` | `.weight_scale` | `.input_scale` |
| Kijai | F8 `.weight` | none (a plain cast) | |

A weight reads as float(w) x scale in float32 (one rounding, as `w.float() * scale` in torch), the scale
per tensor (one value) or per output row (`[out]` or `[out, 1]`). Scales and markers are consumed here;
input (activation) scales only matter to an fp8 matmul, which a dequantized weight does not run, and are
dropped. Block formats (nvfp4, mxfp8, int8 blockwise, rotated int8) are refused, all layers in one line.
A file with none of these marks is returned as it was.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math

import ml_dtypes
import numpy as np

from vidax.translator.errors import FormatError, brief
from vidax.translator.formats.safetensors_io import TensorInfo

SUPPORTED_FORMATS = ("float8_e4m3fn", "float8_e5m2", "int8_tensorwise")
# the storage each supported format may use (ComfyUI may keep fp8 bytes in a uint8 container)
STORAGE = {"float8_e4m3fn": ("float8_e4m3fn", "uint8"), "float8_e5m2": ("float8_e5m2", "uint8"),
           "int8_tensorwise": ("int8",)}
FORMAT_OF_DTYPE = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int8": "int8_tensorwise"}
WEIGHT_SCALES = (".weight_scale", ".scale_weight")
INPUT_SCALES = (".input_scale", ".scale_input")
FORMAT_TENSOR = ".comfy_quant"
MARKER = "scaled_fp8"
METADATA_KEY = "_quantization_metadata"
BLOCK_FORMAT_TENSORS = (".weight_scale_2", ".pre_quant_scale")  # only block formats (nvfp4, awq) carry these
SIDE_SUFFIXES = WEIGHT_SCALES + INPUT_SCALES + BLOCK_FORMAT_TENSORS + (FORMAT_TENSOR,)
FLOAT32 = np.dtype("<f4")
SUPPORTED_LINE = "float8_e4m3fn, float8_e5m2 and int8_tensorwise, scaled per tensor or per output channel"


# What a scaled 8-bit weight reads as: "dequantized" (float(w) x scale), or one factor alone (`reading`).
READ_AS = contextvars.ContextVar("vidax_scaled_read_as", default="dequantized")


@contextlib.contextmanager
def reading(part: str):
    """Within it, scaled files' 8-bit weights read as one factor: "values" (float(w), no scale) or "scales"
    (the weight's scale broadcast to its shape; NaN for a tensor that has none). A conversion through a spec
    then carries each factor where the weight goes (transposed, stacked, fused), so the two trees give the
    converted kernel's 8-bit values and its scales."""
    if part not in ("values", "scales"):
        raise ValueError(f"reading {part!r}: want 'values' or 'scales'")
    token = READ_AS.set(part)
    try:
        yield
    finally:
        READ_AS.reset(token)


def _eight_bit(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name in FORMAT_OF_DTYPE


def is_scaled(reader) -> bool:
    """Whether a safetensors file carries fp8 tensors, int8 weights, scales or quantization marks."""
    def marked(key: str, dtype: str) -> bool:
        return (key == MARKER or key.endswith(SIDE_SUFFIXES) or dtype.startswith("float8")
                or (dtype == "int8" and key.endswith(".weight")))

    return METADATA_KEY in reader.metadata or any(marked(k, np.dtype(i.dtype).name) for k, i in reader.tensors.items())


def wrap(reader):
    """`reader` itself, or a `ScaledFile` over it when it holds scaled 8-bit weights."""
    return ScaledFile(reader) if is_scaled(reader) else reader


def _declared_formats(reader) -> dict[str, dict]:
    """layer -> its quantization config, from `.comfy_quant` tensors and the header's metadata."""
    declared: dict[str, dict] = {}
    if METADATA_KEY in reader.metadata:
        try:
            layers = json.loads(reader.metadata[METADATA_KEY])["layers"]
            declared.update({name: dict(config) for name, config in layers.items()})
        except (ValueError, LookupError, TypeError, AttributeError):
            raise FormatError(f"{reader.path}: {METADATA_KEY} in the header is not a JSON object with 'layers'") from None
    for key in reader.tensors:
        if key.endswith(FORMAT_TENSOR):
            try:
                config = json.loads(reader.array(key).tobytes().decode("utf-8"))
                config["format"]
            except (ValueError, LookupError, TypeError):
                raise FormatError(f"{reader.path}, tensor {brief(key, 120)}: not JSON naming a 'format'") from None
            declared[key[:-len(FORMAT_TENSOR)]] = config
    return declared


def _scale_fits(scale_shape: tuple[int, ...], weight_shape: tuple[int, ...]) -> bool:
    """One value, or one per output row (`[out]` / `[out, 1, ...]`)."""
    if math.prod(scale_shape) == 1 and len(scale_shape) <= len(weight_shape):
        return True
    per_row = (weight_shape[0],) + (1,) * (len(weight_shape) - 1)
    return len(weight_shape) >= 2 and scale_shape in (per_row, weight_shape[:1])


class ScaledFile:
    """A safetensors file whose 8-bit weights read dequantized (float32); the reader interface of the
    translator (`path`, `metadata`, `tensors`, `array`, `release`) with the scales and marks consumed."""

    def __init__(self, reader):
        self.path, self.metadata, self._reader = reader.path, reader.metadata, reader
        declared = _declared_formats(reader)
        self._weights: dict[str, tuple[str | None, str, str]] = {}  # weight key -> (scale key, storage, format)
        consumed, problems, unsupported = set(), [], []
        for key, info in reader.tensors.items():
            if not key.endswith(".weight"):
                continue
            layer = key[:-len(".weight")]
            scale = next((layer + s for s in WEIGHT_SCALES if layer + s in reader.tensors), None)
            config = declared.get(layer)
            storage = np.dtype(info.dtype).name
            fmt = config["format"] if config else FORMAT_OF_DTYPE.get(storage)
            if fmt is None:
                if scale is not None:
                    problems.append(f"{key} is {storage}, yet has a scale {scale}")
                continue
            if fmt not in SUPPORTED_FORMATS or (config or {}).get("convrot") or any(
                    layer + s in reader.tensors for s in BLOCK_FORMAT_TENSORS):
                unsupported.append(f"{layer} ({fmt}{', rotated' if (config or {}).get('convrot') else ''})")
                continue
            problem = self._check(key, info, scale, fmt, storage)
            if problem:
                problems.append(problem)
                continue
            self._weights[key] = (scale, storage, fmt)
            consumed.add(scale)
        consumed |= {k for k in reader.tensors if k == MARKER or k.endswith(INPUT_SCALES + (FORMAT_TENSOR,))}
        orphans = [k for k in reader.tensors if k.endswith(WEIGHT_SCALES) and k not in consumed]
        problems += [f"{k} scales no 8-bit weight" for k in orphans]
        self._raise(unsupported, problems)
        self.tensors: dict[str, TensorInfo] = {}
        for key, info in reader.tensors.items():
            if key in consumed:
                continue
            widened = key in self._weights or _eight_bit(info.dtype)
            self.tensors[key] = TensorInfo(key, info.path, FLOAT32, info.shape, info.start, info.end) if widened else info

    def _check(self, key: str, info: TensorInfo, scale: str | None, fmt: str, storage: str) -> str | None:
        if storage not in STORAGE[fmt]:
            return f"{key} is declared {fmt} but stored as {storage}"
        if scale is None:
            return None if fmt.startswith("float8") and storage != "uint8" else f"{key} ({fmt}) has no weight scale"
        shape = self._reader.tensors[scale].shape
        if not _scale_fits(shape, info.shape):
            return f"scale {scale} has shape {list(shape)}, which fits neither one value nor one per row of {list(info.shape)}"
        return None

    def _raise(self, unsupported: list[str], problems: list[str]) -> None:
        if unsupported:
            listed = ", ".join(unsupported[:6]) + (f" and {len(unsupported) - 6} more" if len(unsupported) > 6 else "")
            raise FormatError(f"{self.path}: quantized layers in formats not supported: {listed} (supported: {SUPPORTED_LINE})")
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise FormatError(f"{self.path}: {problems[0]}{more}")

    def array(self, name: str) -> np.ndarray:
        raw = self._reader.array(name)
        part = READ_AS.get()
        if name not in self._weights:
            if part == "scales":
                return np.full(raw.shape, np.nan, FLOAT32)
            return raw.astype(FLOAT32) if _eight_bit(raw.dtype) else raw
        scale, storage, fmt = self._weights[name]
        if storage == "uint8":  # fp8 bytes in a uint8 container
            raw = raw.view(getattr(ml_dtypes, fmt))
        values = raw.astype(FLOAT32)
        if part == "scales":
            factor = np.ones((), FLOAT32) if scale is None else self._reader.array(scale).astype(FLOAT32)
            factor = factor.reshape(()) if factor.size == 1 else factor.reshape((-1,) + (1,) * (values.ndim - 1))
            return np.broadcast_to(factor, values.shape).astype(FLOAT32)
        if scale is not None and part == "dequantized":
            factor = self._reader.array(scale).astype(FLOAT32)
            factor = factor.reshape(()) if factor.size == 1 else factor.reshape((-1,) + (1,) * (values.ndim - 1))
            np.multiply(values, factor, out=values)
        return values

    def release(self, name: str) -> None:
        self._reader.release(name)
        scale = self._weights.get(name, (None,))[0]
        if scale is not None:
            self._reader.release(scale)
