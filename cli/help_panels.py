"""The panels every vidax tool groups its `--help` in, and `MODEL --help`'s panel of a family's own flags.

One table of options at 80 columns gets the width of its widest option name, which leaves the
descriptions a strip; each panel is a table of its own, sized by its own names. The tools name their
options' panels from here (`typer.Option(..., rich_help_panel=SAMPLING)`), so a flag sits under the
same heading in `vidax-gen`, `vidax-serve`, `vidax-convert` and `vidax-train`.
"""

from __future__ import annotations

from pathlib import Path

import click
import typer.core
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

MODEL = "Model and inputs"
SAMPLING = "Sampling"
OUTPUT = "Output"
LAYOUT = "Layout and memory"
PLANNING = "Memory plan (then exit)"
PROCESSES = "Several processes"
LORA = "LoRA"
STEP_CACHES = "Step caches"
SERVER = "Server"
SYNTHETIC = "Synthetic weights (no checkpoint)"
DATA = "Data"
OPTIMISER = "Optimiser"
# options left without a panel (--help, --debug, ...) go under typer's own "Options"


def flag_type(kind: type) -> str:
    """A family flag's value as typer shows an option's (`<float>`)."""
    return "" if kind is bool else f"<{'path' if kind is Path else kind.__name__}>"


def family_panel(model: str) -> Panel | None:
    """`model`'s family's own flags as a panel like typer's (None when it has none).

    Raises the registry's error for an unknown name."""
    from vidax.zoo.registry import family_class, lookup

    family = lookup(model).family
    flags = family_class(family).flags
    if not flags:
        return None
    table = Table(show_header=False, box=None, expand=True, pad_edge=False, padding=(0, 1))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(style="bold yellow", no_wrap=True)
    table.add_column(ratio=1)
    for flag in flags:
        if flag.kind is bool:  # a --x/--no-x pair: the pair in the name column would widen it for every row
            off = f"--no-{flag.name[2:]}"
            table.add_row(flag.name, "", flag.help if off in flag.help else f"{flag.help} ({off}: off)")
        else:
            table.add_row(flag.name, flag_type(flag.kind) + (" ..." if flag.multiple else ""), flag.help)
    return Panel(table, border_style="dim", title=f"{model}'s own flags ({family} family)", title_align="left")


class FamilyHelpCommand(typer.core.TyperCommand):
    """A command whose first argument names a registered model: `TOOL MODEL --help` adds a panel of that
    model's family's own flags (which the tool parses from the leftover command line, so typer does
    not list them), and the epilog that points to them is left out."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["vidax.command_line"] = list(args)  # --help is eager: it runs before MODEL is parsed
        return super().parse_args(ctx, args)

    def named_model(self, ctx: click.Context) -> str | None:
        args = ctx.meta.get("vidax.command_line", [])
        try:
            opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except click.UsageError:
            return None
        return opts.get("model")

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        model = self.named_model(ctx)
        if model is None:
            return super().format_help(ctx, formatter)
        epilog, self.epilog = self.epilog, None
        try:
            super().format_help(ctx, formatter)
        finally:
            self.epilog = epilog
        from vidax.translator import VidaxError

        console = Console()
        try:
            panel = family_panel(model)
        except VidaxError as err:
            console.print(f"note: {str(err).splitlines()[0]}", highlight=False, soft_wrap=True)
            return
        if panel is None:
            console.print(f"{model} has no flags of its own.", highlight=False)
        else:
            console.print(panel)
