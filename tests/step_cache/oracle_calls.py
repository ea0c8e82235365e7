"""Which DiT calls of a diffusers pipeline ran the full model, read off the model while the pipeline runs."""

from __future__ import annotations

import torch


def full_dit_calls(model: torch.nn.Module, inner: torch.nn.Module) -> list[bool]:
    """Per call of `model`, whether `inner` (a submodule inside its first block) ran: a list filled as the
    pipeline runs. A cache hook that skips a call replaces the blocks, so `inner` does not run."""
    calls: list[bool] = []
    model.register_forward_pre_hook(lambda *_: calls.append(False))
    inner.register_forward_hook(lambda *_: calls.__setitem__(-1, True))
    return calls
