"""One generation, top to bottom: settings → mesh → noise → encode → sample → decode.

Every value is made by one piece and passed to the next as an argument; the family's pieces are
documented in `vidax.zoo.generator.contract`. `vidax.zoo.api.generate` (the library call behind `vidax-gen`)
builds the family, chooses the layout, calls `generate_video` and writes the outputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import jax
import numpy as np

from vidax.zoo.generator.contract import Decoded, Family, Inputs, Settings
from vidax.zoo.generator.options import GenerateOptions, GenerateResult, check_output_room
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.progress import Progress, StageTimer
from vidax.zoo.generator.stages import Run, StageCache
from vidax.zoo.step_caches.methods import config_from_options


@dataclasses.dataclass(frozen=True)
class Request:
    """A request read and checked against the model: its settings, inputs and initial latents."""

    settings: Settings
    inputs: Inputs
    latents: np.ndarray  # [1, C, F', H', W'] float32 (--latents, else seeded noise)


def prepare(family: Family, options: GenerateOptions) -> Request:
    """Validate a request before any work: every one-line error a user can cause is raised here."""
    if options.offload_chunk is not None and options.offload_chunk < 1:
        raise PipelineError(f"--offload-chunk must be at least 1 block, got {options.offload_chunk}")
    config_from_options(options)  # --cache and its knobs
    family.check_multiprocess_source()
    family.adapters  # LoRAs found and hashed (one line if not) before any work
    inputs = family.read_inputs(options)
    s = family.resolve_settings(options, inputs.images)
    check_output_room(options, s, family.latent_shape(s))  # room for the outputs, before any work
    inputs = dataclasses.replace(inputs, negative_prompt=s.negative_prompt if family.needs_negative(s) else None)
    return Request(s, inputs, family.initial_latents(s, options))


def size_note(family: Family, options: GenerateOptions, s: Settings, frames_out: int) -> str | None:
    """One line when the run's size is not the one asked for: a family runs a size its reference accepts at the
    size the reference runs it (`Family.fit_sizes`: Wan's 6 frames as 5, a height off the grid floored), or its
    VAE decodes fewer frames than it sampled for (LTX-2 and HunyuanVideo take any count and decode 8k + 1 or
    4k + 1 of them, as their pipelines do), and the reference warns when it rounds, so vidax says so too. None
    when every size asked for is the one run."""
    run = {"height": s.height, "width": s.width, "frames": frames_out}
    changed = [f"--{what} {asked} as {run[what]}" for what in ("height", "width", "frames")
               if (asked := getattr(options, what)) is not None and run[what] != asked]
    if not changed:
        return None
    return (f"note: {family.name} runs {', '.join(changed)}: its reference pipeline rounds these sizes to the "
            f"ones it generates")


def generate_video(family: Family, options: GenerateOptions, progress: Progress | None = None, *,
                   cache: StageCache | None = None, ahead: Any = None) -> GenerateResult:
    """Encode -> sample -> decode; returns float32 frames `[F, H, W, 3]` in [0, 1] and the final latents.

    `cache` keeps every placed weight for the next call (a long-lived process); None releases them.
    `ahead`: a background compile of the decode's programs (`vidax.zoo.plan.ahead`), waited for before the decode
    (it started first, so waiting costs less than compiling a unit a second time beside it).
    `--dtype float32` traces every program at the highest matmul precision: a TPU otherwise multiplies
    fp32 operands in bf16 passes (and a GPU in TF32), so "float32" would not be fp32.
    """
    with matmul_precision(options.dtype):
        try:
            return _generate_video(family, options, progress, cache, ahead)
        except BaseException:
            if ahead is not None:  # no decode follows: the background compile stops
                ahead.cancel()
            raise


def matmul_precision(dtype: str | None):
    """The matmul precision a run of `--dtype dtype` traces at: "highest" for float32, else as it is."""
    return jax.default_matmul_precision("highest") if dtype == "float32" else contextlib.nullcontext()


def _generate_video(family: Family, options: GenerateOptions, progress: Progress | None,
                    cache: StageCache | None, ahead: Any) -> GenerateResult:
    from vidax.zoo.compute.distributed import agree, run_record

    timer = StageTimer(progress)
    if ahead is not None:  # the decode's compiles begin once the first denoise step ran (`plan.ahead`)
        timer.on_mark.append(lambda name: ahead.start() if name.endswith("first step") else None)
    try:  # everything before the first step that involves other processes
        request = prepare(family, options)
        s = request.settings
        run = Run(family, options, family.make_mesh(options), timer.progress, timer, cache)
        with timer.stage("encode"):
            cond = jax.block_until_ready(family.encode(run, s, request.inputs))
    except BaseException as err:
        agree(err, "preparation")
        raise
    # every process resolved the request alike (settings, mesh, latents), or all stop naming the difference
    agree(None, "preparation", same=lambda: run_record(s, options, run.mesh, request.latents))
    try:
        latents = family.sample(run, s, request.latents, cond)
        if ahead is not None:
            ahead.join()
        with timer.stage("decode"):
            decoded: Decoded = family.decode(run, s, latents)
    finally:
        run.close()
    final = np.asarray(latents) if decoded.latents is None else decoded.latents
    settings = {**dataclasses.asdict(options), **dataclasses.asdict(s), "model": family.name,
                "variant": family.entry.variant, "weights_source": family.source.label,
                "latent_shape": list(family.latent_shape(s)), **decoded.settings, **family.lora_settings()}
    settings["size_note"] = size_note(family, options, s, len(decoded.frames))
    settings["moments"] = dict(timer.marks)  # when the run's firsts happened (epoch seconds): time to first step
    settings["resident_after_stage"] = dict(timer.resident)  # host bytes as each stage ended
    settings["resident_parts_after_stage"] = dict(timer.resident_parts)  # the same by kind (anon, file, shmem)
    settings["programs_by_stage"] = dict(timer.programs)  # what each stage compiled or loaded itself
    if ahead is not None and ahead.thread is not None:
        settings["compile_ahead"] = ahead.figures()
    if options.cache is not None:  # per step and CFG branch: whether the full DiT ran
        settings["step_cache_steps"] = run.step_cache_log
    return GenerateResult(frames=np.asarray(decoded.frames, np.float32), latents=final, fps=s.fps,
                          settings=settings, times=timer.times, audio=decoded.audio, sample_rate=decoded.sample_rate)
