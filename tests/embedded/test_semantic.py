"""The embedded `wan-tiny` draws what the prompt says, over its whole vocabulary.

`python -m bench tiny_grid` asks the model for every cell of its grid (shape x colour x background x
direction, 360 prompts; tests/embedded/grid.py) at two seeds neither training nor the choice of its sampling
settings used (100 and 101): fully right 704 of 720 (97.8%). This test keeps a fixed sample of those runs
(`grid.fixed_sample`): the 24 combinations held out of training (`training.json`, never rendered with a
caption) and 24 others drawn per seed, 96 clips at the model's native settings; the detector
(tests/embedded/detector.py) reads the shape's colour, the background and the direction of each. The table
is printed (`pytest -s`). The test asks for 85% fully right (issue 65's target over the grid) and 90% of the
held-out half.

Measured (`pytest -s`, CPU tuning off as in every test): 91 of 96 fully right (94.8%; seed 100 47, seed 101
44 of 48), background and direction 96, colour 91; the held-out half 45 of 48. Every miss is a colour between
two names (the detector names none): green shapes on red and on white, a white triangle on red.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from detector import PALETTE, detect
from tests.backend_level import call_at_default_level
from tests.embedded.grid import FIELDS, SEEDS, fixed_sample, generate, held_out, read, row
from vidax.zoo.wan.tiny import TRAINED

TARGET = 0.85  # issue 65: share fully right (shape colour, background and direction) over the grid's sample
HELD_OUT_TARGET = 0.9  # ... and of its held-out half (issue 33's 90%)


@pytest.fixture(scope="module")
def runs():
    return fixed_sample(held_out(TRAINED))


@pytest.fixture(scope="module")
def generated(runs):
    """The clips, generated at XLA's default CPU level as a user's run compiles them (tests/backend_level.py:
    96 generations are mostly running compiled code)."""
    return call_at_default_level(generate, runs)


def test_a_sample_of_the_grid_is_drawn(runs, generated):
    held = set(held_out(TRAINED))
    reads = read(runs, generated)
    right = {field: sum(hits[field] for *_, hits in reads) for field in (*FIELDS, "all")}
    held_right = sum(hits["all"] for cell, _, _, hits in reads if cell in held)
    per_seed = {seed: sum(hits["all"] for _, s, _, hits in reads if s == seed) for seed in SEEDS}
    print("\n".join(["", *(row(*r) for r in reads),
                     f"{right['all']}/{len(reads)} fully right ({right['all'] / len(reads):.1%}; target {TARGET:.0%}); "
                     + ", ".join(f"{field} {right[field]}/{len(reads)}" for field in FIELDS)
                     + f"; held out of training {held_right}/{2 * len(held)}; per seed "
                     + ", ".join(f"{seed}: {count}" for seed, count in per_seed.items())]))
    assert len(held) == 24 and len(reads) == 96
    assert right["all"] >= math.ceil(TARGET * len(reads)), right
    assert held_right >= math.ceil(HELD_OUT_TARGET * 2 * len(held)), held_right


def test_generated_clip_has_readme_size(generated):
    clip = generated[0]
    assert clip.shape[0] >= 16 and clip.shape[1] >= 64 and clip.shape[2] >= 64


# --- the detector itself: it must tell a right drawing from a wrong one --------------------------


def _clip(colour, background: str, dx: int, dy: int) -> np.ndarray:
    """A circle of `colour` (a name, or RGB 0-255) moving over `background`."""
    frames = np.empty((17, 64, 64, 3), np.float32)
    ys, xs = np.mgrid[0:64, 0:64]
    rgb = np.asarray(PALETTE[colour] if isinstance(colour, str) else colour) / 255
    for f in range(17):
        cx, cy = 32 + dx * (2 * f - 16), 32 + dy * (2 * f - 16)
        frames[f] = np.asarray(PALETTE[background]) / 255
        frames[f][(xs - cx) ** 2 + (ys - cy) ** 2 <= 81] = rgb
    return frames


def _soft(frames: np.ndarray, passes: int = 3) -> np.ndarray:
    """The clip with soft edges, as the model draws them: the shape's rim a blend of its colour and the
    background's (a 5 x 5 box blur, `passes` times: about 6 px of blend, the core of the 18-px circle kept)."""
    from numpy.lib.stride_tricks import sliding_window_view

    for _ in range(passes):
        padded = np.pad(frames, ((0, 0), (2, 2), (2, 2), (0, 0)), mode="edge")
        frames = sliding_window_view(padded, (5, 5), axis=(1, 2)).mean(axis=(-2, -1))
    return frames.astype(np.float32)


@pytest.mark.parametrize("colour, background, dx, dy, direction", [
    ("red", "blue", -1, 0, "left"), ("yellow", "black", 1, 0, "right"), ("white", "green", 0, -1, "up"),
    ("black", "white", 0, 1, "down"), ("green", "red", 0, 0, None),
])
def test_detector_reads_rendered_clips(colour, background, dx, dy, direction):
    seen = detect(_clip(colour, background, dx, dy))
    assert (seen.colour, seen.background, seen.direction) == (colour, background, direction)


@pytest.mark.parametrize("background", list(PALETTE))
def test_detector_reads_a_soft_shape_by_its_core(background):
    """Soft edges blend the shape's colour with the background's; the colour is read from the shape's core,
    so the blend does not decide it (a median over the whole blob read this black circle on white as green,
    and the model's own green shapes on red as yellow)."""
    for colour in PALETTE:
        if colour != background:
            seen = detect(_soft(_clip(colour, background, 1, 0)))
            assert (seen.colour, seen.background, seen.direction) == (colour, background, "right"), colour


@pytest.mark.parametrize("rgb, background", [
    ((255, 150, 40), "black"),  # orange: between red and yellow
    ((36, 129, 133), "white"),  # teal: between green and blue
    ((168, 195, 240), "green"),  # a light blue drawn for white
    ((128, 128, 128), "red"),  # grey: between white and black
])
def test_detector_names_no_colour_between_names(rgb, background):
    """A core between two named colours is neither: the nearest name alone called an orange shape yellow
    and a teal one green."""
    assert detect(_soft(_clip(rgb, background, 0, 1))).colour is None
    assert detect(_clip(rgb, background, 0, 1)).colour is None


def test_detector_sees_no_shape_in_flat_noise():
    rng = np.random.default_rng(0)
    frames = np.clip(np.full((17, 64, 64, 3), 0.5) + 0.02 * rng.standard_normal((17, 64, 64, 3)), 0, 1)
    seen = detect(frames.astype(np.float32))
    assert seen.colour is None and seen.direction is None
