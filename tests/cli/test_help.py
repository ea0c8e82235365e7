"""Every command's --help prints whole (rich reads `[...]` in a flag's help as markup, and a help text
with an unmatched closing tag makes `--help` itself crash), and stays readable at 80 columns: one table
of options is as wide in its name column as its widest option name, which left the descriptions a strip
of about 22 characters (`--guidance` over 7 lines); in panels each table is sized by its own names."""

from __future__ import annotations

import importlib
import re

import pytest
from typer.testing import CliRunner

# a row of an options panel: the option's name, maybe a second name (a --x/--no-x pair), maybe its
# type, then the description, whose first character is group 2
OPTION_ROW = re.compile(r"^│ (--[\w-]+)(?: +--[\w-]+)? +(?:<[^>]+>(?: \.\.\.)? +)?(\S)")
WIDTH = 80
# a description starts by this column: at least 36 characters of every 80-column line say what a flag does
DESCRIPTION_BY = 40

COMMANDS = [
    ("vidax.cli.gen", ["--help"]),
    ("vidax.cli.gen", ["ltx-2", "--help"]),  # the model's family's own flags in a panel of their own
    ("vidax.cli.gen", ["wan2.2-t2v-a14b", "--help"]),
    ("vidax.cli.convert", ["--help"]),
    ("vidax.cli.serve", ["--help"]),
    ("vidax.cli.eval", ["--help"]),
]


def render_help(module: str, args: list[str], width: int) -> str:
    result = CliRunner().invoke(importlib.import_module(module).app, args, env={"COLUMNS": str(width)},
                                terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


def description_columns(text: str) -> dict[str, int]:
    """Each option's name -> the column its description starts at."""
    return {m.group(1): m.start(2) for m in map(OPTION_ROW.match, text.splitlines()) if m}


@pytest.mark.parametrize("module, flags", [
    ("vidax.cli.gen", ("--lora", "--transformer", "--cache", "--dry-run", "--weights-dtype", "--keep-stages")),
    ("vidax.cli.convert", ("--lora", "--transformer")),
    ("vidax.cli.serve", ("--lora", "--coordinator", "--token", "--no-warmup", "--keep-stages")),
])
def test_help_prints_every_flag(module, flags):
    text = render_help(module, ["--help"], 200)
    for flag in flags:
        assert flag in text, (flag, text)


@pytest.mark.parametrize("module, args", COMMANDS, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_help_reads_at_80_columns(module, args):
    text = render_help(module, args, WIDTH)
    lines = text.splitlines()
    assert max(map(len, lines)) <= WIDTH, text
    starts = description_columns(text)
    assert len(starts) >= 10, text  # the rows were found: the check below cannot pass on nothing
    squeezed = {name: column for name, column in starts.items() if column > DESCRIPTION_BY}
    assert not squeezed, (squeezed, text)
    if module == "vidax.cli.gen":  # the example: --guidance's description wrapped over 7 lines
        first = next(i for i, line in enumerate(lines) if line.startswith("│ --guidance "))
        rest = [line for line in lines[first + 1:first + 4] if re.match(r"^│ +[^ -]", line)]
        assert len(rest) <= 2, lines[first:first + 8]


def test_gen_model_help_lists_the_family_flags():
    text = render_help("vidax.cli.gen", ["wan2.2-t2v-a14b", "--help"], 120)
    assert "wan2.2-t2v-a14b's own flags (wan family)" in text, text
    assert "--guidance-2" in text and "--extend-overlap" in text
    assert "vidax-gen MODEL --help" not in text  # the epilog pointing here is left out
    plain = render_help("vidax.cli.gen", ["--help"], 120)
    assert "own flags (" not in plain and "vidax-gen MODEL --help" in plain
    assert "--use-cross-timestep" in render_help("vidax.cli.gen", ["ltx-2", "--help"], 120)  # a bool pair's name
    unknown = render_help("vidax.cli.gen", ["no-such-model", "--help"], 120)
    assert "unknown model 'no-such-model'" in unknown and "--guidance" in unknown


def test_hidden_default_flags_still_parse():
    """--release-stages and --warmup (the defaults) left the help but still parse: a script that names
    them keeps working."""
    from vidax.cli import gen, serve

    for module in (gen, serve):
        text = render_help(module.__name__, ["--help"], 200)
        assert "--release-stages" not in text and "--warmup " not in text
    result = CliRunner().invoke(gen.app, ["--release-stages", "--keep-stages", "--list"])
    assert result.exit_code == 0, result.output
