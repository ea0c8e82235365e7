"""`--weights-dtype {bf16,fp8,int8}`: a DiT's block linear weights kept in 8 bits on the device.

The block matrices are nearly all of a DiT's bytes. Each stacked block kernel `[layers, in, out]` is
quantized on the host when the DiT is placed, with one scale per output channel (`amax over in / 127`
for int8, `/ 448` for fp8 e4m3), and placed as the 8-bit kernel plus a float32 `kernel_scale`
`[layers, out]` beside it. `vidax.zoo.compute.layers.Dense` finds the scale and dequantizes inside the jitted
product (the 8-bit values widened to the compute dtype, times the scale), so only one layer's
kernel is ever wide, transiently. Embeddings, norms, modulation tables and the head stay as converted.

Only DiTs whose every block linear is a `Dense` (which reads the scale) take it: a block reading a
quantized kernel directly would compute with unscaled values. `bf16` keeps the converted weights.
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np
from jax.sharding import PartitionSpec

from vidax.zoo.errors import PipelineError

STORAGE = {"fp8": np.dtype(ml_dtypes.float8_e4m3fn), "int8": np.dtype(np.int8)}
LARGEST = {"fp8": 448.0, "int8": 127.0}  # the format's largest finite magnitude (fp8 e4m3: 448)
WEIGHTS_DTYPES = ("bf16", *STORAGE)
SCALE = "kernel_scale"
# families whose block linears are all `Dense`s (checked: tests/quantized/test_weights_dtype.py, test_weights_dtype_families.py)
FAMILIES = ("wan", "hunyuan_video", "hunyuan_video15", "ltx_video", "ltx2", "cosmos", "cosmos3", "cogvideox")


def check_weights_dtype(options, family: str) -> None:
    """One line before any work: a known choice, a family that reads scales."""
    choice = getattr(options, "weights_dtype", None)
    if choice is None:
        return
    if choice not in WEIGHTS_DTYPES:
        raise PipelineError(f"unknown --weights-dtype {choice!r} (choose from {', '.join(WEIGHTS_DTYPES)})")
    if choice in STORAGE and family not in FAMILIES:
        raise PipelineError(f"--weights-dtype {choice} is not supported for {family} DiTs yet (only {', '.join(FAMILIES)})")


def block_kernel_paths(paths, groups: tuple[str, ...], ndims: Mapping[str, int]) -> list[str]:
    """The stacked block linear kernels: `GROUP/.../kernel` of rank 3 (`[layers, in, out]`)."""
    return [p for p in paths if p.split("/", 1)[0] in groups and p.endswith("/kernel") and ndims[p] == 3]


def quantize_kernel(kernel: np.ndarray, choice: str) -> tuple[np.ndarray, np.ndarray]:
    """`[layers, in, out]` -> (8-bit values, float32 scales `[layers, out]`), per output channel."""
    wide = np.asarray(kernel, np.float32)
    amax = np.abs(wide).max(axis=-2)
    scale = np.where(amax > 0, amax / LARGEST[choice], 1.0).astype(np.float32)
    scaled = wide / scale[..., None, :]
    if choice == "int8":
        return np.clip(np.rint(scaled), -127, 127).astype(np.int8), scale
    return scaled.astype(STORAGE[choice]), scale


def device_weights(tree: Mapping[str, np.ndarray], groups: tuple[str, ...], choice: str | None,
                   stored: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> dict[str, np.ndarray]:
    """The host tree to place: block kernels quantized (with their scales) for an 8-bit choice; those in
    `stored` (`file_kernels`: the file's own 8-bit values and scales) placed as the file has them."""
    tree = dict(tree)
    if choice not in STORAGE:
        return tree
    for path in block_kernel_paths(list(tree), groups, {p: np.ndim(a) for p, a in tree.items()}):
        kept = (stored or {}).get(path)
        tree[path], tree[path[:-len("kernel")] + SCALE] = kept if kept is not None else quantize_kernel(tree[path], choice)
    return tree


def file_kernels(path, spec: str, tree: Mapping[str, np.ndarray], groups: tuple[str, ...],
                 choice: str | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Block kernels an 8-bit `--transformer` safetensors file already holds in `choice`'s format, with one
    scale per tensor or per output channel: `{path: (8-bit values as stored, float32 scales [layers, out])}`,
    placed as they are (no round trip through bf16, no fresh scale). The spec converts the file twice more,
    reading values and scales apart (`scaled_io.reading`); a kernel is kept only if its scales are one per
    output channel, its values fit `choice` exactly and their product is the dequantized kernel in `tree`
    (the spec only moved them). Empty for any other file or choice."""
    from vidax.translator import convert
    from vidax.translator.formats import scaled_io
    from vidax.translator.formats.safetensors_io import SafetensorsFile

    if choice not in STORAGE or path is None or not str(path).endswith(".safetensors"):
        return {}
    if not scaled_io.is_scaled(SafetensorsFile(path)):
        return {}
    with scaled_io.reading("values"):
        values = convert(spec, path, dtype="float32")
    with scaled_io.reading("scales"):
        scales = convert(spec, path, dtype="float32")
    kept = {}
    for kernel in block_kernel_paths(list(tree), groups, {p: np.ndim(a) for p, a in tree.items()}):
        stored = _as_stored(values[kernel], scales[kernel], choice)
        if stored is not None and np.array_equal(
                (stored[0].astype(np.float32) * stored[1][..., None, :]).astype(tree[kernel].dtype), tree[kernel]):
            kept[kernel] = stored
    return kept


def _as_stored(values: np.ndarray, scales: np.ndarray, choice: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(values in `choice`'s storage, scales `[..., out]`) when the scales are one per output channel and the
    values are exactly representable; None otherwise."""
    scale = scales[..., 0, :]
    if not np.all(np.isfinite(scale)) or not np.array_equal(scales, np.broadcast_to(scale[..., None, :], scales.shape)):
        return None  # a weight without a scale, or a scale that varies along the input axis
    stored = np.clip(values, -128, 127).astype(np.int8) if choice == "int8" else values.astype(STORAGE[choice])
    if not np.array_equal(stored.astype(np.float32), values):
        return None  # e5m2 or int8 values asked as fp8 e4m3, fp8 asked as int8: requantized instead
    return stored, np.ascontiguousarray(scale, np.float32)


def device_specs(specs: dict, tree: Mapping[str, np.ndarray]) -> dict:
    """Logical specs for a tree that may hold `kernel_scale`s: a scale `[layers, out]` is split as its
    kernel's layer and output axes (tensor parallel splits both alike)."""
    from flax import traverse_util

    if not any(path.endswith("/" + SCALE) for path in tree):  # nothing quantized: the specs as they are
        return specs
    flat = dict(traverse_util.flatten_dict(specs, sep="/"))
    for path in tree:
        if path.endswith("/" + SCALE):
            kernel = tuple(flat[path[:-len(SCALE)] + "kernel"])
            flat[path] = PartitionSpec(kernel[0], kernel[-1])
    return traverse_util.unflatten_dict(flat, sep="/")


def placed_bytes(shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]], groups: tuple[str, ...], choice: str | None) -> int:
    """Bytes of the placed tree from leaf shapes and converted dtypes alone (`{path: (shape, dtype)}`)."""
    kernels = set(block_kernel_paths(list(shapes), groups, {p: len(s) for p, (s, _) in shapes.items()})) if choice in STORAGE else set()
    total = 0
    for path, (shape, dtype) in shapes.items():
        count = int(np.prod(shape, dtype=np.int64))
        if path in kernels:
            total += count * STORAGE[choice].itemsize + (count // shape[-2]) * 4  # values, then fp32 scales
        else:
            total += count * np.dtype(dtype).itemsize
    return total


def block_bytes_per_param(shapes: Mapping[str, tuple[int, ...]], groups: tuple[str, ...], choice: str | None,
                          width: int) -> float | None:
    """Placed bytes per block parameter for the memory planner (None: the weights' own `width`): 8-bit
    kernels with their fp32 scales, the blocks' other leaves at `width`."""
    if choice not in STORAGE:
        return None
    blocks = {p: (s, np.dtype(f"V{width}")) for p, s in shapes.items() if p.split("/", 1)[0] in groups}
    return placed_bytes(blocks, groups, choice) / sum(int(np.prod(s, dtype=np.int64)) for s, _ in blocks.values())


def quantized_job(job, dit, choice: str | None):
    """The planner's `job` for `dit` (a DiT module built from the config) with its block weights counted as
    `--weights-dtype` places them (8-bit kernels with their scales); unchanged for bf16 or no choice."""
    import dataclasses

    from vidax.zoo.parts.dit import block_groups

    if choice not in STORAGE:
        return job
    groups = tuple(g.name for g in block_groups(dit))
    return dataclasses.replace(job, block_weight_bytes=block_bytes_per_param(dit.param_shapes(), groups, choice,
                                                                             job.weight_bytes))
