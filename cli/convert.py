"""`vidax-convert`: convert a registered model's PyTorch checkpoints into vidax host trees on disk.

    vidax-convert wan2.1-t2v-1.3b --out out/wan13b
    vidax-convert hunyuanvideo-1.5 --variant 720p_i2v --out ckpt/hv15-720p-i2v
    vidax-convert wan2.1-t2v-1.3b --source /models/Wan2.1-T2V-1.3B --check
    vidax-convert wan2.1-t2v-1.3b --synthetic --out ckpt/wan13b-synthetic   # random weights at the real shapes
    vidax-convert --list

Thin: Typer parses the flags into `ConvertOptions` and calls `vidax.translator.convert_model`
(`--synthetic`: `SyntheticOptions` and `vidax.zoo.plan.synthetic.write_synthetic`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import typer
from rich.table import Table

from vidax.cli import interrupts
from vidax.cli.common import byte_progress, console, require_packages, run_guarded
from vidax.cli.help_panels import LORA, MODEL, OUTPUT, SYNTHETIC
from vidax.translator import ConversionHooks, ConvertOptions, LazyTree, convert_model, load_registry

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


class RichHooks(ConversionHooks):
    """Each component's plan as a table, a byte progress bar while it is written, one line when done.
    Every hook first raises a Ctrl-C that Python dropped (`interrupts.check`)."""

    def planned(self, component: str, tree: LazyTree) -> None:
        interrupts.check()
        dtypes: dict[str, int] = {}
        for leaf in tree.leaves.values():
            dtypes[str(leaf.dtype)] = dtypes.get(str(leaf.dtype), 0) + 1
        ckpt = tree.source.checkpoint
        table = Table(title=f"{component}: {tree.spec.name} ({tree.source.layout.name} layout)", show_header=False)
        table.add_row("source", tree.source.origin)
        table.add_row("files", ", ".join(p.name for p in tree.source.files))
        table.add_row("source tensors", f"{len(ckpt.keys())} ({ckpt.nbytes / 1e9:.3f} GB), all accounted for")
        table.add_row("leaves", f"{len(tree)} ({tree.nbytes / 1e9:.3f} GB): " + ", ".join(f"{n} {d}" for d, n in dtypes.items()))
        console.print(table)

    def writing(self, component: str, nbytes: int):
        interrupts.check()
        self.bars = byte_progress()
        self.bars.start()
        task = self.bars.add_task(f"converting {component}", total=nbytes)

        def advance(n: int) -> None:
            interrupts.check()
            self.bars.advance(task, n)

        return advance

    def done(self, component: str, message: str) -> None:
        if getattr(self, "bars", None) is not None:
            self.bars.stop()
            self.bars = None
        interrupts.check()
        console.print(f"{component}: {message}")


def run(opts: ConvertOptions) -> int:
    convert_model(opts, hooks=RichHooks())
    return 0


# flags that name where real weights come from: meaningless for a synthetic folder
_NOT_SYNTHETIC = ("--source", "--revision", "--layout", "--transformer", "--transformer-2", "--lora", "--lora-2")


def run_synthetic(model: str, out: Path | None, components: tuple[str, ...], dtype: str | None, variant: str | None,
                  seed: int, check: bool) -> int:
    """`--synthetic`: the plan of every component as a table, then (without --check) the folder written."""
    from vidax.zoo.plan.synthetic import SyntheticOptions, write_synthetic

    opts = SyntheticOptions(model, out, components, dtype, variant, seed, check)
    plan = write_synthetic(dataclasses.replace(opts, check=True))  # the plan first: every error before any work
    table = Table("component", "spec", "leaves", "GB", "dtypes", title=f"{plan.entry.name}: synthetic (seed {seed})")
    for name, tree in plan.trees.items():
        dtypes: dict[str, int] = {}
        for leaf in tree.leaves.values():
            dtypes[str(leaf.dtype)] = dtypes.get(str(leaf.dtype), 0) + 1
        table.add_row(name, tree.spec.name, str(len(tree)), f"{tree.nbytes / 1e9:.3f}", ", ".join(f"{n} {d}" for d, n in dtypes.items()))
    table.add_row("total", "", str(sum(len(t) for t in plan.trees.values())), f"{plan.nbytes / 1e9:.3f}", "")
    console.print(table)
    if not check:
        write_synthetic(opts, hooks=RichHooks())
    return 0


def list_models() -> int:
    table = Table("model", "default repo", "other layouts", "variants", "components", "description")
    table.columns[0].no_wrap = table.columns[1].no_wrap = True
    for name, entry in load_registry().items():
        if entry.embedded:  # built locally: nothing to convert
            continue
        others = ", ".join(f"{l}: {r}" for l, r in entry.repos.items() if l != entry.default_layout)
        variants = ", ".join(f"{v} (default)" if v == entry.default_variant else v for v in entry.choices)
        if entry.alias_of:  # an alias of one variant
            variants = f"= {entry.variant}"
        names = entry.all_components or entry.components
        table.add_row(name, entry.repo(), others, variants or ", ".join(entry.variants), ", ".join(names), entry.description)
    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 220).print(table)
    return 0


@app.command()
def main_command(
    model: str = typer.Argument(None, help="registered model name (see --list)"),
    # where the weights come from
    source: str = typer.Option(None, "--source", rich_help_panel=MODEL,
                               help="Hub repo id or local file/folder instead of the registry's repo"),
    revision: str = typer.Option(None, "--revision", rich_help_panel=MODEL, help="Hub branch, tag or commit"),
    variant: str = typer.Option(None, "--variant", rich_help_panel=MODEL,
                                help="one of the model's variants (see --list), e.g. 720p_i2v"),
    layout: str = typer.Option(None, "--layout", rich_help_panel=MODEL,
                               help="source layout (e.g. official, diffusers) instead of detecting it"),
    components: list[str] = typer.Option(None, "--components", rich_help_panel=MODEL,
                                         help="components to convert, repeated or comma-separated (default: all)"),
    transformer: Path = typer.Option(None, "--transformer", rich_help_panel=MODEL, help="the DiT's weights from this "
                                     "one file (GGUF or safetensors, quantized or not); the rest from --source / the "
                                     "Hub"),
    transformer_2: Path = typer.Option(None, "--transformer-2", rich_help_panel=MODEL,
                                       help="Wan2.2 A14B: the second (low-noise) expert's file"),
    # output
    out: Path = typer.Option(None, "--out", rich_help_panel=OUTPUT,
                             help="output folder (default out/MODEL); one subfolder per component"),
    dtype: str = typer.Option(None, "--dtype", rich_help_panel=OUTPUT,
                              help="override the spec's default dtype: float32, bfloat16, float16, keep"),
    check: bool = typer.Option(False, "--check", rich_help_panel=OUTPUT, help="plan and verify coverage without "
                               "writing (Hub: reads only the safetensors headers)"),
    # LoRA
    lora: list[str] = typer.Option(None, "--lora", rich_help_panel=LORA, help="LoRA baked into the DiT: "
                                   "SOURCE[=STRENGTH] (a .safetensors file, a folder holding one, or a Hub owner/name, "
                                   "or owner/name/file.safetensors); repeatable"),
    lora_2: list[str] = typer.Option(None, "--lora-2", rich_help_panel=LORA,
                                     help="the same for Wan2.2 A14B's second (low-noise) expert"),
    # no checkpoint
    synthetic: bool = typer.Option(False, "--synthetic", rich_help_panel=SYNTHETIC, help="no checkpoint: every "
                                   "tensor at its real shape and dtype with seeded random values, the configs and a "
                                   "stand-in tokenizer (docs/SYNTHETIC.md)"),
    seed: int = typer.Option(0, "--seed", rich_help_panel=SYNTHETIC, help="--synthetic: the values' seed (0 or more)"),
    # the rest: typer's "Options"
    list_: bool = typer.Option(False, "--list", help="list registered models and their default repos"),
    debug: bool = typer.Option(False, "--debug", help="show full tracebacks"),
) -> None:
    """Convert a model's PyTorch checkpoints into vidax's safetensors host trees."""
    if list_:
        raise typer.Exit(run_guarded(list_models, debug=debug))
    if model is None:
        console.print("error: give a MODEL name (see vidax-convert --list)")
        raise typer.Exit(2)
    names = tuple(n for item in components or () for n in item.split(",") if n)  # --components a,b or repeated
    if synthetic:
        given = [flag for flag, value in zip(_NOT_SYNTHETIC, (source, revision, layout, transformer, transformer_2, lora, lora_2))
                 if value]
        if given:
            console.print(f"error: --synthetic takes no {', '.join(given)} (it reads no checkpoint)")
            raise typer.Exit(2)
        if seed < 0:  # checked here rather than by typer's min=, whose range widens the help's type column
            console.print(f"error: --seed {seed}: give 0 or more")
            raise typer.Exit(2)
        require_packages("vidax-convert --synthetic", ("flax", "jax", "tokenizers"), "zoo")  # the zoo's trees
        out = out if out is not None or check else Path("out") / f"{model}-synthetic"
        raise typer.Exit(run_guarded(lambda: run_synthetic(model, out, names, dtype, variant, seed, check), debug=debug))
    opts = ConvertOptions(model, source, revision, out, names, dtype, layout, check, variant, transformer, transformer_2,
                          lora=tuple(lora or ()), lora_2=tuple(lora_2 or ()))
    raise typer.Exit(run_guarded(lambda: run(opts), debug=debug))


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    app()


if __name__ == "__main__":
    main()
