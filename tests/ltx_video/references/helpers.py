"""Shared pieces of the LTX-Video parity tests: saving references, converting, tensor helpers."""

from __future__ import annotations

import jax

from vidax.translator import convert

from tests.oracle import to_np, unflatten  # noqa: F401  (the LTX-Video tests import them from here)


def load_params(spec: str, source, shapes: dict, **kwargs) -> dict:
    """Convert `source` through the shipped `spec` in fp32, checked against the model's own tree."""
    tree = convert(spec, source, shapes, dtype="float32", **kwargs)
    return jax.device_put(unflatten(tree))
