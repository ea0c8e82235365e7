"""One generation's runtime, handed to every stage as an argument: `Run`.

A family's pieces (`encode`, `sample`, `decode`) receive the run and use it for what the runtime owns:
the stage weights (`load` → use → `done`, kept with `--keep-stages`), host-seeded noise, the mesh, the
progress bars and stage timing. Nothing a family computes is stored here: values go back to the
caller as return values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.compute.progress import Progress, StageTimer, release
from vidax.zoo.compute.transfer import to_devices

Params = dict[str, Any]


@dataclasses.dataclass
class StageCache:
    """Placed weights that outlive one generation, for a long-lived process (the server): each stage's by
    (component, spec, dtype), each denoiser's by (component, spec, dtype, layout, file, weights dtype) plus,
    where LoRAs cannot be switched on its placed weights, the LoRAs merged in (`vidax.zoo.weights.lora_switch`). A run
    given a cache keeps every weight it places there and releases none; `release` frees them all."""

    weights: dict = dataclasses.field(default_factory=dict)
    denoisers: dict = dataclasses.field(default_factory=dict)

    def release(self) -> None:
        release(list(self.weights.values()))
        for denoiser in self.denoisers.values():
            denoiser.release()
        self.weights.clear()
        self.denoisers.clear()


@dataclasses.dataclass
class Run:
    """The runtime of one generation (see the module docstring).

    Args:
      family: the model (its configs say where each component's weights are).
      options: the request, its layout chosen.
      mesh: the DiT's mesh (None on one device).
      progress, timer: progress hooks and per-stage wall times.
      cache: where placed weights outlive the run (None: released as each stage ends, or kept to the
        run's end with `--keep-stages`).
    """

    family: Any
    options: GenerateOptions
    mesh: Any = None
    progress: Progress = dataclasses.field(default_factory=Progress)
    timer: StageTimer = dataclasses.field(default_factory=StageTimer)
    cache: StageCache | None = None
    resident: dict = dataclasses.field(default_factory=dict)  # stage weights kept by --keep-stages
    step_cache_log: list = dataclasses.field(default_factory=list)  # --cache: per step, whether the full DiT ran

    def __post_init__(self):
        if self.cache is not None:
            self.resident = self.cache.weights

    @property
    def keeps_weights(self) -> bool:
        """Whether a finished stage's weights stay placed (`--keep-stages`, or a cache)."""
        return self.cache is not None or not self.options.release_stages

    @property
    def dtype(self) -> str | None:
        """The user's `--dtype` (None: each component's registry/spec policy)."""
        return self.options.dtype

    # --- stage weights ------------------------------------------------------------------------

    def load_tree(self, component: str, spec: str, subfolders: Sequence[str | None] = (None,),
                  dtype: str | None = None, loras: tuple | None = None) -> Mapping[str, np.ndarray]:
        """A component's host tree (mmapped where possible), not placed (`loras`: see `family.load_tree`)."""
        return self.family.load_tree(component, spec, subfolders, dtype, progress=self.progress, loras=loras)

    def load(self, component: str, spec: str, subfolders: Sequence[str | None] = (None,),
             dtype: str | None = None) -> Params:
        """A stage's weights on the default device (one `device_put`); the stage `done`s them when it ends."""
        key = (component, spec, dtype)
        if key in self.resident:
            return self.resident[key]
        return self.place(self.load_tree(component, spec, subfolders, dtype), key)

    def load_part(self, part, dtype: str | None = None) -> Params:
        """`load` of a registry component (its own dtype and files unless `--dtype` says otherwise)."""
        return self.load(part.component, part.spec, part.subfolders, dtype or self.options.dtype or part.dtype)

    def place(self, tree: Mapping[str, np.ndarray], key: Any = None) -> Params:
        """A host tree on the default device (`compute.transfer.to_devices`: bounded host memory on an
        accelerator); kept under `key` with `--keep-stages`."""
        params = to_devices(traverse_util.unflatten_dict(dict(tree), sep="/"))
        if key is not None and self.keeps_weights:
            self.resident[key] = params
        return params

    def done(self, params: Any) -> None:
        """A stage is over: free its weights unless they are kept (`--keep-stages`)."""
        if not self.keeps_weights:
            release(params)

    def close(self) -> None:
        """Free every kept stage's weights (the generation is over), unless a cache keeps them."""
        if self.cache is not None:
            return
        for params in self.resident.values():
            release(params)
        self.resident.clear()

    # --- noise and devices --------------------------------------------------------------------

    def host_noise(self, stream: int, index: int, shape: tuple[int, ...]) -> np.ndarray:
        """Noise the reference draws inside sampling or decoding, from the run's seed on the host:
        stream 1 = sampler steps, 2 = decode, 3+ = family use; `index` the step or chunk."""
        return host_noise(self.options.seed, stream, index, shape)

    def gather(self, x: jax.Array) -> jax.Array:
        """A mesh output back on one device of this process (for the VAE and the output files)."""
        from vidax.zoo.compute.distributed import to_host

        return jnp.asarray(to_host(x))


def host_noise(seed: int, stream: int, index: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal float32 noise named by (seed, stream, index): the same on every backend and mesh."""
    rng = np.random.default_rng([seed, stream, index])
    return rng.standard_normal(shape, dtype=np.float32)
