"""Shared pieces of the Cosmos-Predict2.5 tests: the torchvision stand-in, seeded tensors."""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def install_torchvision_standin() -> None:
    """diffusers' Cosmos transformer resizes the padding mask with torchvision (not installed here);
    torchvision's tensor NEAREST resize is `F.interpolate(mode="nearest")`, which stands in."""
    from diffusers.models.transformers import transformer_cosmos

    def resize(x, size, interpolation=None):
        return F.interpolate(x, size=list(size), mode="nearest")

    transformer_cosmos.transforms = types.SimpleNamespace(
        functional=types.SimpleNamespace(resize=resize), InterpolationMode=types.SimpleNamespace(NEAREST="nearest"))


def randn(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
