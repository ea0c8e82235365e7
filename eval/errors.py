"""What `vidax-eval` reports as one line: a user's mistake, never a bug."""

from __future__ import annotations

from vidax.translator import VidaxError


class EvalError(VidaxError, ValueError):
    """Clips, prompts, weights or settings that the metrics cannot use."""
