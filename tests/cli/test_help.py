"""Every command's --help prints whole: rich reads `[...]` in a flag's help as markup, and a help text
with an unmatched closing tag makes `--help` itself crash."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner


@pytest.mark.parametrize("module, flags", [
    ("vidax.cli.gen", ("--lora", "--transformer", "--cache", "--dry-run", "--weights-dtype")),
    ("vidax.cli.convert", ("--lora", "--transformer")),
    ("vidax.cli.serve", ("--lora", "--coordinator", "--token")),
])
def test_help_prints_every_flag(module, flags):
    import importlib

    app = importlib.import_module(module).app
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    for flag in flags:
        assert flag in result.output, (flag, result.output)
