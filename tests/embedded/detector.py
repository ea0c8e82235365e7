"""A plain detector for the embedded model's scenes: background and shape colour by nearest named
colour, the shape's direction by its centroid's track. Written without the training code, from
what the model was taught to draw (see vidax.zoo.wan.tiny)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PALETTE = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (240, 220, 40),
           "white": (240, 240, 240), "black": (20, 20, 20)}
FAR_FROM_BACKGROUND = 0.3  # RGB distance in [0, 1] units above which a pixel belongs to the shape
MIN_PIXELS = 6  # a frame with fewer shape pixels has no centroid
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


def detect(frames: np.ndarray) -> Seen:
    """`frames` `[F, H, W, 3]` in [0, 1]."""
    border = np.concatenate([frames[:, :2].reshape(-1, 3), frames[:, -2:].reshape(-1, 3),
                             frames[:, :, :2].reshape(-1, 3), frames[:, :, -2:].reshape(-1, 3)])
    background_rgb = np.median(border, axis=0)
    mask = np.sqrt(((frames - background_rgb) ** 2).sum(-1)) > FAR_FROM_BACKGROUND  # [F, H, W]
    colour = nearest_colour(np.median(frames[mask], axis=0)) if mask.sum() >= MIN_PIXELS else None
    return Seen(colour, nearest_colour(background_rgb), *_direction(mask))


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
