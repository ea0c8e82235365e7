"""vidax's command-line tools. The console scripts start here: `gen_main` (vidax-gen) and
`convert_main` (vidax-convert) handle Ctrl-C before the tools' imports begin (`vidax.cli.interrupts`)."""

from __future__ import annotations


def gen_main() -> None:
    _launch("vidax.cli.gen")


def convert_main() -> None:
    _launch("vidax.cli.convert")


def _launch(module: str) -> None:
    """Import `module` and run its `main`; a Ctrl-C at any point exits 130 with one line."""
    import importlib
    import sys

    from vidax.cli import interrupts

    interrupts.install()
    try:
        importlib.import_module(module).main()
        code = 0
    except KeyboardInterrupt:
        code = interrupts.EXIT_CODE
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) or done.code is None else 1
    if interrupts.caught():  # also when Python dropped it, or a parser turned it into exit 1 ("Aborted!")
        code = interrupts.EXIT_CODE
    if code == interrupts.EXIT_CODE:
        interrupts.report()
        interrupts.exit_now()
    sys.exit(code)
