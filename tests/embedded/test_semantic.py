"""The embedded `wan-tiny` draws what the prompt says, for prompts it never saw in training.

The shipped folder's `training.json` lists the colour-shape-direction-background combinations held
out of training (never rendered with a caption). For each, the model generates at its native
settings and a plain detector (tests/embedded/detector.py) reads the shape's colour, the
background's colour and the direction of the shape's centroid. The table is printed (`pytest -s`).

Issue 33 asks for 90% of the 24 with all three right, and the test holds the shipped model to it. At
its native settings (guidance 2, shift 5) it draws the background (24 of 24) and the direction (24)
asked for and the shape's colour in 22: 22 of 24 fully right, the same in float32 and with the CPU
tuning off (`VIDAX_NO_CPU_TUNING=1`): the same two clips miss. They are two white squares,
drawn blue on green and red on red.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from detector import PALETTE, detect
from vidax.zoo.pipeline import GenerateOptions
from vidax.zoo.registry import make_pipeline
from vidax.zoo.wan.tiny import TRAINED

TARGET = 0.9  # issue 33: share of the 24 prompts with shape colour, background and direction right


@pytest.fixture(scope="module")
def held_out():
    return json.loads((TRAINED / "training.json").read_text())["held_out"]


@pytest.fixture(scope="module")
def generated(held_out):
    """One clip per held-out combination, from one pipeline (weights loaded and units compiled once)."""
    options = GenerateOptions(model="wan-tiny", prompt="", release_stages=False)
    pipeline = make_pipeline("wan-tiny", options)
    clips = []
    for combo in held_out:
        prompt = f"a {combo['colour']} {combo['shape']} moves {combo['direction']} on a {combo['background']} background"
        clips.append(pipeline.generate(dataclasses.replace(options, prompt=prompt)).frames)
    return clips


def test_held_out_prompts_are_drawn(held_out, generated):
    rows, passed = [], 0
    right = {"colour": 0, "background": 0, "direction": 0}
    for combo, frames in zip(held_out, generated):
        seen = detect(frames)
        for field in right:
            right[field] += getattr(seen, field) == combo[field]
        ok = (seen.colour, seen.background, seen.direction) == (combo["colour"], combo["background"], combo["direction"])
        passed += ok
        rows.append(f"{combo['colour']:>6} {combo['shape']:<8} {combo['direction']:<5} on {combo['background']:<6} | "
                    f"seen {seen.colour or '-':>6} {seen.direction or '-':<5} on {seen.background:<6} "
                    f"travel {seen.travel:4.1f} px | {'pass' if ok else 'FAIL'}")
    print("\n".join(["", "held-out prompt                        | detected", *rows,
                     f"{passed}/{len(rows)} fully right ({passed / len(rows):.0%}; issue 33's target {TARGET:.0%}); "
                     + ", ".join(f"{field} {count}/{len(rows)}" for field, count in right.items())]))
    assert len(rows) == 24
    assert passed >= math.ceil(TARGET * len(rows)), (passed, right)


def test_generated_clip_has_readme_size(generated):
    assert generated[0].shape[0] >= 16 and generated[0].shape[1] >= 64 and generated[0].shape[2] >= 64


# --- the detector itself: it must tell a right drawing from a wrong one --------------------------


def _clip(colour: str, background: str, dx: int, dy: int) -> np.ndarray:
    frames = np.empty((17, 64, 64, 3), np.float32)
    ys, xs = np.mgrid[0:64, 0:64]
    for f in range(17):
        cx, cy = 32 + dx * (2 * f - 16), 32 + dy * (2 * f - 16)
        frames[f] = np.asarray(PALETTE[background]) / 255
        frames[f][(xs - cx) ** 2 + (ys - cy) ** 2 <= 81] = np.asarray(PALETTE[colour]) / 255
    return frames


@pytest.mark.parametrize("colour, background, dx, dy, direction", [
    ("red", "blue", -1, 0, "left"), ("yellow", "black", 1, 0, "right"), ("white", "green", 0, -1, "up"),
    ("black", "white", 0, 1, "down"), ("green", "red", 0, 0, None),
])
def test_detector_reads_rendered_clips(colour, background, dx, dy, direction):
    seen = detect(_clip(colour, background, dx, dy))
    assert (seen.colour, seen.background, seen.direction) == (colour, background, direction)


def test_detector_sees_no_shape_in_flat_noise():
    rng = np.random.default_rng(0)
    frames = np.clip(np.full((17, 64, 64, 3), 0.5) + 0.02 * rng.standard_normal((17, 64, 64, 3)), 0, 1)
    seen = detect(frames.astype(np.float32))
    assert seen.colour is None and seen.direction is None
