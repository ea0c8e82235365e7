"""The embedded `wan-tiny`'s whole vocabulary as a grid of prompts, and what the detector reads on each.

Every shape x shape colour x background colour (colour != background) x direction: 3 x 6 x 5 x 4 = 360
cells, each asked as "a {colour} {shape} moves {direction} on a {background} background", at two noise seeds
that neither training nor the choice of the model's sampling settings used (`SEEDS`). `python -m bench
tiny_grid` generates all of it; the semantic test a fixed sample (`fixed_sample`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from tests.embedded.detector import PALETTE, Seen, detect

COLOURS = tuple(PALETTE)
SHAPES = ("circle", "square", "triangle")
DIRECTIONS = ("left", "right", "up", "down")
FIELDS = ("colour", "background", "direction")
SEEDS = (100, 101)


@dataclasses.dataclass(frozen=True)
class Cell:
    colour: str
    shape: str
    direction: str
    background: str

    @property
    def prompt(self) -> str:
        return f"a {self.colour} {self.shape} moves {self.direction} on a {self.background} background"

    def hits(self, seen: Seen) -> dict[str, bool]:
        """Which of the three fields the detector read as asked, and "all"."""
        hits = {field: getattr(seen, field) == getattr(self, field) for field in FIELDS}
        return {**hits, "all": all(hits.values())}


def cells() -> list[Cell]:
    """The 360 cells, in a fixed order."""
    return [Cell(c, s, d, b) for c, s, d, b in itertools.product(COLOURS, SHAPES, DIRECTIONS, COLOURS) if c != b]


def held_out(folder) -> list[Cell]:
    """The cells a model folder's `training.json` says were held out of its training."""
    import json
    from pathlib import Path

    record = json.loads((Path(folder) / "training.json").read_text())
    return [Cell(c["colour"], c["shape"], c["direction"], c["background"]) for c in record["held_out"]]


def fixed_sample(held: Sequence[Cell], trained_per_seed: int = 24, seed: int = 65) -> list[tuple[Cell, int]]:
    """The semantic test's runs: every held-out cell at each of `SEEDS`, and at each seed `trained_per_seed`
    other cells drawn by `numpy.random.default_rng(seed)` (a different draw per seed), in the grid's order."""
    rng = np.random.default_rng(seed)
    others = [cell for cell in cells() if cell not in set(held)]
    runs = []
    for s in SEEDS:
        drawn = sorted(rng.choice(len(others), size=trained_per_seed, replace=False))
        runs += [(cell, s) for cell in held] + [(others[i], s) for i in drawn]
    return runs


def generate(runs: Sequence[tuple[Cell, int]], weights: str | None = None) -> list[np.ndarray]:
    """wan-tiny's frames `[F, H, W, 3]` for each (cell, seed), at its native settings, from one pipeline
    (weights loaded and placed once and kept in a `StageCache`, as a server keeps them: the same clips bit
    for bit as loading them for each; programs compiled once). `weights`: another folder of the same
    layout (a retrained candidate) instead of the shipped one."""
    from vidax.zoo.generator.generation import generate_video
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.generator.stages import StageCache
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model="wan-tiny", prompt="", weights=weights, release_stages=False)
    pipeline = make_pipeline("wan-tiny", options)
    cache = StageCache()
    try:
        return [generate_video(pipeline, dataclasses.replace(options, prompt=cell.prompt, seed=seed),
                               cache=cache).frames for cell, seed in runs]
    finally:
        cache.release()


def read(runs: Iterable[tuple[Cell, int]], clips: Iterable[np.ndarray]) -> list[tuple[Cell, int, Seen, dict]]:
    """(cell, seed, what the detector saw, the hits) per run."""
    out = []
    for (cell, seed), frames in zip(runs, clips, strict=True):
        seen = detect(frames)
        out.append((cell, seed, seen, cell.hits(seen)))
    return out


def row(cell: Cell, seed: int, seen: Seen, hits: dict) -> str:
    """One line of a table of reads."""
    return (f"seed {seed:>4} | {cell.colour:>6} {cell.shape:<8} {cell.direction:<5} on {cell.background:<6} | seen "
            f"{seen.colour or '-':>6} {seen.direction or '-':<5} on {seen.background:<6} travel {seen.travel:4.1f} px"
            f" | {'pass' if hits['all'] else 'FAIL'}")
