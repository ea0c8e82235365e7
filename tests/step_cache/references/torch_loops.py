"""What the step-cache tests of the DiTs diffusers' hooks do not reach (Cosmos3, LTX-2) share: a reference
pipeline run with a torch loop in place of its DiT's forward or block list, restored afterwards whatever
happens, and vidax's step log read back from the sidecar."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Callable


@contextlib.contextmanager
def replaced(owner: Any, name: str, replacement: Any = None):
    """`owner.<name>` set to `replacement` inside the block (None: left for the block to patch, e.g. an
    `install` that wraps `forward`), and the original put back at its end."""
    original = getattr(owner, name)
    if replacement is not None:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def runs_with_loops(owner: Any, name: str, loops: dict, run: Callable[[], Any]) -> dict:
    """{method: `run()` with `owner.<name>` (the DiT's block list) replaced by `loops[method]`}."""
    runs = {}
    for method, loop in loops.items():
        with replaced(owner, name, loop):
            runs[method] = run()
    return runs


def step_log(out: Path) -> list[dict]:
    """The `step_cache_steps` of the sidecar written next to `out`."""
    return json.loads(Path(out).with_suffix(".json").read_text())["step_cache_steps"]
