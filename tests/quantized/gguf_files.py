"""GGUF files written the way ComfyUI-GGUF's converter writes them, for the quantized-checkpoint tests.

`gguf.GGUFWriter` writes the file and `gguf.quants.quantize` encodes the types it can (F32, F16, BF16,
Q8_0, Q5_0, Q4_0, Q4_1). gguf's Python has no K-quant encoder, so Q4_K and Q6_K are encoded here with a
plain round-to-nearest per sub-block (the bit layout is the one `gguf.quants.Q4_K/Q6_K.dequantize_blocks`
unpack; how well it rounds does not matter to a parity test run on the dequantized weights).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

QK_K = 256


def _fp16_scale(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fp16 scale, its fp32 value) with zero where the block is all zeros."""
    half = value.astype(np.float16)
    return half, half.astype(np.float32)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros(np.broadcast_shapes(a.shape, b.shape), np.float32), where=b > 0)


def encode_q6_k(x: np.ndarray) -> np.ndarray:
    """Rows of 256 values -> Q6_K blocks [n, 210]: ql[128] qh[64] int8 scales[16] fp16 d."""
    sub = x.reshape(-1, 16, 16).astype(np.float32)
    per_sub = np.abs(sub).max(-1) / 31
    d16, d = _fp16_scale(per_sub.max(-1) / 127)
    scales = np.clip(np.round(_safe_div(per_sub, d[:, None])), 0, 127).astype(np.int8)
    step = d[:, None] * scales.astype(np.float32)
    q = (np.clip(np.round(_safe_div(sub, step[..., None])), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)
    low, high = q & 15, q >> 4
    ql = (low[..., :64] | (low[..., 64:] << 4)).reshape(-1, 128)
    qh = (high[..., 0:32] | (high[..., 32:64] << 2) | (high[..., 64:96] << 4) | (high[..., 96:] << 6)).reshape(-1, 64)
    return np.concatenate([ql, qh, scales.view(np.uint8), d16.view(np.uint8).reshape(-1, 2)], axis=1)


def encode_q4_k(x: np.ndarray) -> np.ndarray:
    """Rows of 256 values -> Q4_K blocks [n, 144]: fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, qs[128]."""
    sub = x.reshape(-1, 8, 32).astype(np.float32)
    low = np.minimum(sub.min(-1), 0)
    scale, mins = (sub.max(-1) - low) / 15, -low
    d16, d = _fp16_scale(scale.max(-1) / 63)
    m16, dmin = _fp16_scale(mins.max(-1) / 63)
    sc = np.clip(np.round(_safe_div(scale, d[:, None])), 0, 63).astype(np.uint8)
    mn = np.clip(np.round(_safe_div(mins, dmin[:, None])), 0, 63).astype(np.uint8)
    step, offset = d[:, None] * sc, dmin[:, None] * mn
    q = np.clip(np.round(_safe_div(sub + offset[..., None], step[..., None])), 0, 15).astype(np.uint8)
    packed = np.concatenate([sc[:, :4] | ((sc[:, 4:] >> 4) << 6), mn[:, :4] | ((mn[:, 4:] >> 4) << 6),
                             (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)], axis=1)
    q = q.reshape(-1, 4, 2, 32)
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([d16.view(np.uint8).reshape(-1, 2), m16.view(np.uint8).reshape(-1, 2), packed, qs], axis=1)


OWN_ENCODERS = {"Q6_K": encode_q6_k, "Q4_K": encode_q4_k}


def encode(data: np.ndarray, kind: str) -> np.ndarray:
    """`data` (fp32, last axis a whole number of blocks) in ggml type `kind`, as GGUFWriter takes it."""
    qtype = gguf.GGMLQuantizationType[kind]
    if kind in OWN_ENCODERS:
        rows = data.reshape(-1, data.shape[-1])
        blocks = OWN_ENCODERS[kind](rows.reshape(-1, QK_K))
        return blocks.reshape(*data.shape[:-1], -1)
    return gguf.quants.quantize(data.astype(np.float32), qtype)


def random_blocks(kind: str, rows: int, row_values: int, rng: np.random.Generator) -> np.ndarray:
    """Arbitrary valid blocks of `kind` (random bytes, finite fp16 scales): every bit pattern the format
    allows for quants, scales and mins, for the bit-for-bit dequantization test."""
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[kind]]
    raw = rng.integers(0, 256, (rows, row_values // block, size), dtype=np.uint8)
    scale_bytes = {"Q6_K": [208], "Q4_K": [0, 2], "Q5_K": [0, 2]}.get(kind, [0])
    for at in scale_bytes:
        raw[..., at:at + 2] = rng.uniform(-0.05, 0.05, raw.shape[:2]).astype(np.float16)[..., None].view(np.uint8)
    return raw.reshape(rows, -1)


def write_gguf(path: Path, arch: str, tensors: list[tuple[str, np.ndarray, str]], *, flatten: tuple[str, ...] = (),
               raw: dict[str, tuple[np.ndarray, str]] | None = None) -> Path:
    """Write `tensors` ([(name, fp32 array in torch order, ggml type)]) as ComfyUI-GGUF does.

    `flatten`: names stored as rows of 256 with their shape in `comfy.gguf.orig_shape.NAME`;
    `raw`: name -> (already encoded array, ggml type), written as is.
    """
    writer = gguf.GGUFWriter(path, arch)
    for name, data, kind in tensors:
        if name in flatten:
            writer.add_array(f"comfy.gguf.orig_shape.{name}", [int(d) for d in data.shape])
            data = data.reshape(-1, QK_K)
        writer.add_tensor(name, encode(data, kind), raw_dtype=gguf.GGMLQuantizationType[kind])
    for name, (encoded, kind) in (raw or {}).items():
        writer.add_tensor(name, encoded, raw_dtype=gguf.GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def dequantized(encoded: np.ndarray, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """gguf's own float32 dequantization of `encoded`, in `shape` (the reference values)."""
    return gguf.quants.dequantize(encoded, gguf.GGMLQuantizationType[kind]).reshape(shape)
