"""Held-out accuracy of the current checkpoint by the semantic test's own path: the run folder is
exported to a scratch folder, vidax loads it as `wan-tiny` (translator, zoo pipeline, native
settings) and the test's detector reads each clip.

    .venv/bin/python -m wan_tiny_recipe.checks.eval [guidance] [--seeds 0,1,2]   # prints the table's counts of 24 per seed
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from wan_tiny_recipe import data, export

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "embedded"))
from detector import detect  # noqa: E402
from vidax.zoo.generator.generation import generate_video


def main(guidance: float | None = None, seeds: tuple[int, ...] = (0,), shipped: bool = False) -> None:
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.wan import tiny

    if not shipped:
        tiny.TRAINED = Path(tempfile.mkdtemp()) / "tiny_model"  # read by tiny.source() when the pipeline loads
        export.main(tiny.TRAINED)
    options = GenerateOptions(model="wan-tiny", prompt="", release_stages=False, guidance=guidance)
    pipeline = make_pipeline("wan-tiny", options)
    for seed in seeds:  # the semantic test's seed is 0; others tell a learned direction from the noise's pick
        print(f"seed {seed}:")
        score(lambda combo: generate_video(pipeline, dataclasses.replace(options, prompt=combo.caption(), seed=seed)).frames)


def score(generate) -> dict[str, int]:
    """Prints what the detector reads on `generate(combo)`'s frames for each held-out combination, then
    how many of them came out right per field."""
    right = {"colour": 0, "background": 0, "direction": 0, "all": 0}
    _, held_out = data.split()
    for combo in held_out:
        seen = detect(generate(combo))
        hits = {field: getattr(seen, field) == getattr(combo, field) for field in ("colour", "background", "direction")}
        hits["all"] = all(hits.values())
        for field, hit in hits.items():
            right[field] += hit
        print(f"{combo}: seen {seen.colour} {seen.direction} on {seen.background} (travel {seen.travel:.1f})", flush=True)
    print(" ".join(f"{field} {count}/{len(held_out)}" for field, count in right.items()))
    return right


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("guidance", type=float, nargs="?", default=None, help="a guidance scale other than the native one")
    parser.add_argument("--seeds", type=lambda text: tuple(int(s) for s in text.split(",")), default=(0,),
                        help="comma-separated noise seeds, each scored on its own")
    parser.add_argument("--shipped", action="store_true", help="score zoo/wan/tiny_model/ instead of the run folder")
    args = parser.parse_args()
    main(args.guidance, args.seeds, args.shipped)
