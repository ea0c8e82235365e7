"""The test run's book of XLA's figures (`vidax.zoo.plan.dry_run_cache.FigureBook`): the planner-vs-XLA tests
compile dozens of native-size programs; a program whose lowered text is in `tests/xla_figures.json` takes XLA's
figures from there instead of being compiled again (the planner's side is always computed). A changed program
has another text: it is compiled, as before.

Trust: each test process first compiles a probe program (sharded over the 8 CPU devices, a scan of matmuls,
a convolution, a softmax, a donated argument) and compares XLA's figures with the book's; when they differ
(another XLA build, another machine whose compiler plans differently) the book is not used in that process,
and it says so on stderr.

Refresh (after changing what the dry run compiles, so that CI compiles nothing it has figures for):
    VIDAX_TEST_RECORD_FIGURES=1 .venv/bin/python -m pytest -n 2 tests/dryrun tests/fit tests/realscale
adds what the run compiled; delete the file first to drop programs no test compiles any more.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path

BOOK = Path(__file__).with_name("xla_figures.json")
RECORD_ENV = "VIDAX_TEST_RECORD_FIGURES"


def _probe():
    """A small program with what the dry run's programs hold, lowered under the test devices' mesh."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(jax.devices()[:8], ("x",)) if len(jax.devices()) >= 8 else None
    spec = (lambda *names: NamedSharding(mesh, PartitionSpec(*names))) if mesh else (lambda *names: None)

    def program(x, w, k):
        def layer(h, wi):
            h = jax.nn.softmax(h @ wi, axis=-1) @ wi.T + h
            return h, None

        h, _ = jax.lax.scan(layer, x, w)
        image = jax.lax.conv_general_dilated(h[None, None], k, (1, 1), "SAME")[0, 0]
        return h * 2.0, jnp.sum(image)

    args = (jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=spec("x")),
            jax.ShapeDtypeStruct((3, 128, 128), jnp.float32, sharding=spec()),
            jax.ShapeDtypeStruct((1, 1, 3, 3), jnp.float32, sharding=spec()))
    return jax.jit(program, donate_argnums=(0,)).lower(*args)


def open_book() -> None:
    """Give this test process the book, once the probe's figures agree with it (module docstring)."""
    from vidax.zoo.plan import dry_run_cache

    book = dry_run_cache.FigureBook.read(BOOK)
    lowered = _probe()
    key = book.key(lowered)
    recorded = book.get(key)
    actual = dry_run_cache.Figures.of(lowered.compile())
    if recorded is not None and recorded != actual:
        sys.stderr.write(f"tests/xla_figures.json not used here: XLA's figures of the probe differ ({recorded} "
                         f"recorded, {actual} here); every dry-run stage is compiled\n")
        return
    book.put(key, actual)
    book.hits = book.misses = 0
    dry_run_cache.use_figure_book(book)


def close_book() -> None:
    """With `VIDAX_TEST_RECORD_FIGURES=1`, add what this process compiled to the file (under a lock: the
    xdist workers end together)."""
    from vidax.zoo.plan import dry_run_cache

    book = dry_run_cache.figure_book()
    if book is None or not book.added or os.environ.get(RECORD_ENV, "").strip() not in ("1", "true", "yes"):
        return
    with open(Path(tempfile.gettempdir()) / "vidax-xla-figures.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = json.loads(BOOK.read_text()) if BOOK.is_file() else {}
        entries.update(book.added)
        partial = BOOK.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(dict(sorted(entries.items())), indent=0) + "\n")
        partial.replace(BOOK)
