"""Which DiT calls of a diffusers pipeline ran the full model, read off the model while the pipeline runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def recorded_calls(model: torch.nn.Module, inner: torch.nn.Module) -> Iterator[list[bool]]:
    """Per call of `model`, whether `inner` (a submodule of a block the cache skips) ran: a list filled as
    the pipeline runs. A cache hook that skips a call replaces those blocks, so `inner` does not run."""
    calls: list[bool] = []
    pre = model.register_forward_pre_hook(lambda *_: calls.append(False))
    post = inner.register_forward_hook(lambda *_: calls.__setitem__(-1, True))
    try:
        yield calls
    finally:
        pre.remove(), post.remove()


def full_dit_calls(model: torch.nn.Module, inner: torch.nn.Module) -> list[bool]:
    """`recorded_calls` for the rest of the model's life (a module fixture's one cached run)."""
    calls: list[bool] = []
    model.register_forward_pre_hook(lambda *_: calls.append(False))
    inner.register_forward_hook(lambda *_: calls.__setitem__(-1, True))
    return calls
