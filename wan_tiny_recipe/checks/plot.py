"""Loss curves of both stages as one PNG (PIL only: no plotting library needed).

    .venv/bin/python -m wan_tiny_recipe.checks.plot              # -> docs/wan_tiny_loss.png
    .venv/bin/python -m wan_tiny_recipe.checks.plot --only dit   # redraw the DiT's panel, keep the VAE's

`--only` serves a run that retrained one stage on another run's weights: it has no log of the stage it
reused, whose panel in the existing PNG still shows the weights that ship.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from wan_tiny_recipe.common import RUN, each_step_once

OUT = Path(__file__).resolve().parents[2] / "docs" / "wan_tiny_loss.png"
W, H, PAD = 420, 260, 40


def _smooth(values: np.ndarray, width: int = 15) -> np.ndarray:
    kernel = np.ones(min(width, len(values))) / min(width, len(values))
    return np.convolve(values, kernel, mode="valid")


def cpu_seconds(rows: list[dict]) -> float:
    """CPU seconds of a log written by one or more resumed runs (each run's counter starts again)."""
    counts = [r.get("cpu_seconds_this_run", 0.0) for r in rows]
    ends = [a for a, b in zip(counts, counts[1:]) if b < a] + counts[-1:]
    return float(sum(ends))


def _panel(title: str, log: list[dict]) -> Image.Image:
    image = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(image)
    rows = each_step_once(log)
    steps = np.asarray([r["step"] for r in rows], float)
    loss = np.log10(np.asarray([r["loss"] for r in rows], float))
    lo, hi = loss.min(), loss.max()
    to_xy = lambda s, v: (PAD + (s - steps[0]) / max(steps[-1] - steps[0], 1) * (W - 2 * PAD),
                          H - PAD - (v - lo) / max(hi - lo, 1e-9) * (H - 2 * PAD))
    draw.line([to_xy(s, v) for s, v in zip(steps, loss)], fill=(190, 190, 230))
    smooth = _smooth(loss)
    draw.line([to_xy(s, v) for s, v in zip(steps[len(steps) - len(smooth):], smooth)], fill=(20, 40, 160), width=2)
    draw.rectangle([PAD, PAD, W - PAD, H - PAD], outline="black")
    minutes, cpu = rows[-1]["seconds"] / 60, cpu_seconds(log) / 60
    draw.text((PAD, 10), f"{title}: {len(rows)} steps, {cpu:.0f} CPU-min ({minutes:.0f} min wall, shared CPU)", fill="black")
    draw.text((4, PAD - 12), f"{10 ** hi:.3g}", fill="black")
    draw.text((4, H - PAD), f"{10 ** lo:.3g}", fill="black")
    draw.text((W - PAD - 40, H - PAD + 6), f"step {int(steps[-1]) + 1}", fill="black")
    draw.text((PAD, H - PAD + 6), "loss (log scale)", fill="black")
    return image


STAGES = (("vae", "VAE"), ("dit", "DiT, UMT5 frozen"))  # one panel each, left to right


def main(only: str | None = None) -> None:
    if only is None:
        sheet = Image.new("RGB", (W * len(STAGES), H), "white")
    else:
        sheet = Image.open(OUT).convert("RGB")
        if sheet.size != (W * len(STAGES), H):
            raise SystemExit(f"{OUT} is not a {len(STAGES)}-panel sheet of {W}x{H}: redraw every panel (no --only)")
    for i, (name, title) in enumerate(STAGES):
        if only in (None, name):
            rows = [json.loads(line) for line in (RUN / f"{name}_loss.jsonl").read_text().splitlines()]
            sheet.paste(_panel(title, rows), (i * W, 0))
    OUT.parent.mkdir(exist_ok=True)
    sheet.save(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=[name for name, _ in STAGES], help="redraw this stage's panel alone")
    main(parser.parse_args().only)
