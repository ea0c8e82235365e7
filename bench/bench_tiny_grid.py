"""What the embedded `wan-tiny` draws over its whole vocabulary: every shape x colour x background (colour !=
background) x direction, 360 prompts, at two seeds that neither training nor the choice of its sampling
settings used (100 and 101), 720 clips at the model's native settings; the semantic test's detector
(tests/embedded/detector.py) reads the shape's colour, the background and the direction of each.

Prints the share fully right (README quotes it), per seed and per field, the 24 combinations held out
of training apart from the rest, which colour was read where the colour missed (asked colour x
background), and every miss. Not a test: it asserts nothing (the test, tests/embedded/test_semantic.py,
holds a fixed sample of the grid). The shipped model, 2026-12-06 (572 s of generation on the 2-core VM
under other engineers' load): fully right 705 of 720 (97.9%; seed 100 358, seed 101 347 of 360),
background and direction 720, colour 705; the 24 held-out combinations 45 of 48. Every miss is a colour
between two names, near the background's hue: green on red (6 of 24) and on white (4), yellow on black
(2), white on green (2) and on red (1).

    .venv/bin/python -m bench tiny_grid
    VIDAX_BENCH_TINY_WEIGHTS=DIR .venv/bin/python -m bench tiny_grid   # a retrained folder of the same layout
    VIDAX_BENCH_GRID_SEEDS=100 .venv/bin/python -m bench tiny_grid     # other seeds (comma-separated)
    VIDAX_BENCH_GRID_SAVE=grid.npz .venv/bin/python -m bench tiny_grid  # also keep the clips (uint8) and prompts
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `tests` is a folder of the repository, not an installed package

from bench.protocol import announce_load  # noqa: E402
from bench.quality import tiny_folder  # noqa: E402
from tests.embedded.grid import COLOURS, FIELDS, cells, generate, held_out, read, row  # noqa: E402
from tests.embedded.grid import SEEDS as GRID_SEEDS  # noqa: E402

SEEDS = tuple(int(s) for s in os.environ.get("VIDAX_BENCH_GRID_SEEDS", "").split(",") if s) or GRID_SEEDS


def score(weights: str | None = None, seeds: tuple[int, ...] = SEEDS, verbose: bool = True,
          save: str | None = None) -> dict:
    """Generate and read the whole grid at `seeds`; print the tables (`verbose`); return the counts.
    `save`: an .npz to keep the clips (uint8) and their prompts and seeds in."""
    folder = Path(weights) if weights else tiny_folder()
    runs = [(cell, seed) for seed in seeds for cell in cells()]
    start = time.perf_counter()
    clips = generate(runs, weights)
    seconds = time.perf_counter() - start
    if save:
        import numpy as np

        np.savez_compressed(save, clips=np.round(np.clip(np.stack(clips), 0, 1) * 255).astype(np.uint8),
                            prompts=np.asarray([cell.prompt for cell, _ in runs]),
                            seeds=np.asarray([seed for _, seed in runs]))
    counts = tally(read(runs, clips), set(held_out(folder)))
    if verbose:
        print(f"wan-tiny over the grid ({folder}): {len(cells())} prompts x seeds {', '.join(map(str, seeds))}, "
              f"{len(runs)} clips in {seconds:.0f} s")
        print_tables(counts, seeds)
    return {"seconds": seconds, **{k: v for k, v in counts.items() if k not in ("drawn", "misses")}}


def tally(reads: list, held: set) -> dict:
    """Counts over `grid.read`'s rows: per field, per seed, the held-out cells', the colours read where the
    colour missed, and the rows that missed."""
    total, per_seed, held_right = collections.Counter(), collections.Counter(), collections.Counter()
    drawn, misses = collections.defaultdict(collections.Counter), []  # (asked colour, background) -> read
    for cell, seed, seen, hits in reads:
        total.update(field for field, hit in hits.items() if hit)
        per_seed[seed] += hits["all"]
        if cell in held:
            held_right["runs"] += 1
            held_right["all"] += hits["all"]
        if not hits["colour"]:
            drawn[cell.colour, cell.background][seen.colour or "none"] += 1
        if not hits["all"]:
            misses.append(row(cell, seed, seen, hits))
    return {"runs": len(reads), **{f: total[f] for f in (*FIELDS, "all")}, "per_seed": dict(per_seed),
            "held_out": dict(held_right), "drawn": drawn, "misses": misses}


def print_tables(counts: dict, seeds: tuple[int, ...]) -> None:
    n = counts["runs"]
    each = n // (len(COLOURS) * (len(COLOURS) - 1))
    print(f"\ncolour misses by asked colour (rows) and background (columns), of {each} each; the colour read "
          "instead (none: a core between two named colours, tests/embedded/detector.py)")
    print(f"{'':>8} | " + " | ".join(f"{b:<14}" for b in COLOURS))
    for colour in COLOURS:
        cells_ = []
        for background in COLOURS:
            read_as = counts["drawn"].get((colour, background), {})
            text = (f"{sum(read_as.values())}: " + ",".join(f"{k} {v}" for k, v in read_as.most_common(2))
                    if read_as else "0")
            cells_.append("" if colour == background else text)
        print(f"{colour:>8} | " + " | ".join(f"{c:<14}" for c in cells_))
    print("\nmisses:\n" + "\n".join(counts["misses"]))
    print(f"\nfully right {counts['all']}/{n} ({counts['all'] / n:.1%}); "
          + ", ".join(f"{field} {counts[field]}/{n}" for field in FIELDS)
          + "; per seed " + ", ".join(f"{s}: {counts['per_seed'].get(s, 0)}/{n // len(seeds)}" for s in seeds)
          + f"; held out of training {counts['held_out'].get('all', 0)}/{counts['held_out'].get('runs', 0)}")


def main() -> None:
    announce_load("wan-tiny over the grid")
    score(os.environ.get("VIDAX_BENCH_TINY_WEIGHTS") or None, save=os.environ.get("VIDAX_BENCH_GRID_SAVE") or None)


if __name__ == "__main__":
    main()
