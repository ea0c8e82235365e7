"""What `vidax-train` needs of a model family, over the zoo's `Family` (which it reuses for configs, weights,
text and image encoders and VAEs, so a sample is encoded exactly as a generation encodes its inputs).

A family's `TrainFamily`:

- `check()` refuses (one line) what it cannot train; `experts(s)` the denoisers to train and each one's share of
  the noise levels (Wan2.2 A14B: two, split at the model's boundary);
- `encode(run, s, sample, pixels, caption)` -> `{"latents": [1, C, F', H', W'], condition name: [1, ...]}` (the
  clean latents normalised as the pipeline's VAE step leaves them, and what the DiT takes besides them);
  `encode_text(run, s, caption)` the text conditions alone (the empty caption of `--caption-dropout`);
- `inputs(model)`: a frozen, hashable builder of the DiT's arguments from a batch (a jit static):
  `inputs(x0, noisy, timestep, sigmas, batch) -> (args, loss mask or None)` and `inputs.output(out, x0)`;
  `extras(batch, rng)` what a batch needs besides the encodings, drawn on the host (LTX-2's audio noise);
- `loss()`: `objective.Flow()` or `objective.VPrediction(...)`; `default_sampling` its noise levels;
- naming: `block_list` (the diffusers name of the stacked blocks in PEFT keys), `default_targets`, `text_keys`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from vidax.train.objective import Flow
from vidax.translator import VidaxError


class TrainRefused(VidaxError, ValueError):
    """A model `vidax-train` cannot train (one line)."""


@dataclasses.dataclass(frozen=True)
class Expert:
    """A denoiser to train: its registry component, its name in files and messages, and the noise levels it
    sees (σ in [low, high))."""

    component: str
    name: str = ""
    low: float = 0.0
    high: float = 1.0


class TrainFamily:
    """Base of the families `vidax-train` trains (module docstring)."""

    block_list: ClassVar[str] = "transformer_blocks"
    default_targets: ClassVar[tuple[str, ...]] = ("to_q", "to_k", "to_v", "to_out.0")
    text_keys: ClassVar[tuple[str, ...]] = ("text",)
    frame_step: ClassVar[int] = 4  # clips are 1 + frame_step * k frames
    first_frame_p: ClassVar[float] = 0.0  # default share of rows whose first latent frame is given clean
    default_sampling: ClassVar[str] = "shift"

    def __init__(self, family: Any):
        self.family = family

    @property
    def grid(self) -> int:
        """Height and width multiples (the VAE's spatial factor x the DiT's patch)."""
        raise NotImplementedError

    def check(self) -> None:
        """Raise `TrainRefused` for a model of the family that cannot be trained."""

    def experts(self, s: Any) -> list[Expert]:
        return [Expert("transformer")]

    def encode(self, run: Any, s: Any, pixels: np.ndarray, caption: str) -> dict:
        raise NotImplementedError

    def encode_text(self, run: Any, s: Any, caption: str) -> dict:
        raise NotImplementedError

    def inputs(self, model: Any, s: Any) -> Any:
        raise NotImplementedError

    def loss(self, s: Any) -> Any:
        return Flow()

    def trim(self, conds: list[dict]) -> dict:
        """`{condition name: length}` to cut every sample's condition `name` to along its first axis, where that
        cannot change the loss (padding the DiT masks out); {} keeps them whole."""
        return {}

    def extras(self, batch: dict, rng: np.random.Generator, s: Any) -> dict:
        """Arrays a batch needs besides its encodings (`[B, ...]`, drawn from `rng`; `s` the run's settings)."""
        return {}

    def dit_model(self, s: Any, dtype: str = "bfloat16") -> Any:
        """The DiT module from the configs alone (no weights: `vidax.train.bench` at real sizes)."""
        raise NotImplementedError

    def example_conditions(self, s: Any, batch: int, text: int) -> dict:
        """`{name: jax.ShapeDtypeStruct}` of a text-to-video batch's conditions with `text` valid prompt tokens
        (`vidax.train.bench`); the latents are the zoo family's `latent_shape`."""
        raise NotImplementedError

    def sized(self, s: Any, frames: int, height: int, width: int) -> Any:
        """The settings at one bucket's size."""
        return dataclasses.replace(s, frames=frames, height=height, width=width)

    def encoding_settings(self, s: Any) -> dict:
        """What a sample's encoding depends on besides its file, window, size and caption (the cache key)."""
        return {}


def first_frame_keep(batch: dict, frames: int) -> Any:
    """`[B, 1, F', 1, 1]`: 1 on the first latent frame of the rows given it clean (`batch["first_frame"]`)."""
    import jax.numpy as jnp

    keep = batch.get("first_frame")
    if keep is None:
        return None
    first = (jnp.arange(frames) == 0).astype(jnp.float32)
    return keep.astype(jnp.float32)[:, None, None, None, None] * first[None, None, :, None, None]
