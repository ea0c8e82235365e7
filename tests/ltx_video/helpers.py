"""Shared pieces of the LTX-Video parity tests: saving references, converting, tensor helpers."""

from __future__ import annotations

import jax
import numpy as np
from flax import traverse_util

from vidax.translator import convert


def to_np(t) -> np.ndarray:
    return t.detach().float().numpy()


def unflatten(tree: dict) -> dict:
    return traverse_util.unflatten_dict(dict(tree), sep="/")


def load_params(spec: str, source, shapes: dict, **kwargs) -> dict:
    """Convert `source` through the shipped `spec` in fp32, checked against the model's own tree."""
    tree = convert(spec, source, shapes, dtype="float32", **kwargs)
    return jax.device_put(unflatten(tree))
