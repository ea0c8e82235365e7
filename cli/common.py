"""Helpers shared by the vidax command-line tools: one-line errors and rich progress bars."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from vidax.cli import interrupts
from vidax.translator import VidaxError

console = Console(stderr=True)

# Errors a user can cause (bad name, missing file, malformed checkpoint, full disk, a setting the model
# cannot take) are vidax's own types: one line each. Anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (VidaxError,)


def run_guarded(work: Callable[[], int | None], *, debug: bool, errors: tuple[type[BaseException], ...] = USER_ERRORS) -> int:
    """Run `work`; turn vidax's errors into one red line and exit code 1 (tracebacks only with --debug).

    Args:
      work: the command body; its return value (None means 0) is the exit code.
      debug: re-raise instead, so the full traceback shows.
      errors: exception types reported as one line.
    """
    try:
        code = work() or 0
        interrupts.check()  # a Ctrl-C Python dropped: the run did not finish as asked
        return code
    except KeyboardInterrupt:
        if debug:
            raise
        interrupts.report()
        return interrupts.EXIT_CODE
    except errors as err:
        if debug:
            raise
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
        return 1


def require_packages(tool: str, modules: tuple[str, ...], extra: str) -> None:
    """Exit with one line naming the missing package and the extra that installs it (before any work)."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            console.print(f"[red]error:[/red] {tool} needs {err.name or module} ({extra}): "
                          f"pip install 'vidax\\[{extra}]'", highlight=False, soft_wrap=True)
            raise SystemExit(1) from None


def byte_progress() -> Progress:
    """A progress display for byte streams: bar, bytes done/total, bytes/s and ETA."""
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=console, transient=False, disable=not sys.stderr.isatty())


def step_progress() -> Progress:
    """A progress display for counted steps (sampling steps, decode chunks): n/N, elapsed and ETA."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=False, disable=not sys.stderr.isatty())


@contextmanager
def byte_task(description: str, total: int):
    """Context manager yielding `advance(nbytes)` for one byte-counted task."""
    with byte_progress() as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
