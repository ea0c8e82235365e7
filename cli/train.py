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

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)


@app.callback()
def _tools() -> None:
    """Fine-tune a registered model in JAX."""


@app.command()
def lora(
    model: str = typer.Argument(..., help="registered model name (vidax-gen --list): Wan 2.1 / 2.2 text-to-video"),
    weights: str = typer.Option(None, "--weights", help="converted folder, local checkpoint folder, or Hub repo id"),
    data: Path = typer.Option(..., "--data", help="folder of clips (.mp4) and images (.png, .jpg), each with a same-name .txt caption"),
    out: Path = typer.Option(..., "--out", help="the LoRA .safetensors to write"),
    rank: int = typer.Option(16, "--rank", help="LoRA rank"),
    alpha: float = typer.Option(None, "--alpha", help="LoRA alpha (scale alpha / rank; default: the rank)"),
    steps: int = typer.Option(1000, "--steps", help="optimiser steps"),
    lr: float = typer.Option(1e-4, "--lr", help="AdamW learning rate"),
    batch: int = typer.Option(1, "--batch", help="clips per step"),
    seed: int = typer.Option(0, "--seed", help="seed of the LoRA's initial A, the rows, the noise and the noise levels"),
    height: int = typer.Option(None, "--height", help="training height (default: the model's)"),
    width: int = typer.Option(None, "--width", help="training width (default: the model's)"),
    frames: int = typer.Option(None, "--frames", help="frames per clip, 1 + 4k (default: the model's)"),
    fmt: str = typer.Option("peft", "--format", help="peft (diffusers / PEFT keys) or comfy (ComfyUI keys with .alpha)"),
    targets: str = typer.Option(None, "--targets", help="comma-separated layer names as PEFT's target_modules "
                                "(default: to_q,to_k,to_v,to_out.0,ffn.net.0.proj,ffn.net.2)"),
    resume: Path = typer.Option(None, "--resume", help="a checkpoint (OUT.ckpt.npz) to continue from, bit for bit"),
    checkpoint_every: int = typer.Option(0, "--checkpoint-every", help="write OUT.ckpt.npz every this many steps "
                                         "(always at the end)"),
    sampling: str = typer.Option("shift", "--timestep-sampling", help="noise levels: shift (musubi-tuner's shifted "
                                 "sigmoid) or uniform"),
    flow_shift: float = typer.Option(3.0, "--flow-shift", help="the shift of --timestep-sampling shift"),
    dtype: str = typer.Option(None, "--dtype", help="frozen base weights' dtype (float32, bfloat16; default: the model's)"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel degree"),
    sp: int = typer.Option(1, "--sp", help="sequence-parallel degree"),
    dp: int = typer.Option(1, "--dp", help="data-parallel degree (splits --batch)"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks for errors"),
) -> None:
    """Train a LoRA on the model's DiT and write it as OUT (docs/TRAINING.md)."""
    from vidax.train.lora import DEFAULT_TARGETS
    from vidax.train.run import TrainOptions, train_lora

    names = tuple(t.strip() for t in targets.split(",") if t.strip()) if targets is not None else DEFAULT_TARGETS
    options = TrainOptions(model=model, data=data, out=out, weights=weights, rank=rank, alpha=alpha, targets=names,
                           steps=steps, lr=lr, batch=batch, seed=seed, height=height, width=width, frames=frames,
                           format=fmt, resume=resume, checkpoint_every=checkpoint_every, sampling=sampling,
                           shift=flow_shift, dtype=dtype, dp=dp, tp=tp, sp=sp)

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

            path = train_lora(options, progress)
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
