"""The library call behind `vidax-gen`: `generate(GenerateOptions(...))` chooses the layout, builds the
model's family, runs `vidax.zoo.generator.generation.generate_video` and writes the video, its sidecar and
(asked) the latents. `vidax.zoo` names it and what it takes (docs/ARCHITECTURE.md, "A generation from a program").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vidax.translator.output import staged_files
from vidax.zoo.compute.progress import Progress, StageTimer
from vidax.zoo.generator.options import GenerateOptions, GenerateResult, save_latents
from vidax.zoo.plan.layouts import choose_layout

def generate(options: GenerateOptions, progress: Progress | None = None, *, cache: Any = None) -> GenerateResult:
    """Build the model's pipeline, generate, and write the video, its sidecar JSON and (asked) the latents.

    Args:
      options: every setting (`GenerateOptions`, checked when built); the output path is checked (a
        writable folder, and room for the output's estimate once the size is known) before any work.
      progress: hooks for progress display (the CLI passes rich bars). A hook may raise (Ctrl-C's
        KeyboardInterrupt, a cancelled job) to stop the run: the outputs are committed only after the
        last hook returns, so a stopped run writes nothing.
      cache: a `vidax.zoo.generator.stages.StageCache` whose placed weights this run reuses and adds to (the
        server keeps one for its life); None: each stage's weights are released when it ends.

    Returns:
      The result, with `settings["outputs"]` naming the files written.
    """
    from vidax.zoo.compute.distributed import agree, is_writer, request_record, run_guard, same_everywhere
    from vidax.zoo.generator.generation import generate_video
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.compute.runtime import configure_compile_cache
    from vidax.zoo.video_io import check_output_path

    timer = StageTimer(progress)
    try:
        same_everywhere("request", lambda: request_record(options))  # several processes: all asked for the same run
        check_output_path(options.out, writable=is_writer())
        configure_compile_cache(options.compile_cache)
        with timer.stage("load"):
            pipeline = make_pipeline(options.model, options)
            pipeline.source  # the weights must be reachable before a layout is planned for them
        options, choice = choose_layout(pipeline, options)
    except BaseException as err:  # every process learns of it (multi-process runs), then it is raised
        agree(err, "preparation")
        raise
    with run_guard():  # an error this process alone hits stops its peers too
        result = generate_video(pipeline, options, progress, cache=cache)  # agrees once its preparation is over
    result.times = {**timer.times, **result.times}
    if is_writer():  # one process writes the outputs
        write_outputs(options, result, timer, choice)
    return result


def write_outputs(options: GenerateOptions, result: GenerateResult, timer: StageTimer, choice: str) -> None:
    """The video (and its audio), the latents when asked, and the sidecar: written under temporary names
    in the "write" stage and renamed into place together after it ends (a full disk, an error or an
    interrupt leaves none of them)."""
    from vidax.zoo.video_io import audio_path, sidecar_path, write_frames, write_sidecar

    outputs = {"video": str(options.out)}
    if result.audio is not None:  # muxed into the MP4 (AAC), or lossless beside a .npy
        lossless = Path(options.out).suffix.lower() == ".npy"
        outputs["audio"] = str(audio_path(options.out) if lossless else options.out)
        outputs["sample_rate"] = result.sample_rate
    with staged_files() as files, timer.stage("write"):
        start = time.perf_counter()
        write_frames(options.out, result.frames, result.fps, audio=result.audio, sample_rate=result.sample_rate,
                     files=files)
        if options.save_latents:
            outputs["latents"] = str(save_latents(options.out, result.latents, files))
        result.times["write"] = time.perf_counter() - start
        outputs["sidecar"] = str(sidecar_path(options.out))
        result.settings = {**result.settings, "outputs": outputs, "stage_seconds": result.times,
                           "layout_choice": choice}
        write_sidecar(options.out, result.settings, files)
    result.times["write"] = timer.times["write"]
