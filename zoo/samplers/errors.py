"""The samplers' exception types: one-line messages a user can act on."""

from __future__ import annotations

from vidax.translator import VidaxError


class SamplerError(VidaxError):
    """Base class for sampler failures."""


class SamplerConfigError(SamplerError, ValueError):
    """A schedule or stepper was configured with values it cannot run (names the value)."""


class NonFiniteLatentsError(SamplerError, FloatingPointError):
    """A sampling step produced NaN or Inf latents; the message names the step and timestep."""
