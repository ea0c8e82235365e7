"""`vidax-eval`: score a folder of clips (docs/EVAL.md).

    vidax-eval clips/ --weights eval-weights/ --out scores.json
    vidax-eval clips/ --reference real/ --metrics fvd,clip_score --weights eval-weights/ --out scores.json

Thin: Typer parses into `vidax.eval.EvalOptions` and one library call (`evaluate`) does the work; the scores
print as a table on stdout, the JSON (`--out`) is written whole or not at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from vidax.cli import interrupts
from vidax.cli.common import USER_ERRORS, console, require_packages, run_guarded, step_progress
from vidax.cli.help_panels import LAYOUT, OUTPUT

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)

# vidax-eval's own panels beside the shared ones (cli/help_panels.py)
CLIPS, METRICS, NETWORKS = "Clips", "Metrics", "Networks"


@app.command()
def evaluate(
    generated: Path = typer.Argument(..., help="folder of clips (.mp4, or .npy frames), each with NAME.txt or "
                                     "vidax-gen's NAME.json holding its prompt"),
    reference: Path = typer.Option(None, "--reference", rich_help_panel=CLIPS, help="folder of real clips (FVD)"),
    metrics: str = typer.Option(None, "--metrics", rich_help_panel=METRICS,
                                help="comma-separated: fvd, clip_score, subject_consistency, background_consistency, "
                                "temporal_flickering, aesthetic_quality, dynamic_degree (default: all but fvd)"),
    fvd_frames: int = typer.Option(None, "--fvd-frames", rich_help_panel=METRICS,
                                   help="the first N frames of each clip go to I3D (default: all; at least 9)"),
    covariance: str = typer.Option("unbiased", "--covariance", rich_help_panel=METRICS,
                                   help="FVD's covariance: unbiased (StyleGAN-V) or biased (cd-fvd)"),
    weights: Path = typer.Option(None, "--weights", rich_help_panel=NETWORKS,
                                 help="folder of the networks' files under their published names (docs/EVAL.md)"),
    clip_tokenizer: Path = typer.Option(None, "--clip-tokenizer", rich_help_panel=NETWORKS,
                                        help="CLIP's tokenizer folder (default: WEIGHTS/clip_tokenizer)"),
    out: Path = typer.Option(None, "--out", rich_help_panel=OUTPUT, help="the scores as JSON (with each clip's)"),
    dp: int = typer.Option(None, "--dp", rich_help_panel=LAYOUT, help="devices the frames are split over (default: all)"),
    batch: int = typer.Option(16, "--batch", rich_help_panel=LAYOUT, help="frames per device program"),
    cache: Path = typer.Option(None, "--cache-dir", rich_help_panel=LAYOUT,
                               help="feature cache (default: $VIDAX_CACHE_DIR/eval-features or ~/.cache/vidax/eval-features)"),
    no_cache: bool = typer.Option(False, "--no-cache", rich_help_panel=LAYOUT, help="compute every feature afresh"),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks for errors"),
) -> None:
    """Score GENERATED's clips with FVD, CLIP score and VBench's dimensions (networks in JAX)."""
    from vidax.eval import DEFAULT_METRICS, EvalOptions
    from vidax.eval import evaluate as run

    names = tuple(m.strip() for m in metrics.split(",") if m.strip()) if metrics is not None else DEFAULT_METRICS
    options = EvalOptions(generated=generated, reference=reference, metrics=names, weights=weights, out=out,
                          clip_tokenizer=clip_tokenizer, fvd_frames=fvd_frames, covariance=covariance, cache=cache,
                          no_cache=no_cache, dp=dp, batch=batch)

    def work() -> None:
        with step_progress() as bars:
            tasks = {}

            def progress(what: str, done: int, total: int) -> None:
                interrupts.check()
                if what not in tasks:
                    tasks[what] = bars.add_task(what, total=total)
                bars.update(tasks[what], completed=done)

            result = run(options, progress)
        _print_table(result)
        if out is not None:
            console.print(f"wrote {out}")

    raise typer.Exit(run_guarded(work, debug=debug, errors=USER_ERRORS))


def _print_table(result) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("metric", "score", "clips")
    for name, score in result.scores.items():
        count = len(result.per_clip[name]) or result.settings["clips"]
        table.add_row(name, f"{score:.4f}", str(count))
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def entry() -> None:
    """The console script: Ctrl-C at any moment exits 130 with one line (`vidax.cli.interrupts`)."""
    from vidax.cli import _launch

    _launch("vidax.cli.eval")


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    require_packages("vidax-eval", ("jax", "flax", "scipy"), "zoo,eval")
    app()


if __name__ == "__main__":
    main()
