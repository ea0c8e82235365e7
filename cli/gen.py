"""`vidax-gen`: generate a video with a registered model.

    vidax-gen wan-tiny --prompt "a red kite over a grey sea" --out kite.mp4
    vidax-gen wan2.1-t2v-1.3b --prompt "..." --weights out/wan2.1-t2v-1.3b --steps 30
    vidax-gen wan2.2-t2v-a14b --prompt "..." --guidance-2 3     # a family's own flag
    vidax-gen --list

Thin: Typer parses the common flags, the model's family parses its own (`Family.flags`), and one
library call (`vidax.zoo.api.generate`) does the work.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
import typer
from rich.table import Table

from vidax.cli import interrupts
from vidax.cli.common import console, require_packages, run_guarded, step_progress
from vidax.cli.help_panels import (LAYOUT, LORA, MODEL, OUTPUT, PLANNING, PROCESSES, SAMPLING, STEP_CACHES,
                                   FamilyHelpCommand)

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

FAMILY_FLAGS_HELP = ("Families add flags of their own (Wan2.2 A14B: --guidance-2; Wan FLF2V: --last-image; ...): "
                     "`vidax-gen MODEL --help` lists a model's, `vidax-gen --list` names them for every model.")


class RichProgress:
    """`vidax.zoo.compute.progress.Progress` on rich bars: one line per stage, the denoising one with s/step.

    Every hook first raises a Ctrl-C that Python dropped (`interrupts.check`): the run stops at the next
    stage or step, before its outputs are committed.
    """

    def __init__(self):
        self.bars = step_progress()
        self.tasks: dict[str, int] = {}

    def begin(self, stage: str, total: int | None = None) -> None:
        interrupts.check()
        if not self.tasks:
            self.bars.start()
        self.tasks[stage] = self.bars.add_task(stage, total=total)

    def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
        interrupts.check()
        if stage in self.tasks:
            self.bars.update(self.tasks[stage], advance=amount, description=f"{stage} {note}".strip())

    def end(self, stage: str, seconds: float) -> None:
        interrupts.check()
        task = self.tasks.get(stage)
        if task is not None:
            total = self.bars.tasks[task].total
            self.bars.update(task, total=total or 1, completed=total or 1)

    def close(self) -> None:
        if self.tasks:
            self.bars.stop()


def list_models() -> int:
    from vidax.zoo.registry import family_class, registered_models

    table = Table("model", "family", "own flags", "description")
    for name, model in registered_models().items():
        flags = ", ".join(flag.name for flag in family_class(model.family).flags)
        table.add_row(name, model.family, flags, model.description)
    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 220).print(table)
    return 0


def family_options(model: str, args: list[str]) -> tuple[dict, dict]:
    """The model family's own flags among the leftover command line: `(settings, images)`."""
    from vidax.zoo.errors import PipelineError
    from vidax.zoo.registry import family_class, lookup

    flags = family_class(lookup(model).family).flags
    if not args:
        return {}, {}
    command = click.Command(model, params=[_click_option(flag) for flag in flags], add_help_option=False)
    try:
        parsed = command.make_context(f"vidax-gen {model}", list(args), resilient_parsing=False).params
    except click.UsageError as err:
        have = ", ".join(flag.name for flag in flags) or "none"
        what = (f"unknown option {err.option_name}" if isinstance(err, click.NoSuchOption)
                else err.format_message().rstrip("."))
        raise PipelineError(f"{what} for {model} (its own flags: {have}; the common ones: vidax-gen --help)") from None
    settings, images = {}, {}
    for flag in flags:
        value = parsed.get(flag.field)
        if value is None or (flag.multiple and not value):
            continue
        (images if flag.image else settings)[flag.field] = value
    return settings, images


def _click_option(flag) -> click.Option:
    if flag.kind is bool:
        base = flag.name[2:]
        return click.Option([f"--{base}/--no-{base}", flag.field], default=None, help=flag.help)
    kind = click.Path(path_type=Path) if flag.kind is Path else flag.kind
    return click.Option([flag.name, flag.field], type=kind, multiple=flag.multiple, default=None, help=flag.help)


def _refuse(message: str) -> int:
    from vidax.zoo.errors import PipelineError

    raise PipelineError(message)


def print_plan(options, devices: int | None, device_bytes: int | None) -> int:
    """The memory planner's table on stdout: predicted GiB per device for every (dp, tp, sp, offload)
    candidate (or the one the layout flags give); exit code 1 when nothing fits."""
    from rich.console import Console

    from vidax.zoo.plan.layouts import plan_layouts
    from vidax.zoo.registry import make_pipeline

    planned = plan_layouts(make_pipeline(options.model, options), options, devices, device_bytes)
    gib = lambda n: f"{n / 2**30:.2f}"  # noqa: E731
    table = Table()
    table.add_column("layout", no_wrap=True)
    for column in ("weights", "activations", "text encoder", "VAE", "peak", "fits"):
        table.add_column(column, justify="right")
    for layout, p, fits in planned.rows:
        table.add_row(layout.describe(), gib(p.weights), gib(p.activations), gib(p.text_encoder), gib(p.vae),
                      gib(planned.peak(layout, p)), "yes" if fits else "no")
    out = Console(width=None if sys.stdout.isatty() else 160)
    out.print(f"{options.model} at {planned.size}: GiB per device on {planned.devices} x "
              f"{planned.device_bytes / 2**30:.1f} GiB, fastest first", highlight=False, soft_wrap=True)
    out.print(table)
    for note in (planned.idle_note(), planned.paged_note()):
        if note:
            out.print(f"note: {note}", highlight=False, soft_wrap=True)
    if planned.chosen is None:
        console.print(f"[red]error:[/red] {planned.refusal(options.model)}: more devices, more memory per device, "
                      "or a smaller size", highlight=False, soft_wrap=True)
        return 1
    out.print(f"choice: {planned.chosen[0].describe()}", highlight=False)
    return 0


def run(options) -> int:
    """Generate with `options` and print where the video went and each stage's time (process 0)."""
    from vidax.zoo.compute.distributed import is_writer
    from vidax.zoo.api import generate
    from vidax.zoo.plan.synthetic import synthetic_note

    note = synthetic_note(options.weights) if is_writer() else None
    if note is not None:  # random weights must not pass for the model's
        console.print(note, highlight=False, soft_wrap=True)
    progress = RichProgress() if is_writer() else None
    try:
        result = generate(options, progress)
    finally:
        if progress is not None:
            progress.close()
    if not is_writer():
        return 0
    if result.settings.get("layout_choice", "as given") != "as given":
        console.print(f"layout: {result.settings['layout_choice']}", highlight=False, soft_wrap=True)
    if result.settings.get("size_note"):
        console.print(result.settings["size_note"], highlight=False, soft_wrap=True)
    times = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in result.times.items())
    programs = result.settings.get("programs", {}).get("summary")
    console.print(f"wrote {options.out} ({result.frames.shape[0]} frames {result.frames.shape[2]}x"
                  f"{result.frames.shape[1]} at {result.fps:g} fps); {times}" + (f"; {programs}" if programs else ""),
                  highlight=False, soft_wrap=True)
    return 0


def _size_note(clip: Path) -> str | None:
    """The clip's sidecar's `size_note`: the one line saying its size is not the one asked for, if any."""
    import json

    from vidax.zoo.video_io import sidecar_path

    try:
        return json.loads(sidecar_path(clip).read_text()).get("size_note")
    except (OSError, ValueError):
        return None


def run_batch(options, prompts: str, seeds: str | None, out_dir: Path, out: Path) -> int:
    """`--prompts`: a clip per prompt and seed into `out_dir` (`vidax.zoo.api.generate_batch`), a line per clip."""
    from vidax.zoo.api import batch_outputs, generate_batch, read_prompts
    from vidax.zoo.compute.distributed import is_writer
    from vidax.zoo.errors import PipelineError

    try:
        chosen = [int(v) for v in seeds.split(",") if v.strip()] if seeds is not None else [options.seed]
    except ValueError:
        raise PipelineError(f"--seeds takes comma-separated integers, got {seeds!r}") from None
    suffix = ".npy" if out.suffix.lower() == ".npy" else ".mp4"  # --out's kind picks the clips' (default .mp4)
    items = batch_outputs(read_prompts(prompts), chosen or [options.seed], out_dir, suffix)

    notes: set[str] = set()

    def report(index: int, total: int, path: Path, skipped: bool) -> None:
        if not is_writer():
            return
        note = None if skipped else _size_note(path)
        if note and note not in notes:  # every clip of the batch runs at the same size: said once
            notes.add(note)
            console.print(note, highlight=False, soft_wrap=True)
        console.print(f"{'kept' if skipped else 'wrote'} {path} ({index}/{total})", highlight=False, soft_wrap=True)

    progress = RichProgress() if is_writer() else None
    try:
        generate_batch(options, items, progress, report)
    finally:
        if progress is not None:
            progress.close()
    return 0


@app.command(cls=FamilyHelpCommand, context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             epilog=FAMILY_FLAGS_HELP)
def main_command(
    ctx: typer.Context,
    model: str = typer.Argument(None, help="registered model name (see --list)"),
    # the model and what it reads
    variant: str = typer.Option(None, "--variant", rich_help_panel=MODEL, help="one of the model's variants "
                                "(hunyuanvideo-1.5: 480p_t2v, 720p_i2v, ...; see --list)"),
    prompt: str = typer.Option(None, "--prompt", rich_help_panel=MODEL, help="text prompt"),
    prompts: str = typer.Option(None, "--prompts", rich_help_panel=MODEL, help="many prompts, one clip each into "
                                "--out-dir: a text file (one a line), or vbench / vbench:DIMENSION (VBench's list)"),
    negative_prompt: str = typer.Option(None, "--negative-prompt", rich_help_panel=MODEL,
                                        help="negative prompt (default: the model's)"),
    image: Path = typer.Option(None, "--image", rich_help_panel=MODEL, help="first-frame image for image-to-video"),
    weights: str = typer.Option(None, "--weights", rich_help_panel=MODEL,
                                help="converted folder, local checkpoint folder, or Hub repo id"),
    transformer: Path = typer.Option(None, "--transformer", rich_help_panel=MODEL, help="the DiT's weights from this "
                                     "one file (GGUF or safetensors, quantized or not); the rest from --weights"),
    transformer_2: Path = typer.Option(None, "--transformer-2", rich_help_panel=MODEL,
                                       help="Wan2.2 A14B: the second (low-noise) expert's file"),
    dtype: str = typer.Option(None, "--dtype", rich_help_panel=MODEL,
                              help="weights/compute dtype override: float32 or bfloat16"),
    weights_dtype: str = typer.Option(None, "--weights-dtype", rich_help_panel=MODEL, help="bf16, fp8 or int8: keep "
                                      "the DiT's block linear weights 8-bit on the device (one scale per output channel)"),
    latents: Path = typer.Option(None, "--latents", rich_help_panel=MODEL,
                                 help=".npy of initial latents [1, C, F', H', W'] instead of seeded noise"),
    # sampling
    height: int = typer.Option(None, "--height", rich_help_panel=SAMPLING,
                               help="video height (default: the model's native)"),
    width: int = typer.Option(None, "--width", rich_help_panel=SAMPLING, help="video width"),
    frames: int = typer.Option(None, "--frames", rich_help_panel=SAMPLING, help="number of frames (e.g. 4k+1 for Wan)"),
    steps: int = typer.Option(None, "--steps", rich_help_panel=SAMPLING, help="sampling steps"),
    guidance: float = typer.Option(None, "--guidance", rich_help_panel=SAMPLING, help="guidance scale "
                                   "(classifier-free; the DiT's embedded guidance for guidance-distilled models such "
                                   "as hunyuanvideo)"),
    shift: float = typer.Option(None, "--shift", rich_help_panel=SAMPLING,
                                help="flow shift of the schedule (flow-matching families)"),
    sampler: str = typer.Option(None, "--sampler", rich_help_panel=SAMPLING, help="the model's samplers (flow "
                                "matching: euler, unipc, dpm++; CogVideoX: ddim, dpm); default: the checkpoint's "
                                "scheduler"),
    fps: float = typer.Option(None, "--fps", rich_help_panel=SAMPLING,
                              help="frames per second (the MP4's, and the model's input where it takes one)"),
    seed: int = typer.Option(0, "--seed", rich_help_panel=SAMPLING,
                             help="seed of the initial noise and of any noise drawn while sampling"),
    seeds: str = typer.Option(None, "--seeds", rich_help_panel=SAMPLING,
                              help="with --prompts: comma-separated seeds, a clip per prompt and seed (default: --seed)"),
    # output
    out: Path = typer.Option(Path("out.mp4"), "--out", rich_help_panel=OUTPUT,
                             help="output .mp4 (H.264) or .npy (float32 frames)"),
    save_latents: bool = typer.Option(False, "--save-latents", rich_help_panel=OUTPUT,
                                      help="also write the final latents (OUT.latents.npy)"),
    out_dir: Path = typer.Option(None, "--out-dir", rich_help_panel=OUTPUT, help="with --prompts: the folder of "
                                 "the clips and their sidecars (clips already there are skipped)"),
    # layout and memory
    tp: int = typer.Option(None, "--tp", rich_help_panel=LAYOUT,
                           help="tensor-parallel degree (default: the memory planner's choice)"),
    sp: int = typer.Option(None, "--sp", rich_help_panel=LAYOUT, help="sequence-parallel degree"),
    dp: int = typer.Option(None, "--dp", rich_help_panel=LAYOUT,
                           help="data-parallel degree (2: CFG branches side by side)"),
    offload_chunk: int = typer.Option(None, "--offload-chunk", rich_help_panel=LAYOUT,
                                      help="stream the DiT's blocks from host memory, N at a time"),
    keep_stages: bool = typer.Option(False, "--keep-stages", rich_help_panel=LAYOUT, help="keep each stage's "
                                     "weights on the devices after it ends (default: freed, for the next stage)"),
    # the default, accepted as a flag too; one name in the help keeps the panel's name column narrow
    _release_stages: bool = typer.Option(False, "--release-stages", hidden=True),
    # a memory plan
    plan: bool = typer.Option(False, "--plan", rich_help_panel=PLANNING,
                              help="print the predicted memory per device of each layout, then exit"),
    dry_run: bool = typer.Option(False, "--dry-run", rich_help_panel=PLANNING, help="compile every stage at its real "
                                 "size on abstract weights (N fake CPU devices with --devices N) and print XLA's bytes "
                                 "per device beside the planner's; exit 1 if a stage would not fit. Nothing is "
                                 "downloaded or allocated"),
    devices: int = typer.Option(None, "--devices", rich_help_panel=PLANNING,
                                help="with --plan or --dry-run: number of devices to plan for"),
    device_memory: float = typer.Option(None, "--device-memory", rich_help_panel=PLANNING,
                                        help="with --plan or --dry-run: GiB per device"),
    target: str = typer.Option(None, "--target", rich_help_panel=PLANNING, help="with --plan or --dry-run: TPU "
                               "chips this host need not have, CHIP[:TOPOLOGY] (v5e, v5e:2x2, v5p:2x2x1, v6e:2x4, "
                               "v4:2x2x1); --dry-run compiles on XLA's TPU compiler (needs libtpu)"),
    # several processes
    coordinator: str = typer.Option(None, "--coordinator", rich_help_panel=PROCESSES, help="HOST:PORT of process 0 "
                                    "(TPU pod slices, SLURM and Open MPI are detected without it)"),
    num_processes: int = typer.Option(None, "--num-processes", rich_help_panel=PROCESSES, help="number of processes"),
    process_id: int = typer.Option(None, "--process-id", rich_help_panel=PROCESSES,
                                   help="this process's index (0 writes)"),
    join_timeout: int = typer.Option(None, "--join-timeout", rich_help_panel=PROCESSES, help="seconds to wait for "
                                     "every process to join (default 300, or VIDAX_JOIN_TIMEOUT)"),
    # LoRA
    lora: list[str] = typer.Option(None, "--lora", rich_help_panel=LORA, help="LoRA merged into the DiT: "
                                   "SOURCE[=STRENGTH] (a .safetensors file, a folder holding one, or a Hub owner/name, "
                                   "or owner/name/file.safetensors); repeatable"),
    lora_2: list[str] = typer.Option(None, "--lora-2", rich_help_panel=LORA,
                                     help="the same for Wan2.2 A14B's second (low-noise) expert"),
    # step caches
    cache: str = typer.Option(None, "--cache", rich_help_panel=STEP_CACHES, help="step cache: taylorseer, "
                              "first-block, magcache, teacache, easycache (docs/CACHING.md)"),
    cache_interval: int = typer.Option(None, "--cache-interval", rich_help_panel=STEP_CACHES,
                                       help="taylorseer: one full DiT step in N (default 5)"),
    cache_warmup: int = typer.Option(None, "--cache-warmup", rich_help_panel=STEP_CACHES,
                                     help="taylorseer: full DiT steps before caching (default 3)"),
    cache_order: int = typer.Option(None, "--cache-order", rich_help_panel=STEP_CACHES,
                                    help="taylorseer: Taylor series order (default 1)"),
    cache_stop: int = typer.Option(None, "--cache-stop", rich_help_panel=STEP_CACHES,
                                   help="taylorseer: full DiT from this step on (default: never)"),
    cache_threshold: float = typer.Option(None, "--cache-threshold", rich_help_panel=STEP_CACHES, help="first-block "
                                          "(default 0.05), magcache (default 0.06): the change below which a step "
                                          "reuses the cache"),
    cache_max_skip: int = typer.Option(None, "--cache-max-skip", rich_help_panel=STEP_CACHES,
                                       help="magcache: most steps skipped in a row (default 3)"),
    cache_retention: float = typer.Option(None, "--cache-retention", rich_help_panel=STEP_CACHES,
                                          help="magcache: fraction of first steps never skipped (default 0.2)"),
    mag_ratios: Path = typer.Option(None, "--mag-ratios", rich_help_panel=STEP_CACHES, help="magcache: .npy of the "
                                    "model's per-step magnitude ratios (default: the published ones of Wan2.1 and "
                                    "HunyuanVideo, zoo/step_caches/magcache.toml)"),
    cache_calibrate: Path = typer.Option(None, "--cache-calibrate", rich_help_panel=STEP_CACHES, help="magcache: "
                                         "skip nothing, write the per-step ratios of this run to this .npy"),
    cache_coefficients: str = typer.Option(None, "--cache-coefficients", rich_help_panel=STEP_CACHES,
                                           help="teacache: the published coefficient set to use (default: this "
                                           "model's)"),
    cache_use_ret_steps: bool = typer.Option(False, "--cache-use-ret-steps", rich_help_panel=STEP_CACHES,
                                             help="teacache: the reference's use_ret_steps (Wan: the time "
                                             "projection e0, 5 warm-up steps)"),
    cache_start_percent: float = typer.Option(None, "--cache-start-percent", rich_help_panel=STEP_CACHES,
                                              help="easycache: start_percent (default 0.15)"),
    cache_end_percent: float = typer.Option(None, "--cache-end-percent", rich_help_panel=STEP_CACHES,
                                            help="easycache: end_percent (default 0.95)"),
    # the rest: typer's "Options"
    no_compile_cache: bool = typer.Option(False, "--no-compile-cache", help="do not use the persistent compile cache"),
    tune_cpu: bool = typer.Option(False, "--tune-cpu", help="time this machine's CPU choices (matmul row blocks) "
                                  "now, keep them beside the compile cache and print them; then exit"),
    list_: bool = typer.Option(False, "--list", help="list the models vidax-gen can run and their own flags"),
    debug: bool = typer.Option(False, "--debug", help="show full tracebacks"),
) -> None:
    """Generate a video from a text prompt (and an image, for image-to-video models)."""
    if list_:
        raise typer.Exit(run_guarded(list_models, debug=debug))
    if tune_cpu:
        from vidax.zoo.compute.cpu_tuning import main as tune

        raise typer.Exit(run_guarded(tune, debug=debug))
    if (plan or dry_run) and model is not None:
        prompt = prompt or ""
    if prompts is not None and (prompt is not None or out_dir is None):
        console.print("[red]error:[/red] --prompts takes --out-dir and no --prompt")
        raise typer.Exit(2)
    if model is None or (prompt is None and prompts is None):
        console.print("[red]error:[/red] give a MODEL name and --prompt (see vidax-gen --list)")
        raise typer.Exit(2)

    def options():
        from vidax.zoo.compute.distributed import join
        from vidax.zoo.generator.options import GenerateOptions

        join(coordinator, num_processes, process_id, join_timeout=join_timeout)  # before anything touches a device
        extra, images = family_options(model, ctx.args)
        return GenerateOptions(
            model=model, variant=variant, prompt=prompt if prompts is None else "", negative_prompt=negative_prompt, image=image, images=images, weights=weights,
            height=height, width=width, frames=frames, steps=steps, guidance=guidance, shift=shift, sampler=sampler,
            fps=fps, seed=seed, tp=tp, sp=sp, dp=dp, offload_chunk=offload_chunk, latents=latents,
            save_latents=save_latents, out=out, dtype=dtype, compile_cache=False if no_compile_cache else None,
            release_stages=not keep_stages, extra=extra, transformer=transformer, transformer_2=transformer_2,
            weights_dtype=weights_dtype, lora=tuple(lora or ()), lora_2=tuple(lora_2 or ()), cache=cache,
            cache_interval=cache_interval,
            cache_warmup=cache_warmup, cache_order=cache_order, cache_stop=cache_stop, cache_threshold=cache_threshold,
            cache_max_skip=cache_max_skip, cache_retention=cache_retention, mag_ratios=mag_ratios,
            cache_calibrate=cache_calibrate, cache_coefficients=cache_coefficients,
            cache_use_ret_steps=True if cache_use_ret_steps else None, cache_start_percent=cache_start_percent,
            cache_end_percent=cache_end_percent)

    if target is not None and devices is not None:
        raise typer.Exit(run_guarded(lambda: _refuse("--target names its devices (v5e:2x2 is 4 chips); "
                                                     "give --target or --devices, not both"), debug=debug))
    if dry_run:
        from vidax.cli.dry_run import use_host_devices

        use_host_devices(None if target else devices)  # before jax starts

        def compiled():
            from vidax.cli.dry_run import print_dry_run
            from vidax.zoo.generator.options import check_finite

            check_finite({"device_memory": device_memory})
            memory = None if device_memory is None else int(device_memory * 2**30)
            return print_dry_run(options(), devices, memory, target)

        raise typer.Exit(run_guarded(compiled, debug=debug))
    if plan:
        def planned():
            from vidax.zoo.generator.options import check_finite

            check_finite({"device_memory": device_memory})
            memory = None if device_memory is None else int(device_memory * 2**30)
            if target is not None:  # the planner alone needs no compiler: the chips' figures, its forms for a TPU
                from vidax.zoo.compute.runtime import platform_override
                from vidax.zoo.compute.target import parse_target

                chosen = parse_target(target)
                memory = memory or chosen.chip.device_bytes
                with platform_override("tpu", chosen.chip.device_kind, chosen.chips, memory):
                    return print_plan(options(), chosen.chips, memory)
            return print_plan(options(), devices, memory)

        raise typer.Exit(run_guarded(planned, debug=debug))
    if prompts is not None:
        raise typer.Exit(run_guarded(lambda: run_batch(options(), prompts, seeds, out_dir, out), debug=debug))
    raise typer.Exit(run_guarded(lambda: run(options()), debug=debug))


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    require_packages("vidax-gen", ("flax", "jax"), "zoo")
    app()


if __name__ == "__main__":
    main()
