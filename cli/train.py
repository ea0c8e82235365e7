"""`vidax-train`: fine-tune a registered model (docs/TRAINING.md).

    vidax-train lora wan-tiny --data clips/ --out style.safetensors --rank 4 --steps 200
    vidax-train lora wan2.1-t2v-1.3b --weights ckpt/wan13b --data clips/ --out style.safetensors --format comfy

Thin: Typer parses into `vidax.train.run.TrainOptions` and one library call (`train_lora`) does the work.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from vidax.cli import interrupts
from vidax.cli.common import USER_ERRORS, console, require_packages, run_guarded, step_progress
from vidax.cli.help_panels import DATA, LAYOUT, LORA, MODEL, OPTIMISER, OUTPUT

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)
VALIDATION = "Validation and samples"  # vidax-train's own panel (the others are every tool's: help_panels)


@app.callback()
def _tools() -> None:
    """Fine-tune a registered model in JAX."""


def _numbers(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise typer.BadParameter(f"{flag} takes comma-separated numbers, got {text!r}") from None


@app.command()
def lora(
    model: str = typer.Argument(..., help="registered model name (vidax-gen --list): Wan 2.1 / 2.2, "
                                "HunyuanVideo-1.5, LTX-2, CogVideoX"),
    weights: str = typer.Option(None, "--weights", rich_help_panel=MODEL,
                                help="converted folder, local checkpoint folder, or Hub repo id"),
    expert: str = typer.Option(None, "--expert", rich_help_panel=MODEL,
                               help="Wan2.2 A14B: high, low or both (default), each on its own noise levels"),
    dtype: str = typer.Option(None, "--dtype", rich_help_panel=MODEL,
                              help="frozen base weights' dtype (float32, bfloat16; default: the model's)"),
    weights_dtype: str = typer.Option(None, "--weights-dtype", rich_help_panel=MODEL,
                                      help="int8 or fp8: the frozen base's block weights 8-bit on the device"),
    data: list[Path] = typer.Option(..., "--data", rich_help_panel=DATA, metavar="DIR",
                                    help="folder of clips (.mp4) and images (.png, .jpg), each with a same-name .txt "
                                    "caption; repeatable"),
    repeats: list[int] = typer.Option(None, "--repeats", rich_help_panel=DATA, metavar="N",
                                      help="how often each --data folder's samples count (one per folder, in order)"),
    height: int = typer.Option(None, "--height", rich_help_panel=DATA, help="training height (default: the model's)"),
    width: int = typer.Option(None, "--width", rich_help_panel=DATA, help="training width (default: the model's)"),
    frames: int = typer.Option(None, "--frames", rich_help_panel=DATA,
                               help="frames per sample, 1 + 4k (default: the model's)"),
    no_buckets: bool = typer.Option(False, "--no-buckets", rich_help_panel=DATA,
                                    help="every sample at --height x --width (default: aspect buckets at that area)"),
    frame_stride: int = typer.Option(1, "--frame-stride", rich_help_panel=DATA, help="read every n-th frame of a clip"),
    windows: int = typer.Option(1, "--windows", rich_help_panel=DATA,
                                help="samples per long clip, spread evenly over it"),
    caption_dropout: float = typer.Option(0.0, "--caption-dropout", rich_help_panel=DATA,
                                          help="share of rows trained on the empty caption"),
    first_frame_p: float = typer.Option(None, "--first-frame-p", rich_help_panel=DATA,
                                        help="share of rows given their first frame clean (TI2V-5B, LTX-2: 0.1)"),
    rank: int = typer.Option(16, "--rank", rich_help_panel=LORA, help="LoRA rank"),
    alpha: float = typer.Option(None, "--alpha", rich_help_panel=LORA,
                                help="LoRA alpha (scale alpha / rank; default: the rank)"),
    targets: str = typer.Option(None, "--targets", rich_help_panel=LORA,
                                help="comma-separated layer names as PEFT's target_modules (default: the family's, "
                                "Wan: to_q,to_k,to_v,to_out.0,ffn.net.0.proj,ffn.net.2)"),
    steps: int = typer.Option(1000, "--steps", rich_help_panel=OPTIMISER, help="optimiser steps"),
    lr: float = typer.Option(1e-4, "--lr", rich_help_panel=OPTIMISER, help="AdamW learning rate"),
    batch: int = typer.Option(1, "--batch", rich_help_panel=OPTIMISER, help="samples per step"),
    seed: int = typer.Option(0, "--seed", rich_help_panel=OPTIMISER,
                             help="seed of the LoRA's initial A, the rows, the noise and the noise levels"),
    sampling: str = typer.Option(None, "--timestep-sampling", rich_help_panel=OPTIMISER,
                                 help="noise levels: shift (musubi-tuner's shifted sigmoid) or uniform (default: "
                                 "uniform for CogVideoX, shift for the others)"),
    flow_shift: float = typer.Option(3.0, "--flow-shift", rich_help_panel=OPTIMISER,
                                     help="the shift of --timestep-sampling shift"),
    validation: Path = typer.Option(None, "--validation", rich_help_panel=VALIDATION,
                                    help="folder of held-out captioned clips scored at fixed noise"),
    validation_every: int = typer.Option(0, "--validation-every", rich_help_panel=VALIDATION,
                                         help="score it every this many steps (default: a tenth of the run)"),
    validation_sigmas: str = typer.Option(None, "--validation-sigmas", rich_help_panel=VALIDATION,
                                          help="its noise levels (default: 0.1,0.3,0.5,0.7,0.9)"),
    sample_prompts: Path = typer.Option(None, "--sample-prompts", rich_help_panel=VALIDATION,
                                        help="text file of prompts, one a line, generated with the LoRA"),
    sample_every: int = typer.Option(0, "--sample-every", rich_help_panel=VALIDATION,
                                     help="generate them every this many steps (and at the end)"),
    sample_steps: int = typer.Option(None, "--sample-steps", rich_help_panel=VALIDATION,
                                     help="sampling steps of each sample (default: the model's)"),
    out: Path = typer.Option(..., "--out", rich_help_panel=OUTPUT,
                             help="the LoRA .safetensors to write (losses, loss.png and samples in OUT-stem.train/)"),
    fmt: str = typer.Option("peft", "--format", rich_help_panel=OUTPUT,
                            help="peft (diffusers / PEFT keys) or comfy (ComfyUI keys with .alpha)"),
    resume: Path = typer.Option(None, "--resume", rich_help_panel=OUTPUT,
                                help="a checkpoint (OUT.ckpt.npz) to continue from, bit for bit"),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", rich_help_panel=OUTPUT,
                                         help="write OUT.ckpt.npz every this many steps (always at the end)"),
    tp: int = typer.Option(1, "--tp", rich_help_panel=LAYOUT, help="tensor-parallel degree"),
    sp: int = typer.Option(1, "--sp", rich_help_panel=LAYOUT, help="sequence-parallel degree"),
    dp: int = typer.Option(1, "--dp", rich_help_panel=LAYOUT, help="data-parallel degree (splits --batch)"),
    remat: str = typer.Option("full", "--remat", rich_help_panel=LAYOUT,
                              help="what each block keeps for the backward: full (recompute all), attention, "
                              "offload or attention_offload (kept in host memory)"),
    offload: bool = typer.Option(False, "--offload", rich_help_panel=LAYOUT,
                                 help="the frozen blocks and each block's input in host memory (a base larger "
                                 "than the chip)"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks for errors"),
) -> None:
    """Train a LoRA on the model's DiT and write it as OUT (docs/TRAINING.md)."""
    from vidax.train.run import TrainOptions, train_lora

    names = tuple(t.strip() for t in targets.split(",") if t.strip()) if targets is not None else None
    sigmas = _numbers(validation_sigmas, "--validation-sigmas")
    options = TrainOptions(
        model=model, data=tuple(data), out=out, weights=weights, rank=rank, alpha=alpha, targets=names, steps=steps,
        lr=lr, batch=batch, seed=seed, height=height, width=width, frames=frames, repeats=tuple(repeats or ()),
        buckets=not no_buckets, frame_stride=frame_stride, windows=windows, caption_dropout=caption_dropout,
        first_frame_p=first_frame_p, expert=expert, format=fmt, resume=resume, checkpoint_every=checkpoint_every,
        sampling=sampling, shift=flow_shift, dtype=dtype, weights_dtype=weights_dtype, remat=remat, offload=offload,
        dp=dp, tp=tp, sp=sp, validation=validation, validation_every=validation_every, sample_prompts=sample_prompts,
        sample_every=sample_every, sample_steps=sample_steps, **({"validation_sigmas": sigmas} if sigmas else {}))

    def work() -> None:
        with step_progress() as bars:
            task = bars.add_task("train", total=steps)
            every = max(1, steps // 20)  # without a terminal (a log file): a line every 5% of the run

            def progress(step: int, total: int, loss: float, rate: float) -> None:
                interrupts.check()
                note = f"loss {loss:.4f} {rate:.2f} steps/s"
                bars.update(task, completed=step, description=f"train {note}")
                if bars.disable and (step % every == 0 or step == total):
                    console.print(f"step {step}/{total} {note}", highlight=False)

            def report(line: str) -> None:
                interrupts.check()
                console.print(line, highlight=False)

            paths = train_lora(options, progress, report=report)
        for path in paths:
            console.print(f"wrote {path}")

    raise typer.Exit(run_guarded(work, debug=debug, errors=USER_ERRORS))


def entry() -> None:
    """The console script: Ctrl-C at any moment exits 130 with one line (`vidax.cli.interrupts`)."""
    from vidax.cli import _launch

    _launch("vidax.cli.train")


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    require_packages("vidax-train", ("jax", "flax", "optax"), "zoo,train")
    app()


if __name__ == "__main__":
    main()
