"""Errors the zoo raises for requests it cannot honour, defined on the lowest floor so that every room
can raise them without importing upward (docs/ARCHITECTURE.md, "Floors and rooms")."""

from vidax.translator import VidaxError


class PipelineError(VidaxError, ValueError):
    """A generation request the pipeline cannot honour (bad size, frame count, latents, image)."""
