"""The library call behind `vidax-gen`: `generate(GenerateOptions(...))` chooses the layout, builds the
model's family, runs `vidax.zoo.generator.generation.generate_video` and writes the video, its sidecar and
(asked) the latents. `vidax.zoo` names it and what it takes (docs/ARCHITECTURE.md, "A generation from a program").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vidax.translator.output import staged_files
from vidax.zoo.compute.compiles import ProgramCount
from vidax.zoo.compute.progress import Progress, ResidentPeak, StageTimer
from vidax.zoo.generator.options import GenerateOptions, GenerateResult, save_latents
from vidax.zoo.plan.ahead import compile_ahead
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
    # run_guard: an error this process alone hits stops its peers too; compile_ahead: the decode's programs,
    # compiled while the chip samples; generate_video agrees with the peers once prepared
    with ProgramCount() as programs, run_guard(), ResidentPeak() as resident:
        ahead = compile_ahead(pipeline, options)
        result = generate_video(pipeline, options, progress, cache=cache, ahead=ahead)
    result.times = {**timer.times, **result.times}
    result.settings["programs"] = {**programs.figures(), "summary": programs.line()}
    result.settings["memory_peaks"] = {**memory_peaks(), "host_resident_sampled": resident.figures()}
    result.settings["moments"] = {"process start": _process_start(), **timer.marks, **result.settings["moments"]}
    if is_writer():  # one process writes the outputs
        write_outputs(options, result, timer, choice)
    return result


def _process_start() -> float:
    """When this process started (epoch seconds): the origin of a run's `moments` (time to first step)."""
    import psutil

    return psutil.Process().create_time()


def memory_peaks() -> dict[str, int | None]:
    """The process's peaks so far: host resident memory (bytes) and, on an accelerator, the first device's
    allocator peak (None where the backend keeps no such figure, the CPU). A process of a multi-process run
    asks one of its own devices (another process's have no stats here)."""
    import resource
    import sys

    import jax

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    device = jax.local_devices()[0]
    stats = device.memory_stats() or {}
    return {"host_rss_bytes": int(rss), "device_bytes": stats.get("peak_bytes_in_use"),
            "device_kind": device.device_kind, "jax": jax.__version__}


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


# --- many prompts: `vidax-gen MODEL --prompts FILE --out-dir DIR` -------------------------------------------

VBENCH_INFO = "VBench_full_info.json"  # the prompt list the vbench package ships (prompt_en, dimension)


def read_prompts(source: str) -> list[str]:
    """The prompts of `source`: a text file, one prompt a line (blank lines and `#` lines skipped), or `vbench`
    (VBench's standard list, 946 prompts) / `vbench:DIMENSION` (its prompts for one dimension), read from the
    installed vbench package's `VBench_full_info.json` (vidax ships no copy: `pip install --no-deps vbench`)."""
    import importlib.util
    import json

    from vidax.zoo.errors import PipelineError

    if source == "vbench" or source.startswith("vbench:"):
        spec = importlib.util.find_spec("vbench")
        if spec is None or not spec.submodule_search_locations:
            raise PipelineError("--prompts vbench reads VBench's list from the vbench package: pip install --no-deps vbench")
        records = json.loads((Path(next(iter(spec.submodule_search_locations))) / VBENCH_INFO).read_text())
        dimension = source.partition(":")[2]
        prompts = [r["prompt_en"] for r in records if not dimension or dimension in r.get("dimension", ())]
        if not prompts:
            known = sorted({d for r in records for d in r.get("dimension", ())})
            raise PipelineError(f"--prompts {source}: no such VBench dimension (known: {', '.join(known)})")
        return prompts
    path = Path(source)
    if not path.is_file():
        raise PipelineError(f"--prompts {source}: not a file (or `vbench`, `vbench:DIMENSION`)")
    prompts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [p for p in prompts if p and not p.startswith("#")]
    if not prompts:
        raise PipelineError(f"--prompts {source}: no prompts in it")
    return prompts


def batch_outputs(prompts: list[str], seeds: list[int], out_dir: str | Path, suffix: str = ".mp4") -> list[tuple[str, int, Path]]:
    """(prompt, seed, output path) of each clip: every prompt at every seed, named by the prompt's line, its
    first words and the seed (`0007-a-red-circle-moves-s0.mp4`), so names sort by prompt and never collide."""
    import re

    items = []
    for index, prompt in enumerate(prompts):
        words = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:40].rstrip("-") or "prompt"
        for seed in seeds:
            items.append((prompt, seed, Path(out_dir) / f"{index:04d}-{words}-s{seed}{suffix}"))
    return items


def generate_batch(options: GenerateOptions, items: list[tuple[str, int, Path]], progress: Progress | None = None,
                   report=None) -> list[Path]:
    """Generate each (prompt, seed, out) of `items` with `options`' other settings, the weights placed once and
    kept between clips (a `StageCache`); a clip whose video and sidecar are already there is skipped, so an
    interrupted batch resumes where it stopped. `report(index, total, path, skipped)` after each clip.

    Returns the paths of every clip of the batch (written now or before)."""
    import dataclasses

    from vidax.zoo.generator.stages import StageCache
    from vidax.zoo.video_io import sidecar_path

    cache, done = StageCache(), []
    try:
        for index, (prompt, seed, out) in enumerate(items):
            skipped = Path(out).is_file() and sidecar_path(out).is_file()
            if not skipped:
                generate(dataclasses.replace(options, prompt=prompt, seed=seed, out=out), progress, cache=cache)
            done.append(Path(out))
            if report is not None:
                report(index + 1, len(items), Path(out), skipped)
    finally:
        cache.release()
    return done
