"""`--extend` continues a clip: wan-tiny's clips, each extended three times by the embedded `wan-tiny-vace`.

For four prompts (one per direction; seed 0) wan-tiny generates its native 17 frames; the first 9 are the clip
to continue (the shape moves 2 px a frame, 8 px a latent frame: all 17 plus three extensions would carry it out
of the 64-pixel frame). Each extension is `--extend CLIP --frames 13 --extend-overlap 9` with the same prompt
(`vidax.zoo.api.generate`, vidax-gen's library call): the clip's last 9 frames kept, 4 new ones generated, the
output the whole longer clip (9, 13, 17, then 21 frames), its frames before the overlap the clip's own.

- On each extension's generated window (the output's last 13 frames, the overlap crossfaded) the semantic test's
  detector reads the prompt's shape colour, background and direction: 12 of 12.
- At each join, the shape's centroid in the new frames against the clip's last frame: "continues" is 8 +- 3 px
  along the motion (one latent frame on) and at most 3 px across it. Measured: 10 of 12 joins continue, none goes
  back, the median distance from the continued place 1.9 px (the misses: 11.1 px along, and 3.9 px across).
- The control, the same chains at `--conditioning-scale 0` (the VACE hints off: wan-tiny's DiT alone, the kept
  frames unseen): 2 of 12 joins continue, by chance; the median distance 11.4 px.

The test asks for 9 of 12 and a median within 3 px, and of the control at most 3 and at least 6 px. About 50 s on
2 shared cores. `pytest -s` prints every join.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from detector import FAR_FROM_BACKGROUND, MIN_PIXELS, detect
from tests.backend_level import call_at_default_level
from vidax.zoo.api import generate
from vidax.zoo.generator.options import GenerateOptions

PROMPTS = {  # prompt: (colour, background, direction) and the motion's unit vector (x right, y down)
    "a red circle moves right on a blue background": (("red", "blue", "right"), (1.0, 0.0)),
    "a yellow square moves down on a black background": (("yellow", "black", "down"), (0.0, 1.0)),
    "a green triangle moves left on a white background": (("green", "white", "left"), (-1.0, 0.0)),
    "a blue square moves up on a yellow background": (("blue", "yellow", "up"), (0.0, -1.0)),
}
SEED = 0
FIRST = 9  # frames of wan-tiny's clip that are continued
WINDOW, OVERLAP = 13, 9  # --frames, --extend-overlap
EXTENSIONS = 3
LATENT_STEP = 8.0  # px a latent frame: 2 px a frame, 4 frames
STEP_TOLERANCE = 3.0  # px either side of LATENT_STEP
ACROSS_TOLERANCE = 3.0  # px across the motion
CONTINUED = 9  # of the 4 x 3 joins at least this many continue (measured 10)
CONTROL_CONTINUED = 3  # ... and at --conditioning-scale 0 at most this many (measured 2)
MEDIAN_MISS = 3.0  # px: the median join lands at most this far from the continued place (measured 1.9)
CONTROL_MEDIAN_MISS = 6.0  # px: ... and at --conditioning-scale 0 at least this far (measured 11.4)


def _options(out: Path, prompt: str, **extra) -> GenerateOptions:
    fields = {f.name for f in dataclasses.fields(GenerateOptions)}
    own = {k: extra.pop(k) for k in list(extra) if k not in fields}
    return GenerateOptions(**{"prompt": prompt, "out": out, **extra}, extra=own)


def _centroid(frame: np.ndarray) -> np.ndarray:
    """(x, y) of the pixels far from the frame's border colour (the detector's shape pixels)."""
    border = np.concatenate([frame[:2].reshape(-1, 3), frame[-2:].reshape(-1, 3), frame[:, :2].reshape(-1, 3),
                             frame[:, -2:].reshape(-1, 3)])
    mask = np.sqrt(((frame - np.median(border, axis=0)) ** 2).sum(-1)) > FAR_FROM_BACKGROUND
    assert mask.sum() >= MIN_PIXELS, "no shape in the frame"
    ys, xs = np.nonzero(mask)
    return np.array([xs.mean(), ys.mean()])


def _extend(folder: Path, prompt: str, first: np.ndarray, scale: str) -> list[np.ndarray]:
    """[the clip, after extension 1, 2, 3]: each extension continues the previous output (saved as .npy)."""
    clips = [first]
    for i in range(EXTENSIONS):
        source = folder / f"scale{scale}_clip{i}.npy"
        np.save(source, clips[-1])
        result = generate(_options(folder / f"scale{scale}_clip{i + 1}.npy", prompt, model="wan-tiny-vace",
                                   seed=SEED + 1 + i, frames=WINDOW, extend=source, extend_overlap=OVERLAP,
                                   conditioning_scale=scale))
        clips.append(result.frames)
    return clips


def generate_chains(root: Path) -> dict:
    """{(prompt, "vace" or "control"): [the clip, after extension 1, 2, 3]}."""
    out = {}
    for n, prompt in enumerate(PROMPTS):
        folder = root / f"vace_extension{n}"
        folder.mkdir()
        first = generate(_options(folder / "wan_tiny.npy", prompt, model="wan-tiny", seed=SEED)).frames[:FIRST]
        out[prompt, "vace"] = _extend(folder, prompt, first, "1")
        out[prompt, "control"] = _extend(folder, prompt, first, "0")
    return out


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    """The chains, generated at XLA's default CPU level as a user's run compiles them (tests/backend_level.py:
    28 generations are mostly running compiled code)."""
    return call_at_default_level(generate_chains, tmp_path_factory.mktemp("vace_extension"))


def _joins(clips: list[np.ndarray], motion) -> list[tuple[float, float]]:
    """(step along the motion, distance across it) in px from each clip's last frame to the next's."""
    motion = np.asarray(motion)
    moves = [_centroid(after[-1]) - _centroid(before[-1]) for before, after in zip(clips, clips[1:])]
    return [(float(m @ motion), float(abs(m[0] * motion[1] - m[1] * motion[0]))) for m in moves]


def _continues(along: float, across: float) -> bool:
    return abs(along - LATENT_STEP) <= STEP_TOLERANCE and across <= ACROSS_TOLERANCE


def _median_miss(joins) -> float:
    """The median distance (px) between where each join put the shape and one latent step on from the clip's end."""
    return float(np.median([np.hypot(along - LATENT_STEP, across) for along, across in joins]))


def _report(chains, kind: str) -> list[tuple[float, float]]:
    every = []
    for prompt, (_, motion) in PROMPTS.items():
        joins = _joins(chains[prompt, kind], motion)
        print(f"{kind} {prompt}: joins (px along, across) {[(round(a, 1), round(c, 1)) for a, c in joins]}")
        every += joins
    return every


def test_each_extension_continues_the_clip(chains):
    print()
    for prompt, (expected, _) in PROMPTS.items():
        clips = chains[prompt, "vace"]
        for i, (before, after) in enumerate(zip(clips, clips[1:])):
            assert after.shape == (len(before) - OVERLAP + WINDOW, 64, 64, 3)
            kept = len(before) - OVERLAP  # the clip's frames before the overlap, as the .npy held them (8 bits)
            np.testing.assert_array_equal(after[:kept], np.round(before[:kept] * 255) / np.float32(255))
            seen = detect(after[-WINDOW:])
            assert (seen.colour, seen.background, seen.direction) == expected, (prompt, i + 1, seen)
        assert len(clips[-1]) == FIRST + EXTENSIONS * (WINDOW - OVERLAP)
    joins = _report(chains, "vace")
    continued, miss = sum(_continues(*join) for join in joins), _median_miss(joins)
    print(f"{continued} of {len(joins)} joins continue ({LATENT_STEP:g} +- {STEP_TOLERANCE:g} px along the motion, "
          f"at most {ACROSS_TOLERANCE:g} across); median miss {miss:.1f} px")
    assert all(along > 0 for along, _ in joins), joins  # none goes back
    assert continued >= CONTINUED and miss <= MEDIAN_MISS, joins


def test_without_the_vace_hints_the_clip_is_not_continued(chains):
    """The control: the same chains at --conditioning-scale 0 land the shape away from where the clip ended."""
    print()
    joins = _report(chains, "control")
    continued, miss = sum(_continues(*join) for join in joins), _median_miss(joins)
    print(f"{continued} of {len(joins)} control joins continue; median miss {miss:.1f} px")
    assert continued <= CONTROL_CONTINUED and miss >= CONTROL_MEDIAN_MISS, joins
