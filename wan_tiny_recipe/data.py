"""Procedural clips for the embedded `wan-tiny` model: one shape moving over a plain background.

A clip is named by its combination (shape colour, shape, direction, background colour) plus where
the shape starts; the caption comes from a small grammar. A fixed set of
combinations is held out: never rendered with a caption in training, so the semantic test can ask
the model for scenes it has only seen in parts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

SIZE = 64  # frames are SIZE x SIZE
FRAMES = 17  # Wan's VAE takes 1 + 4k frames
STEP = 2.0  # pixels per frame: 32 px over the clip
HALF = 9.0  # half the shape's extent in pixels
EDGE_MARGIN = HALF + 1  # the shape's centre stays this far inside the frame in random placements

# names and sRGB values far apart in colour, so a nearest-colour detector cannot confuse them
PALETTE = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (240, 220, 40),
    "white": (240, 240, 240),
    "black": (20, 20, 20),
}
SHAPES = ("circle", "square", "triangle")
DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}  # (dx, dy), y grows down
ACROSS = (22.0, 32.0, 42.0)  # where the shape sits across its motion in the centred clips
PLACEMENTS = 4  # training clips per combination, each starting at a random place in the frame
HELD_OUT_COUNT = 24
HELD_OUT_SEED = 33

TEMPLATES = (
    "a {colour} {shape} moves {direction} on a {background} background",
    "a {colour} {shape} moving {direction} on a {background} background",
    "{colour} {shape} moves {direction}, {background} background",
)


@dataclass(frozen=True)
class Combo:
    colour: str
    shape: str
    direction: str
    background: str

    def caption(self, template: int = 0) -> str:
        return TEMPLATES[template].format(**self.__dict__)


def all_combos() -> list[Combo]:
    colours = list(PALETTE)
    return [Combo(c, s, d, b) for c, s, d, b in itertools.product(colours, SHAPES, DIRECTIONS, colours) if c != b]


def split() -> tuple[list[Combo], list[Combo]]:
    """(training combos, held-out combos): a fixed random 24 of the 360 are held out."""
    combos = all_combos()
    order = np.random.default_rng(HELD_OUT_SEED).permutation(len(combos))
    held = {int(i) for i in order[:HELD_OUT_COUNT]}
    return [c for i, c in enumerate(combos) if i not in held], [combos[i] for i in sorted(held)]


def vocabulary() -> list[str]:
    """Every word the grammar can write (the tokenizer's vocabulary after its specials)."""
    words = set()
    for template in TEMPLATES:
        words.update(template.replace(",", " ,").split())
    words.update(PALETTE, SHAPES, DIRECTIONS)
    return sorted(w for w in words if not w.startswith("{"))


def _mask(shape: str, cx: float, cy: float) -> np.ndarray:
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    dx, dy = x - cx, y - cy
    if shape == "circle":
        return dx * dx + dy * dy <= HALF * HALF
    if shape == "square":
        return (np.abs(dx) <= HALF * 0.85) & (np.abs(dy) <= HALF * 0.85)
    # triangle pointing up: inside the base and both slanted sides
    return (dy <= HALF) & (dy >= -HALF) & (np.abs(dx) <= (dy + HALF) * 0.6)


STRIPE = 8  # pixels per stripe of the LoRA's striped backgrounds: one latent row each
STRIPE_COLOUR = {"white": "black"}  # the second colour of a striped background: white, or black on white


def background(combo: Combo, stripes: bool = False) -> np.ndarray:
    """`[SIZE, SIZE, 3]`: the plain background, or (`stripes`) horizontal stripes of it and white."""
    plain = np.asarray(PALETTE[combo.background], np.float32) / 255
    image = np.broadcast_to(plain, (SIZE, SIZE, 3)).copy()
    if stripes:
        other = np.asarray(PALETTE[STRIPE_COLOUR.get(combo.background, "white")], np.float32) / 255
        image[(np.arange(SIZE) // STRIPE) % 2 == 1] = other
    return image


def render(combo: Combo, across: float, start: float | None = None, stripes: bool = False) -> np.ndarray:
    """`[FRAMES, SIZE, SIZE, 3]` float32 in [0, 1]; `start`: the centre's first place along the motion
    (default: the travel centred in the frame); `stripes`: the LoRA's striped background."""
    dx, dy = DIRECTIONS[combo.direction]
    travel = STEP * (FRAMES - 1)
    start = SIZE / 2 - travel / 2 * (dx + dy) if start is None else start
    frames = np.empty((FRAMES, SIZE, SIZE, 3), np.float32)
    plate = background(combo, stripes)
    colour = np.asarray(PALETTE[combo.colour], np.float32) / 255
    for f in range(FRAMES):
        along = start + STEP * f * (dx + dy)
        cx, cy = (along, across) if dx else (across, along)
        frames[f] = plate
        frames[f][_mask(combo.shape, cx, cy)] = colour
    return frames


def random_placement(rng: np.random.Generator, combo: Combo) -> tuple[float, float]:
    """(across, start) anywhere the whole track stays in the frame. Wan's DiT sees positions only
    relative to each other (RoPE, no absolute embedding), so it cannot learn "starts at the centre"
    but can learn "one frame on, the shape is further left": random placements teach the motion
    as a relation between frames and leave where it happens to the noise."""
    sign = sum(DIRECTIONS[combo.direction])
    margin = EDGE_MARGIN
    low, high = (margin, SIZE - margin - STEP * (FRAMES - 1)) if sign > 0 else (margin + STEP * (FRAMES - 1), SIZE - margin)
    return float(rng.uniform(margin, SIZE - margin)), float(rng.uniform(low, high))


def dataset(combos: list[Combo], seed: int, centred: bool = True,
            placements: int = PLACEMENTS) -> tuple[list[str], list[tuple[Combo, float, float | None]]]:
    """(combo, across, start) items: every combo once at each `ACROSS` offset with the travel centred
    (start None), or (not `centred`) `placements` times at seeded random places; in a seeded order,
    each with a caption from a seeded template."""
    rng = np.random.default_rng(seed)
    items = [(c, a, None) for c in combos for a in ACROSS] if centred else \
        [(c, *random_placement(rng, c)) for c in combos for _ in range(placements)]
    order = rng.permutation(len(items))
    items = [items[i] for i in order]
    captions = [c.caption(int(rng.choice(len(TEMPLATES), p=(0.6, 0.2, 0.2)))) for c, *_ in items]
    return captions, items
