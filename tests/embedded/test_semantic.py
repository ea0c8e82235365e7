"""The embedded `wan-tiny` draws what the prompt says, for prompts it never saw in training.

The shipped folder's `training.json` lists the colour-shape-direction-background combinations held
out of training (never rendered with a caption). For each, at each of four seeds (0-3), the model
generates at its native settings and a plain detector (tests/embedded/detector.py) reads the shape's
colour, the background's colour and the direction of the shape's centroid. The table is printed
(`pytest -s`).

Issue 51 asks for 85% of the 24 prompts x 4 seeds with all three right (issue 33's 90% was met at seed 0
only), and the test holds the shipped model to it. Measured (`pytest -s`, CPU tuning off as in every
test): 86 of 96 fully right (89.6%; seeds 0-3: 22, 21, 21, 22 of 24); background 96 and direction 96
of 96, the shape's colour 86. The misses are colours only: the white square moving up on red is drawn
red at every seed, the yellow triangle on black red at seeds 1-3, the green square on red yellow at
seeds 1 and 2, the white square on green blue at seed 0. About two minutes on 2 shared cores (25 s for
one seed).
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from detector import PALETTE, detect
from tests.backend_level import call_at_default_level
from vidax.zoo.generator.generation import generate_video
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.generator.stages import StageCache
from vidax.zoo.registry import make_pipeline
from vidax.zoo.wan.tiny import TRAINED

TARGET = 0.85  # issue 51: share of the 24 prompts x 4 seeds with shape colour, background and direction right
SEEDS = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def held_out():
    return json.loads((TRAINED / "training.json").read_text())["held_out"]


def generate_held_out(held_out: list[dict]) -> dict:
    """{(seed, index): clip} for every held-out combination at every seed, from one pipeline (weights loaded
    and placed once, kept in a `StageCache` as the server keeps them: the same clips bit for bit as loading
    them for each clip; units compiled once)."""
    options = GenerateOptions(model="wan-tiny", prompt="", release_stages=False)
    pipeline = make_pipeline("wan-tiny", options)
    cache = StageCache()
    clips = {}
    for seed in SEEDS:
        for index, combo in enumerate(held_out):
            prompt = f"a {combo['colour']} {combo['shape']} moves {combo['direction']} on a {combo['background']} background"
            clips[seed, index] = generate_video(pipeline, dataclasses.replace(options, prompt=prompt, seed=seed),
                                                cache=cache).frames
    cache.release()
    return clips


@pytest.fixture(scope="module")
def generated(held_out):
    """The clips, generated at XLA's default CPU level as a user's run compiles them (tests/backend_level.py:
    96 generations are mostly running compiled code)."""
    return call_at_default_level(generate_held_out, held_out)


def test_held_out_prompts_are_drawn(held_out, generated):
    rows, passed, per_seed = [], 0, dict.fromkeys(SEEDS, 0)
    right = {"colour": 0, "background": 0, "direction": 0}
    for (seed, index), frames in generated.items():
        combo, seen = held_out[index], detect(frames)
        for field in right:
            right[field] += getattr(seen, field) == combo[field]
        ok = (seen.colour, seen.background, seen.direction) == (combo["colour"], combo["background"], combo["direction"])
        passed += ok
        per_seed[seed] += ok
        rows.append(f"seed {seed} | {combo['colour']:>6} {combo['shape']:<8} {combo['direction']:<5} on "
                    f"{combo['background']:<6} | seen {seen.colour or '-':>6} {seen.direction or '-':<5} on "
                    f"{seen.background:<6} travel {seen.travel:4.1f} px | {'pass' if ok else 'FAIL'}")
    print("\n".join(["", "seed   | held-out prompt                        | detected", *rows,
                     f"{passed}/{len(rows)} fully right ({passed / len(rows):.1%}; issue 51's target {TARGET:.0%}); "
                     + ", ".join(f"{field} {count}/{len(rows)}" for field, count in right.items()) + "; per seed "
                     + ", ".join(f"{seed}: {count}/{len(held_out)}" for seed, count in per_seed.items())]))
    assert len(held_out) == 24 and len(rows) == 24 * len(SEEDS)
    assert passed >= math.ceil(TARGET * len(rows)), (passed, right, per_seed)


def test_generated_clip_has_readme_size(generated):
    clip = generated[0, 0]
    assert clip.shape[0] >= 16 and clip.shape[1] >= 64 and clip.shape[2] >= 64


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
