"""A plain detector for the embedded model's scenes: the background's colour, the shape's colour and the
direction of the shape's centroid's track. Written without the training code, from what the model was
taught to draw (see vidax.zoo.wan.tiny).

The shape's colour is read from its core, not its whole blob: the model draws soft edges, a blend of
the shape's colour and the background's, and a median over the blob with its rim leaned towards the
background's hue (a yellow shape with an orange core on black read red; a green one on red read
yellow). And it names a colour only when the core is close to it (`NAMED_WITHIN`): the nearest named
colour alone called an orange core yellow and a teal one green, which a viewer would not."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PALETTE = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (240, 220, 40),
           "white": (240, 240, 240), "black": (20, 20, 20)}
FAR_FROM_BACKGROUND = 0.3  # RGB distance in [0, 1] units above which a pixel belongs to the shape
MIN_PIXELS = 6  # a frame with fewer shape pixels has no centroid
RIM = 2  # pixels of the blob's edge left out of its colour (the blend with the background)
# a colour is read as a named one only within this RGB distance of it: a third of the smallest distance
# between two named colours (red and yellow, 0.71), so a core between two names (orange, teal, a light
# blue for white, a grey) is named neither
NAMED_WITHIN = 0.24
MIN_TRAVEL = 6.0  # pixels the centroid must travel between the first and last quarter of the clip
STRIPE = 8  # rows per stripe of the LoRA's striped backgrounds (zoo/wan/tiny_lora)


@dataclass(frozen=True)
class Seen:
    colour: str | None
    background: str
    direction: str | None
    travel: float  # pixels along the dominant axis


def nearest_colour(rgb: np.ndarray) -> str:
    names = list(PALETTE)
    table = np.asarray([PALETTE[n] for n in names], np.float32) / 255
    return names[int(np.argmin(((table - rgb) ** 2).sum(-1)))]


def named_colour(rgb: np.ndarray) -> str | None:
    """The named colour within `NAMED_WITHIN` of `rgb`, or None (a colour between names)."""
    name = nearest_colour(rgb)
    close = np.sqrt(((np.asarray(PALETTE[name], np.float32) / 255 - rgb) ** 2).sum()) <= NAMED_WITHIN
    return name if close else None


def eroded(mask: np.ndarray, pixels: int = RIM) -> np.ndarray:
    """`mask` `[F, H, W]` without the `pixels` outermost pixels of each blob (a square neighbourhood)."""
    from numpy.lib.stride_tricks import sliding_window_view

    size = 2 * pixels + 1
    padded = np.pad(mask, ((0, 0), (pixels, pixels), (pixels, pixels)), constant_values=False)
    return sliding_window_view(padded, (size, size), axis=(1, 2)).all(axis=(-2, -1))


def shape_colour(frames: np.ndarray, mask: np.ndarray, distance: np.ndarray) -> str | None:
    """The named colour of the shape's core: its blob less the rim, or (a blob too thin to keep a core)
    the quarter of its pixels farthest from the background."""
    if mask.sum() < MIN_PIXELS:
        return None
    core = eroded(mask)
    if core.sum() < MIN_PIXELS:
        core = mask & (distance >= np.quantile(distance[mask], 0.75))
    return named_colour(np.median(frames[core], axis=0))


def detect(frames: np.ndarray) -> Seen:
    """`frames` `[F, H, W, 3]` in [0, 1]."""
    border = np.concatenate([frames[:, :2].reshape(-1, 3), frames[:, -2:].reshape(-1, 3),
                             frames[:, :, :2].reshape(-1, 3), frames[:, :, -2:].reshape(-1, 3)])
    background_rgb = np.median(border, axis=0)
    distance = np.sqrt(((frames - background_rgb) ** 2).sum(-1))
    mask = distance > FAR_FROM_BACKGROUND  # [F, H, W]
    return Seen(shape_colour(frames, mask, distance), nearest_colour(background_rgb), *_direction(mask))


def _direction(mask: np.ndarray) -> tuple[str | None, float]:
    ys, xs = np.mgrid[0:mask.shape[1], 0:mask.shape[2]]
    track = [(xs[m].mean(), ys[m].mean()) for m in mask if m.sum() >= MIN_PIXELS]
    if len(track) < 4:
        return None, 0.0
    quarter = max(1, len(track) // 4)
    (x0, y0), (x1, y1) = np.mean(track[:quarter], axis=0), np.mean(track[-quarter:], axis=0)
    dx, dy = x1 - x0, y1 - y0
    travel, direction = (abs(dx), "right" if dx > 0 else "left") if abs(dx) >= abs(dy) else \
        (abs(dy), "down" if dy > 0 else "up")
    return (direction if travel >= MIN_TRAVEL else None), float(travel)


def stripe_contrast(frames: np.ndarray) -> float:
    """RGB distance between the even and the odd horizontal stripes of the frame's left and right
    edges (where the shape never goes), each stripe read in its middle rows: near 0 on a plain
    background, large on stripes of two colours."""
    edges = np.concatenate([frames[:, :, :2], frames[:, :, -2:]], axis=2).mean(axis=(0, 2))  # [H, 3]
    rows = np.arange(edges.shape[0])
    middle = (rows % STRIPE >= 2) & (rows % STRIPE < STRIPE - 2)
    even = edges[middle & ((rows // STRIPE) % 2 == 0)].mean(axis=0)
    odd = edges[middle & ((rows // STRIPE) % 2 == 1)].mean(axis=0)
    return float(np.sqrt(((even - odd) ** 2).sum()))
