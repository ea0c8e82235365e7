"""Shared test plumbing: perturb a tiny reference, save it in its repo layout, convert it, compare."""

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
requires_pth_reader = pytest.mark.skipif(importlib.util.find_spec("vidax.translator.torch_zip") is None,
                                         reason="vidax.translator.torch_zip (.pth reader) not available yet")


def perturb(model: torch.nn.Module, seed: int = 0, std: float = 0.02) -> torch.nn.Module:
    """Add N(0, std) to every float parameter so zero-initialised biases and ones-scales matter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point():
                param.add_(torch.randn(param.shape, generator=gen) * std)
    return model.eval()


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
