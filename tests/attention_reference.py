"""Softmax attention in float64 NumPy: the reference every attention kernel is held to (on CPU in
tests/runtime, on the chip in tests/tpu). Imports neither torch nor the code under test."""

from __future__ import annotations

import numpy as np


def naive(q, k, v, mask=None, scale=None):
    """softmax(q kᵀ · scale) v over `[B, S, H, D]` inputs; `mask` `[B, Skv]` (True = attend); rows with no
    key to attend are zero."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = np.einsum("bqhd,bkhd->bhqk", q, k, optimize=True) * scale
    if mask is not None:
        logits = np.where(np.asarray(mask)[:, None, None, :], logits, -np.inf)
    with np.errstate(invalid="ignore"):
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs = probs / probs.sum(-1, keepdims=True)
    return np.nan_to_num(np.einsum("bhqk,bkhd->bqhd", probs, v, optimize=True))
