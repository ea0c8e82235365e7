"""Shared pieces of the HunyuanVideo 1.0 parity tests: tree and tensor helpers."""

from __future__ import annotations

import numpy as np
from flax.traverse_util import unflatten_dict


def unflatten(tree) -> dict:
    return unflatten_dict({k: np.asarray(v) for k, v in dict(tree).items()}, sep="/")


def to_np(t) -> np.ndarray:
    return t.detach().float().numpy()
