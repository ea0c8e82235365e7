"""The closed op vocabulary: each op is a shape rule plus a view (no data is copied here)."""

from __future__ import annotations

import math

import numpy as np

from vidax.translator.spec import Rule


def _conv_perm(ndim: int) -> tuple[int, ...]:
    # torch ConvNd (O, I, *k) -> flax (*k, I, O)
    return (*range(2, ndim), 1, 0)


def out_shape(rule: Rule, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape after the rule's op; raises ValueError with a reason when the op does not apply."""
    op, args = rule.op, rule.args
    if op == "identity":
        return shape
    if op == "linear":
        if len(shape) != 2:
            raise ValueError(f"linear needs a 2-D weight, got shape {list(shape)}")
        return shape[::-1]
    if op == "conv":
        if len(shape) < 3:
            raise ValueError(f"conv needs an (O, I, *k) kernel, got shape {list(shape)}")
        return tuple(shape[p] for p in _conv_perm(len(shape)))
    if op == "transpose":
        if sorted(args["perm"]) != list(range(len(shape))):
            raise ValueError(f"perm {args['perm']} does not fit shape {list(shape)}")
        return tuple(shape[p] for p in args["perm"])
    if op == "reshape":
        return _reshaped(shape, list(args["shape"]))
    if op == "squeeze":
        axis = args["axis"] % max(len(shape), 1)
        if not shape or shape[axis] != 1:
            raise ValueError(f"cannot squeeze axis {args['axis']} of shape {list(shape)}")
        return shape[:axis] + shape[axis + 1:]
    if op == "expand":
        axis = args["axis"] % (len(shape) + 1)
        return shape[:axis] + (1,) + shape[axis:]
    raise AssertionError(op)


def _reshaped(shape: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    size = math.prod(shape)
    if target.count(-1) == 1:
        known = math.prod(d for d in target if d != -1)
        if known and size % known == 0:
            target = [size // known if d == -1 else d for d in target]
    if math.prod(target) != size or any(d < 0 for d in target):
        raise ValueError(f"cannot reshape {list(shape)} to {target}")
    return tuple(target)


def apply(rule: Rule, array: np.ndarray) -> np.ndarray:
    """The rule's op as a view of `array` (reshape of a contiguous source is a view too)."""
    op, args = rule.op, rule.args
    if op == "identity":
        return array
    if op == "linear":
        return array.T
    if op == "conv":
        return array.transpose(_conv_perm(array.ndim))
    if op == "transpose":
        return array.transpose(args["perm"])
    if op == "reshape":
        return array.reshape(_reshaped(array.shape, list(args["shape"])))
    if op == "squeeze":
        return np.squeeze(array, axis=args["axis"])
    if op == "expand":
        return np.expand_dims(array, axis=args["axis"])
    raise AssertionError(op)


def split_bounds(rule: Rule, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """[start, stop) of each split part along the split axis of the op's output."""
    split = rule.split
    if not -len(shape) <= split.axis < len(shape):
        raise ValueError(f"split axis {split.axis} out of range for shape {list(shape)}")
    total = shape[split.axis]
    sizes = split.sizes or ()
    if not sizes:
        if total % len(split.parts):
            raise ValueError(f"axis {split.axis} of size {total} does not split into {len(split.parts)} equal parts")
        sizes = (total // len(split.parts),) * len(split.parts)
    if sum(sizes) != total:
        raise ValueError(f"split sizes {list(sizes)} do not sum to {total}")
    starts = np.cumsum((0, *sizes))
    return [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]
