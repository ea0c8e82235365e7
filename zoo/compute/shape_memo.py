"""Shapes the planner traces, kept on disk beside the compile cache, so that a second process plans without them.

Choosing a layout traces abstract inits (a DiT's sizes, a VAE's parameter shapes and decode cache, an encoder's
parameter count), in every process before its first stage: most of the planning time, which for Wan2.1-1.3B at
480p was 5.0 s of a TPU v5e host's 27 s to the first step (`bench.bench_plan_start` compares a process that traces
with one that reads them). These are pure functions of the model's code and config, so a value is kept under a key
that holds both: the config's repr and a fingerprint of every source file of `vidax.zoo` (any edit
makes new keys). Kept only where jax's persistent compilation cache is on (the same folder, `vidax-shapes/`);
nothing is kept with `--no-compile-cache`. An unreadable entry is computed again and rewritten.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

FOLDER = "vidax-shapes"


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash of the `vidax.zoo` package's Python sources (names and contents)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _folder() -> Path | None:
    if not jax.config.jax_enable_compilation_cache or not jax.config.jax_compilation_cache_dir:
        return None
    return Path(jax.config.jax_compilation_cache_dir) / FOLDER


def remembered(kind: str, key: Any, compute: Callable[[], Any]) -> Any:
    """`compute()`, or the value an earlier process kept for `kind` and `key` (its repr names the config and the
    inputs). The value must survive JSON (numbers, strings, lists, dicts)."""
    folder, described = _folder(), repr(key)
    if folder is None or " at 0x" in described:  # a repr naming an address is another key in every process
        return compute()
    name = hashlib.sha256(f"{kind}\n{described}\n{source_fingerprint()}".encode()).hexdigest()[:32]
    path = folder / f"{kind}-{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    value = compute()
    temporary = None
    try:  # written whole under another name, then renamed: a reader sees all of it or none
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(value, out)
        os.replace(temporary, path)
    except OSError:  # a read-only or full cache folder: the value is still right, only not kept
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
    return value
