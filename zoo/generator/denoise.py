"""The sampling loop every family shares: denoisers on the devices, a schedule, one pass from noise.

    schedule = family.schedule(s, latents.shape)            # stepper, expert per step, knobs per step
    with Denoisers(run, family, s) as denoisers:             # placed on first use, one expert at a time
        latents = denoise(run, denoisers, schedule, latents, cond, partial(family.predictor, s))

A family whose story is one pass calls nothing itself (`Family.sample` does the above); one with two
passes or a substitution around the loop (LTX-Video, LTX-2 I2V, Wan TI2V) composes these in its own
`sample`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec

from vidax.zoo.parts.dit import block_groups, forward, place_resident
from vidax.zoo.weights.dit_file import dit_file
from vidax.zoo.compute.progress import release
from vidax.zoo.generator.stages import Params, Run
from vidax.zoo.compute.runtime import platform, runs_layer_by_layer

# predictor(expert, dit, step) -> a frozen, hashable callable predict(run, latents, timestep, cond, knobs)
PredictorFor = Callable[[int, Any, int], Callable]


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One pass's steps: the stepper, the denoiser (expert) of each step, and each step's knobs.

    Args:
      stepper: a configured stepper (`vidax.zoo.samplers`).
      experts: the denoiser index of every step (one DiT: all 0).
      knobs: `knobs(step, expert)` -> the per-step values the predictor reads as data (guidance
        scales, the next sigma, ...).
    """

    stepper: Any
    experts: tuple[int, ...]
    knobs: Callable[[int, int], Any]

    @property
    def timesteps(self) -> np.ndarray:
        return np.asarray(self.stepper.timesteps)


@partial(jax.jit, static_argnums=(0, 1))
def _resident_prediction(predict, dit, params, latents, timestep, cond, knobs):
    """One compiled unit per step: the family's prediction with the whole DiT resident."""
    return predict(partial(forward, dit, params), latents, timestep, cond, knobs)


@dataclasses.dataclass
class LoadedDiT:
    """A denoiser on the devices: all weights resident, or embed/head resident and blocks streamed."""

    dit: Any
    params: Params
    streamed: Any = None
    host_blocks: Any = None
    loras: tuple = ()  # in a cache: the LoRAs switched onto `params` (`vidax.zoo.weights.lora_switch.switch`)
    applied: Any = None  # ... and the base arrays they replaced

    def predict(self, predict, latents, timestep, cond, knobs):
        if self.streamed is None:
            return _resident_prediction(predict, self.dit, self.params, latents, timestep, cond, knobs)
        run = partial(self.streamed, self.params, self.host_blocks)  # host loop over compiled chunks
        return predict(run, latents, timestep, cond, knobs)

    def release(self) -> None:
        release((self.params, self.host_blocks))


def place_dit(run: Run, family: Any, part: Any, s: Any, dtype: str | None, loras: tuple | None = None) -> LoadedDiT:
    """One denoiser's weights on the devices: resident (on the mesh under its rules) or, with
    `--offload-chunk`, embed/head resident and the blocks streamed from host memory (`loras`: see
    `family.load_tree`)."""
    from vidax.zoo.weights.offload import place_layers, stream_blocks
    from vidax.zoo.weights.quantize import device_specs, device_weights, file_kernels
    from vidax.zoo.compute.sharding import place

    tree = run.load_tree(part.component, part.spec, part.subfolders, dtype, loras=loras)
    dit = family.build_dit(part, tree, s)
    # --weights-dtype fp8/int8: block kernels 8-bit with their scales (vidax.zoo.weights.quantize), an 8-bit file's own kept
    choice, groups = getattr(run.options, "weights_dtype", None), tuple(g.name for g in block_groups(dit))
    stored = file_kernels(dit_file(run.options, part.component), part.spec, tree, groups, choice)
    tree = device_weights(tree, groups, choice, stored)
    rules = family.transformer_rules
    if run.options.offload_chunk is not None:
        params, streamed, host = stream_blocks(dit, tree, run.options.offload_chunk, rules, run.mesh)
        return LoadedDiT(dit, params, streamed, host)
    if run.mesh is None and runs_layer_by_layer(tree):  # a large model on a CPU: one block per program
        return LoadedDiT(dit, *place_layers(dit, tree))
    if run.mesh is not None:
        return LoadedDiT(dit, place(tree, device_specs(dit.logical_specs(), tree), rules, run.mesh))
    return LoadedDiT(dit, place_resident(dit, traverse_util.unflatten_dict(dict(tree), sep="/")))


class Denoisers:
    """A model's denoisers (`family.dit_parts(s)`), placed when a step first needs one and one at a
    time (switching experts frees the other); a context manager that releases them at its end.
    Passes that share a denoiser share one `Denoisers`."""

    def __init__(self, run: Run, family: Any, s: Any, parts: Sequence[Any] | None = None, dtype: str | None = None):
        self.run, self.family, self.settings = run, family, s
        self.parts = list(family.dit_parts(s) if parts is None else parts)
        self.dtype = run.dtype if dtype is None else dtype
        self.placed: dict[int, LoadedDiT] = {}

    def get(self, expert: int) -> LoadedDiT:
        if expert in self.placed:
            return self.placed[expert]
        cache = self.run.cache
        part = self.parts[expert]
        options = self.run.options  # a DiT from its own file (--transformer), 8-bit on device (--weights-dtype)
        key = (part.component, part.spec, self.dtype, _layout(self.run), dit_file(options, part.component),
               getattr(options, "weights_dtype", None))
        if cache is not None:
            self.placed[expert] = self._cached(cache, key, part)
            return self.placed[expert]
        self.release()  # one denoiser's weights at a time
        self.placed[expert] = place_dit(self.run, self.family, part, self.settings, self.dtype)
        return self.placed[expert]

    def _cached(self, cache, key: tuple, part) -> LoadedDiT:
        """The denoiser kept in `cache` (placed by an earlier run of this process, or now) carrying this run's
        LoRAs: switched on its placed weights where `lora_switch` can, else placed merged under its own key
        (a base with other LoRAs merged in is freed first)."""
        from vidax.zoo.weights import lora_switch

        adapters = self.family.adapters.get(part.component, ())
        # a CPU run's layers are placed from the folder's file pages (no copy): a LoRA change places them again
        switch = lora_switch.switchable(self.run.options) and (self.run.mesh is not None or platform() != "cpu")
        key = key if switch else (*key, lora_switch.identity(adapters))
        if key not in cache.denoisers:
            self.release()  # one denoiser's weights at a time
            for other in [k for k in cache.denoisers if k[:6] == key[:6]]:  # the same base, other LoRAs
                cache.denoisers.pop(other).release()
            cache.denoisers[key] = place_dit(self.run, self.family, part, self.settings, self.dtype,
                                             loras=() if switch else None)
        loaded = cache.denoisers[key]
        if switch:
            lora_switch.switch(loaded, adapters, lambda active: lora_switch.host_leaves(
                self.run, part, self.dtype, active))
        return loaded

    def release(self) -> None:
        """Free the placed denoisers (a cache keeps its own for later runs)."""
        if self.run.cache is None:
            for denoiser in self.placed.values():
                denoiser.release()
        self.placed.clear()

    def __enter__(self) -> "Denoisers":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _layout(run: Run) -> tuple:
    """What a placed denoiser's buffers depend on besides its weights: the mesh and the offload chunk."""
    mesh = None if run.mesh is None else (tuple(run.mesh.shape.items()), tuple(run.mesh.device_ids.flat))
    return mesh, run.options.offload_chunk


def denoise(run: Run, denoisers: Denoisers, schedule: Schedule, latents: Any, cond: Any,
            predictor: PredictorFor, *, stage: str = "denoise", noise_stream: int = 1) -> jax.Array:
    """One pass of the sampling loop from `latents`; returns the final latents on one device.

    Args:
      predictor: `predictor(expert, dit, step)` -> the frozen prediction of that step (a new value
        when a step's configuration changes: one compiled unit each).
      noise_stream: the `host_noise` stream of a stochastic sampler's per-step noise (a second pass
        takes its own, so that the two are not the same draws).
    """
    from vidax.zoo.compute.runtime import use_mesh
    from vidax.zoo.samplers import sample
    from vidax.zoo.step_caches.methods import step_cache_for

    stepper = schedule.stepper
    if run.mesh is not None:  # small inputs whole on every device; the DiT's constraints split them
        host = jax.tree.map(np.asarray, (latents, cond))  # each process holds the same values
        latents, cond = jax.device_put(host, NamedSharding(run.mesh, PartitionSpec()))
    else:
        latents = jnp.asarray(latents)
    last = [time.perf_counter()]
    branches = denoisers.family.cache_branches(denoisers.settings)
    cache = step_cache_for(run.options, branches, stepper.num_steps,  # None: no --cache
                           percents=(denoisers.family, denoisers.settings), timesteps=np.asarray(stepper.timesteps))

    def model_fn(x, i, t):
        expert = schedule.experts[i]
        denoiser = denoisers.get(expert)
        run.timer.mark(f"{stage} weights placed")
        predict = predictor(expert, denoiser.dit, i)
        if cache is not None:  # the step's decision first: a skipped step runs no DiT
            return cache.predict(denoiser, predict, expert, i, x, jnp.float32(t), cond, schedule.knobs(i, expert))
        return denoiser.predict(predict, x, jnp.float32(t), cond, schedule.knobs(i, expert))

    def on_step(i, x):
        x.block_until_ready()
        run.timer.mark(f"{stage} first step")
        now = time.perf_counter()
        run.progress.advance(stage, 1, f"{now - last[0]:.3g} s/step")
        last[0] = now

    noise = None
    if getattr(stepper, "stochastic", False):
        noise = lambda i, shape: run.host_noise(noise_stream, i, shape)  # noqa: E731
    rules = denoisers.family.transformer_rules
    on_mesh = use_mesh(run.mesh, rules) if run.mesh is not None else contextlib.nullcontext()
    with run.timer.stage(stage, total=stepper.num_steps), on_mesh:
        out = sample(model_fn, stepper, latents, callback=on_step, step_noise=noise)
        if cache is not None:
            run.step_cache_log.extend(cache.finish(stage))
        return run.gather(out)
