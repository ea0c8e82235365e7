"""Ctrl-C in vidax's command-line tools: exit code 130, and nothing half-written at the output.

`install()` runs before the tools import anything heavy (`vidax.cli.gen_main`, `convert_main`). The
first SIGINT raises KeyboardInterrupt in the main thread as Python's own handler does, and is also
remembered: Python drops a KeyboardInterrupt raised inside a garbage-collector callback (jax registers
one: "Exception ignored in _xla_gc_callback"), so `check()`, called by every progress hook, raises it
again at the next stage or step. Outputs are committed only after the last hook (`staged_files`), so an
interrupted run leaves none. A second SIGINT ends the process at once, removing the temporary files
being written. Standard library only: it runs while the tools start.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_CODE = 130  # 128 + SIGINT, what a shell reports for a process Ctrl-C ended

_caught = 0
_reported = False


def install() -> None:
    """Handle SIGINT from now on (main thread; elsewhere Python cannot set handlers)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


def _on_sigint(signum, frame) -> None:
    global _caught
    _caught += 1
    if _caught > 1:  # asked twice: stop now, without waiting for the work in progress to return
        report()
        exit_now()
    raise KeyboardInterrupt


def caught() -> bool:
    """Whether a Ctrl-C came (even one Python dropped)."""
    return _caught > 0


def check() -> None:
    """Raise KeyboardInterrupt when a Ctrl-C came: one that was dropped stops the run here."""
    if _caught:
        raise KeyboardInterrupt


def report() -> None:
    """Say "interrupted" on stderr, once."""
    global _reported
    if not _reported:
        _reported = True
        print("interrupted", file=sys.stderr, flush=True)


def exit_now() -> None:
    """End the process with EXIT_CODE now: the temporary files being written removed, the streams flushed,
    and no interpreter teardown (which can crash while the runtime's threads still run an interrupted
    computation: SIGSEGV, measured on XLA:CPU)."""
    output = sys.modules.get("vidax.translator.output")
    if output is not None:
        output.remove_staged()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream: nothing left to flush
            pass
    os._exit(EXIT_CODE)
