"""Encoder test plumbing: convert a tiny reference through its spec against the module's own tree, compare."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import pytest
import numpy as np
import torch
from flax import traverse_util

from vidax.translator.api import convert



# the translator's torch-zip (.pth) reader lands separately; the official-layout round trips run once it exists
requires_pth_reader = pytest.mark.skipif(importlib.util.find_spec("vidax.translator.formats.torch_zip") is None,
                                         reason="vidax.translator.formats.torch_zip (.pth reader) not available yet")


def expected_shapes(module, *example_args) -> dict[str, tuple[int, ...]]:
    """Flat `{path: shape}` of `module`'s params, from `jax.eval_shape` (nothing is allocated)."""
    shapes = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *example_args))
    flat = traverse_util.flatten_dict(shapes["params"], sep="/")
    return {path: tuple(leaf.value.shape if hasattr(leaf, "value") else leaf.shape) for path, leaf in flat.items()}


def converted_params(spec: str, source: Path, module, *example_args, **kwargs) -> dict:
    """Convert `source` through the shipped `spec` in fp32, checked against the module's own tree."""
    tree = convert(spec, source, expected_shapes(module, *example_args), dtype="float32", **kwargs)
    return {"params": traverse_util.unflatten_dict({k: np.asarray(v) for k, v in tree.items()}, sep="/")}


def assert_close(ours, reference, atol=1e-5, rtol=1e-5, what=""):
    reference = reference.detach().numpy() if isinstance(reference, torch.Tensor) else np.asarray(reference)
    np.testing.assert_allclose(np.asarray(ours), reference, atol=atol, rtol=rtol, err_msg=what)
