"""wan-tiny-vace's extensions on many prompts, by the path tests/embedded/test_vace_extension.py takes:
wan-tiny's clip (its first 9 frames), then `--extend` three times (`--frames 13 --extend-overlap 9`), the
semantic test's detector on each generated window and the circle's step across each join.

    .venv/bin/python -m wan_tiny_recipe.vace.eval_vace [--held-out] [--seeds 0,1] [--scale 1]

Prints one row per prompt and seed and the counts: windows read fully right, joins that continue (8 +- 3 px
along the motion, at most 3 px across it). Reads the shipped folder (`wan_tiny_recipe.vace.export_vace` first).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from wan_tiny_recipe import data

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "embedded"))
from detector import FAR_FROM_BACKGROUND, detect  # noqa: E402

FIRST, WINDOW, OVERLAP, EXTENSIONS = 9, 13, 9, 3
STEP, TOLERANCE = 8.0, 3.0


def centroid(frame: np.ndarray) -> np.ndarray | None:
    border = np.concatenate([frame[:2].reshape(-1, 3), frame[-2:].reshape(-1, 3), frame[:, :2].reshape(-1, 3),
                             frame[:, -2:].reshape(-1, 3)])
    mask = np.sqrt(((frame - np.median(border, axis=0)) ** 2).sum(-1)) > FAR_FROM_BACKGROUND
    if mask.sum() < 6:
        return None
    ys, xs = np.nonzero(mask)
    return np.array([xs.mean(), ys.mean()])


def chain(generate, combo: data.Combo, seed: int, scale: str, folder: Path):
    """(windows read right, joins that continue, the joins' (along, across) steps) for one prompt."""
    prompt = combo.caption()
    clips = [generate(model="wan-tiny", prompt=prompt, seed=seed, out=folder / "first.npy").frames[:FIRST]]
    for i in range(EXTENSIONS):
        source = folder / f"clip{i}.npy"
        np.save(source, clips[-1])
        clips.append(generate(model="wan-tiny-vace", prompt=prompt, seed=seed + 1 + i, frames=WINDOW,
                              out=folder / f"clip{i + 1}.npy",
                              extra=dict(extend=source, extend_overlap=OVERLAP, conditioning_scale=scale)).frames)
    motion = np.asarray(data.DIRECTIONS[combo.direction], np.float64)
    right, joins = 0, []
    for before, after in zip(clips, clips[1:]):
        seen = detect(after[-WINDOW:])
        right += (seen.colour, seen.background, seen.direction) == (combo.colour, combo.background, combo.direction)
        a, b = centroid(before[-1]), centroid(after[-1])
        if a is None or b is None:
            joins.append((float("nan"), float("nan")))
            continue
        move = b - a
        joins.append((float(move @ motion), float(abs(move[0] * motion[1] - move[1] * motion[0]))))
    continued = sum(abs(along - STEP) <= TOLERANCE and across <= TOLERANCE for along, across in joins)
    return right, continued, joins


def main(held_out: bool, seeds: tuple[int, ...], scale: str) -> None:
    from vidax.zoo.api import generate
    from vidax.zoo.generator.options import GenerateOptions

    train, held = data.split()
    combos = held if held_out else [train[i] for i in np.random.default_rng(7).choice(len(train), 24, replace=False)]
    folder = Path(tempfile.mkdtemp())
    run = lambda extra=None, **fields: generate(GenerateOptions(**fields, extra=extra or {}))  # noqa: E731
    totals = [0, 0, 0]
    for seed in seeds:
        for combo in combos:
            right, continued, joins = chain(run, combo, seed, scale, folder)
            totals = [totals[0] + right, totals[1] + continued, totals[2] + EXTENSIONS]
            print(f"seed {seed} {combo.caption():<50} windows right {right}/{EXTENSIONS} continued {continued}/{EXTENSIONS} "
                  f"{json.dumps([(round(a, 1), round(c, 1)) for a, c in joins])}", flush=True)
    print(f"windows fully right {totals[0]}/{totals[2]}, joins continued {totals[1]}/{totals[2]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held-out", action="store_true", help="the 24 held-out prompts (default: 24 training ones)")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--scale", default="1", help="--conditioning-scale (0: the VACE hints off, the control)")
    parser.add_argument("--first", type=int, default=FIRST, help="frames of wan-tiny's clip continued")
    parser.add_argument("--window", type=int, default=WINDOW, help="--frames of each extension")
    parser.add_argument("--overlap", type=int, default=OVERLAP, help="--extend-overlap")
    args = parser.parse_args()
    FIRST, WINDOW, OVERLAP = args.first, args.window, args.overlap
    main(args.held_out, tuple(int(s) for s in args.seeds.split(",")), args.scale)
