"""`loss.png`: the training loss (each step faint, its running mean bold) and the validation loss (points and
line) against the step, drawn with Pillow (already a runtime dependency: no plotting library is needed for
two lines and their axes)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

SIZE = (960, 540)
MARGIN = (80, 30, 30, 60)  # left, top, right, bottom
TRAIN, TRAIN_MEAN, VALIDATION = (170, 190, 230), (30, 80, 200), (220, 90, 20)


def running_mean(values: list[float], window: int) -> np.ndarray:
    values = np.asarray(values, np.float64)
    if len(values) == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    starts = np.maximum(np.arange(1, len(values) + 1) - window, 0)
    return (sums[1:] - sums[starts]) / (np.arange(1, len(values) + 1) - starts)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values spanning [low, high]."""
    span = (high - low) or abs(high) or 1.0
    step = 10 ** math.floor(math.log10(span / count))
    step *= next(m for m in (1, 2, 5, 10) if span / (step * m) <= count)
    return [v for v in np.arange(math.ceil(low / step) * step, high + step / 2, step)]


def loss_png(train: list[tuple[int, float]], validation: list[tuple[int, float]], title: str = "") -> bytes:
    """PNG bytes of the plot (steps on x; loss on y)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", SIZE, "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN[0], MARGIN[1], SIZE[0] - MARGIN[2], SIZE[1] - MARGIN[3]
    steps = [s for s, _ in train] + [s for s, _ in validation]
    values = [v for _, v in train] + [v for _, v in validation]
    finite = [v for v in values if math.isfinite(v)]
    if not steps or not finite:
        draw.text((left, top), "no losses yet", fill="black")
        return _encode(image)
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    lo, hi = min(finite), max(finite)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    px = lambda s: left + (s - x0) / (x1 - x0) * (right - left)  # noqa: E731
    py = lambda v: bottom - (v - lo) / (hi - lo) * (bottom - top)  # noqa: E731
    for v in _ticks(lo, hi):
        draw.line([(left, py(v)), (right, py(v))], fill=(235, 235, 235))
        draw.text((8, py(v) - 6), f"{v:.4g}", fill="black")
    for s in _ticks(x0, x1):
        draw.text((px(s) - 10, bottom + 8), f"{int(s)}", fill="black")
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.text((left, bottom + 30), "step", fill="black")
    if train:
        points = [(px(s), py(v)) for s, v in train if math.isfinite(v)]
        if len(points) > 1:
            draw.line(points, fill=TRAIN, width=1)
        mean = running_mean([v for _, v in train], max(1, len(train) // 20))
        draw.line([(px(s), py(m)) for (s, _), m in zip(train, mean)] or [], fill=TRAIN_MEAN, width=3)
    if validation:
        points = [(px(s), py(v)) for s, v in validation]
        if len(points) > 1:
            draw.line(points, fill=VALIDATION, width=3)
        for x, y in points:
            draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=VALIDATION)
    legend = [("training loss (each step)", TRAIN), ("training loss (running mean)", TRAIN_MEAN)]
    legend += [("validation loss", VALIDATION)] if validation else []
    for i, (label, colour) in enumerate(legend):
        y = top + 10 + 18 * i
        draw.line([(right - 250, y + 6), (right - 225, y + 6)], fill=colour, width=3)
        draw.text((right - 218, y), label, fill="black")
    if title:
        draw.text((left, 8), title, fill="black")
    return _encode(image)


def _encode(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_loss_png(path: Path, train: list[tuple[int, float]], validation: list[tuple[int, float]],
                   title: str = "") -> Path:
    """The plot written whole or not at all."""
    from vidax.translator.output import write_file

    return write_file(path, loss_png(train, validation, title))
