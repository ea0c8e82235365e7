"""Plan a conversion from headers alone (strict accounting), then stream it leaf by leaf.

Planning reads no tensor data: every violation is collected and raised as one AccountingError
before any byte is copied. Execution fills each leaf with one fused transform+cast copy per source
tensor (none when layout and dtype already match), stacked leaves into one preallocated buffer.
"""

from __future__ import annotations

import mmap
import os
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from vidax.translator import ops
from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.errors import AccountingError
from vidax.translator.spec import LEAF_PATH, Layout, Rule, Spec

_TILE = 256  # tile edge for transposed copies (measured fastest of 64..1024 for bf16 here)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_BF16 = np.dtype(ml_dtypes.bfloat16)
_LARGE = 4 << 20  # bytes from which leaves get their own anonymous mapping
_PARALLEL = 1 << 20  # elements from which a transposed copy is split across two threads


@dataclass(frozen=True)
class Piece:
    """One source tensor's contribution to a leaf."""

    key: str
    rule: Rule
    shape: tuple[int, ...]  # after op and split
    layer: int | None = None
    part: str | None = None  # fuse part name
    src_range: tuple[int, int] | None = None  # split range along rule.split.axis


@dataclass
class LeafPlan:
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    pieces: list[Piece]
    stacked: bool
    fuse_offsets: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


# ----------------------------------------------------------------------------- planning


def _claims(layout: Layout, keys: list[str], problems: list[str]) -> dict[str, tuple[Rule, re.Match]]:
    claimed = {}
    for key in keys:
        rules = [(r, m) for r in layout.rules if (m := r.pattern.fullmatch(key))]
        ignored = [p.pattern for p in layout.ignore if p.fullmatch(key)]
        if len(rules) + bool(ignored) > 1:
            names = [r.label for r, _ in rules] + [f"ignore {p!r}" for p in ignored[:1]]
            problems.append(f"source key {key!r} claimed by {' and '.join(names)}")
        elif rules:
            claimed[key] = rules[0]
        elif not ignored:
            problems.append(f"source key {key!r} matched by no rule or ignore pattern")
    return claimed


def _pieces(key: str, rule: Rule, match, ckpt: Checkpoint, spec: Spec) -> list[tuple[str, Piece]]:
    groups = match.groupdict()
    shape = ops.out_shape(rule, ckpt.info(key).shape)
    layer = None
    if rule.stack:
        if not groups[rule.stack].isdigit():
            raise ValueError(f"stack group {rule.stack!r} is {groups[rule.stack]!r}, not a layer number")
        layer = int(groups[rule.stack])
    part = groups[rule.fuse.group] if rule.fuse else None
    if part is not None and part not in rule.fuse.order:
        raise ValueError(f"fuse part {part!r} is not in the declared order {list(rule.fuse.order)}")
    if not rule.split:
        return [(rule.target.render(groups, spec.renames), Piece(key, rule, shape, layer, part))]
    out = []
    for name, (start, stop) in zip(rule.split.parts, ops.split_bounds(rule, shape)):
        part_shape = list(shape)
        part_shape[rule.split.axis] = stop - start
        target = rule.target.render({**groups, "part": name}, spec.renames)
        out.append((target, Piece(key, rule, tuple(part_shape), layer, None, (start, stop))))
    return out


def _leaf(path: str, pieces: list[Piece]) -> tuple[LeafPlan | None, list[str]]:
    rules = {p.rule.label for p in pieces}
    if len(rules) > 1:
        return None, [f"leaf {path!r} produced by several rules: {', '.join(sorted(rules))}"]
    rule = pieces[0].rule
    by_layer: dict[int | None, list[Piece]] = defaultdict(list)
    for piece in pieces:
        by_layer[piece.layer].append(piece)
    problems: list[str] = []
    if rule.stack and sorted(by_layer) != list(range(len(by_layer))):
        problems.append(f"leaf {path!r}: stacked layers {sorted(by_layer)} are not 0..{len(by_layer) - 1}")
    shapes, offsets = set(), {}
    for layer, group in sorted(by_layer.items(), key=lambda kv: kv[0] or 0):
        shape, offsets, problem = _combine(path, rule, group)
        if problem:
            problems.append(problem)
        shapes.add(shape)
    if len(shapes) > 1:
        problems.append(f"leaf {path!r}: stacked layers disagree on shape {sorted(shapes)}")
    if problems:
        return None, problems
    shape = shapes.pop()
    if rule.stack:
        shape = (len(by_layer), *shape)
    return LeafPlan(path, shape, None, pieces, bool(rule.stack), offsets), []


def _combine(path: str, rule: Rule, group: list[Piece]) -> tuple[tuple[int, ...], dict, str | None]:
    """Shape of one (layer's) leaf from its pieces: exactly one piece, or every fuse part once."""
    keys = ", ".join(sorted(p.key for p in group))
    if not rule.fuse:
        if len(group) > 1:
            return group[0].shape, {}, f"leaf {path!r} produced by several source keys: {keys}"
        return group[0].shape, {}, None
    parts = {p.part: p for p in group}
    if len(parts) != len(group) or set(parts) != set(rule.fuse.order):
        return (), {}, f"leaf {path!r}: fuse needs each of {list(rule.fuse.order)} once, got {keys}"
    axis = rule.fuse.axis
    first = parts[rule.fuse.order[0]].shape
    offsets, cursor = {}, 0
    for name in rule.fuse.order:
        shape = parts[name].shape
        if len(shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(shape, first)) if i != axis % len(first)):
            return (), {}, f"leaf {path!r}: fuse parts have incompatible shapes ({keys})"
        offsets[name] = (cursor, cursor + shape[axis])
        cursor += shape[axis]
    fused = list(first)
    fused[axis] = cursor
    return tuple(fused), offsets, None


def plan(spec: Spec, layout: Layout, ckpt: Checkpoint, expected: Mapping[str, tuple[int, ...]] | None = None,
         dtype: np.dtype | None | str = "spec") -> list[LeafPlan]:
    """Every leaf of the converted tree with its shape, dtype and pieces; raises AccountingError."""
    problems: list[str] = []
    claimed = _claims(layout, ckpt.keys(), problems)
    by_target: dict[str, list[Piece]] = defaultdict(list)
    fired: set[int] = set()
    for key, (rule, match) in claimed.items():
        fired.add(rule.index)
        try:
            for target, piece in _pieces(key, rule, match, ckpt, spec):
                by_target[target].append(piece)
        except (ValueError, KeyError) as err:
            problems.append(f"source key {key!r} ({rule.label}): {err.args[0]}")
    problems += [f"{r.label} matched no source key" for r in layout.rules if r.index not in fired and not r.optional]
    default = spec.dtype.default if isinstance(dtype, str) else dtype
    leaves = []
    for path, pieces in by_target.items():
        if not LEAF_PATH.fullmatch(path):
            problems.append(f"target {path!r} (from {pieces[0].key!r}) is not a valid tree path")
            continue
        leaf, leaf_problems = _leaf(path, pieces)
        problems += leaf_problems
        if leaf:
            # "keep" (None) means the source's own dtype
            policy = spec.dtype.for_leaf(path, default)
            source_dtype = ckpt.info(pieces[0].key).dtype
            leaf.dtype = source_dtype if policy is None else policy
            if _is_fp8(source_dtype):
                # an fp8 checkpoint's values are meaningful only with its per-tensor scales (e.g.
                # HunyuanVideo's `*_fp8_map.pt`); cast or kept as is, they would be wrong weights
                problems.append(f"{pieces[0].key!r} in {ckpt.path_of(pieces[0].key)} is float8 ({source_dtype}): fp8 checkpoints need their "
                                "scales, which specs do not apply; convert the bf16/fp32 release instead")
                continue
            leaves.append(leaf)
    problems += _layer_count_problems(leaves)
    problems += _expected_problems(leaves, expected if expected is not None else spec.shapes)
    if problems:
        raise AccountingError(problems)
    return leaves


def _is_fp8(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name.startswith("float8")


def _layer_count_problems(leaves: list[LeafPlan]) -> list[str]:
    """Stacked leaves under one top-level name (`blocks/...`) must agree on their layer count."""
    counts: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for leaf in leaves:
        if leaf.stacked:
            counts[leaf.path.split("/", 1)[0]][leaf.shape[0]].append(leaf.path)
    problems = []
    for prefix, by_count in counts.items():
        if len(by_count) > 1:
            usual = max(by_count, key=lambda n: len(by_count[n]))
            odd = [f"{p} has {n}" for n, paths in by_count.items() if n != usual for p in paths]
            problems.append(f"stacked leaves under {prefix!r} have {usual} layers but {', '.join(odd)}")
    return problems


def flat_shapes(expected: Mapping, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """Flatten an expected tree: "/"-joined paths or nested dicts, leaves as shapes or objects with `.shape`
    (e.g. the ShapeDtypeStructs of `jax.eval_shape`)."""
    out = {}
    for key, value in expected.items():
        if isinstance(value, Mapping):
            out.update(flat_shapes(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = tuple(int(d) for d in getattr(value, "shape", value))
    return out


def _expected_problems(leaves: list[LeafPlan], expected: Mapping | None) -> list[str]:
    if expected is None:
        return []
    expected = flat_shapes(expected)
    produced = {leaf.path: leaf.shape for leaf in leaves}
    problems = [f"expected leaf {p!r} not produced" for p in expected if p not in produced]
    problems += [f"leaf {p!r} produced but not expected" for p in produced if p not in expected]
    problems += [f"leaf {p!r} has shape {list(s)}, expected {list(expected[p])}"
                 for p, s in produced.items() if p in expected and tuple(expected[p]) != s]
    return problems


# ----------------------------------------------------------------------------- execution


def _source_view(piece: Piece, ckpt: Checkpoint) -> np.ndarray:
    view = ops.apply(piece.rule, ckpt.array(piece.key))
    if piece.src_range is not None:
        index = [slice(None)] * view.ndim
        index[piece.rule.split.axis] = slice(*piece.src_range)
        view = view[tuple(index)]
    return view


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src in one pass, with the cast fused in.

    Same-dtype copies move raw bits (unsigned views skip ml_dtypes' slow generic loops) and
    bf16 -> fp32 writes the bf16 bits into the high half of each fp32 word, which is exact.
    Transposed 2-D sources are copied in square tiles so both sides stay in cache.
    """
    if dst.dtype == src.dtype and dst.dtype.itemsize in _UINT:
        bits = _UINT[dst.dtype.itemsize]
        _tiled(dst.view(bits), src.view(bits))
    elif src.dtype == _BF16 and dst.dtype == np.float32 and dst.ndim >= 1 and dst.size:
        halves = dst.view(np.uint16).reshape(*dst.shape, 2)  # little-endian: [..., 1] is the high half
        halves[..., 0] = 0
        _tiled(halves[..., 1], src.view(np.uint16))
    else:
        _tiled(dst, src)


def _tiled(dst: np.ndarray, src: np.ndarray) -> None:
    if src.ndim != 2 or src.flags.c_contiguous or src.size < _TILE * _TILE:
        np.copyto(dst, src, casting="unsafe")
        return
    rows = src.shape[0]
    workers = _workers()
    if workers is None or rows < 2 * _TILE or src.size < _PARALLEL:
        _tiled_rows(dst, src, 0, rows)
        return
    # row bands on both cores: numpy's copy loops release the GIL; each byte is still copied once
    step = -(-rows // (2 * _TILE)) * _TILE
    futures = [workers.submit(_tiled_rows, dst, src, start, min(start + step, rows)) for start in range(step, rows, step)]
    _tiled_rows(dst, src, 0, step)
    for future in futures:
        future.result()


def _tiled_rows(dst: np.ndarray, src: np.ndarray, start: int, stop: int) -> None:
    cols = src.shape[1]
    for i in range(start, stop, _TILE):
        for j in range(0, cols, _TILE):
            np.copyto(dst[i:i + _TILE, j:j + _TILE], src[i:i + _TILE, j:j + _TILE], casting="unsafe")


_POOL: list = []


def _workers() -> ThreadPoolExecutor | None:
    """One helper thread for transposed copies when the machine has a second core (else None)."""
    if not _POOL:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="vidax-copy") if cores > 1 else None)
    return _POOL[0]


def _fill(leaf: LeafPlan, pieces: list[Piece], dst: np.ndarray, ckpt: Checkpoint) -> None:
    for piece in pieces:
        region = dst
        if piece.part is not None:
            start, stop = leaf.fuse_offsets[piece.part]
            index = [slice(None)] * dst.ndim
            index[piece.rule.fuse.axis] = slice(start, stop)
            region = dst[tuple(index)]
        _copy(region, _source_view(piece, ckpt))
        ckpt.release(piece.key)


def zero_copy_view(leaf: LeafPlan, ckpt: Checkpoint) -> np.ndarray | None:
    """The source view itself when it already is the leaf (one piece, same dtype, C-contiguous)."""
    if leaf.stacked or len(leaf.pieces) != 1 or leaf.pieces[0].part is not None:
        return None
    view = _source_view(leaf.pieces[0], ckpt)
    return view if view.dtype == leaf.dtype and view.flags.c_contiguous else None


def host_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised host array; large ones come from an anonymous mmap without numpy's
    transparent-huge-page advice, whose page compaction cost several seconds of system time per
    GB on a busy host (measured here: 2.9 GB tree 4.3 s vs 10-12 s with the advice)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < _LARGE:
        return np.empty(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype, nbytes // dtype.itemsize).reshape(shape)


def materialize(leaf: LeafPlan, ckpt: Checkpoint, alloc=host_empty) -> np.ndarray:
    """The leaf as an array: a zero-copy view when possible, else one preallocated buffer."""
    view = zero_copy_view(leaf, ckpt)
    if view is not None:
        return view
    out = alloc(leaf.shape, leaf.dtype)
    if leaf.stacked:
        for layer, pieces in _by_layer(leaf).items():
            _fill(leaf, pieces, out[layer], ckpt)
    else:
        _fill(leaf, leaf.pieces, out, ckpt)
    return out


def chunks(leaf: LeafPlan, ckpt: Checkpoint, alloc=host_empty) -> Iterator[np.ndarray]:
    """The leaf's bytes in C order as a few arrays (one per layer when stacked), for streaming writes.

    `alloc(shape, dtype)` supplies the buffers; a writer that recycles them saves the page faults
    of fresh allocations. Each yielded buffer is new to the caller (never refilled while held).
    """
    if not leaf.stacked:
        yield materialize(leaf, ckpt, alloc)
        for piece in leaf.pieces:  # a zero-copy leaf was written straight from the mapping
            ckpt.release(piece.key)
        return
    for _, pieces in sorted(_by_layer(leaf).items()):
        buffer = alloc(leaf.shape[1:], leaf.dtype)
        _fill(leaf, pieces, buffer, ckpt)
        yield buffer


def _by_layer(leaf: LeafPlan) -> dict[int, list[Piece]]:
    out: dict[int, list[Piece]] = defaultdict(list)
    for piece in leaf.pieces:
        out[piece.layer].append(piece)
    return out
