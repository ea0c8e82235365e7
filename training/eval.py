"""Held-out accuracy of the current checkpoint by the semantic test's own path: the run folder is
exported to a scratch folder, vidax loads it as `wan-tiny` (translator, zoo pipeline, native
settings) and the test's detector reads each clip.

    .venv/bin/python -m training.eval [guidance]   # prints the table's counts of 24
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

from training import data, export

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "embedded"))
from detector import detect  # noqa: E402


def main(guidance: float | None = None) -> None:
    from vidax.zoo.pipeline import GenerateOptions
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.wan import tiny

    tiny.TRAINED = Path(tempfile.mkdtemp()) / "tiny_model"  # read by tiny.source() when the pipeline loads
    export.main(tiny.TRAINED)
    options = GenerateOptions(model="wan-tiny", prompt="", release_stages=False, guidance=guidance)
    pipeline = make_pipeline("wan-tiny", options)
    right = {"colour": 0, "background": 0, "direction": 0, "all": 0}
    _, held_out = data.split()
    for combo in held_out:
        seen = detect(pipeline.generate(dataclasses.replace(options, prompt=combo.caption())).frames)
        hits = {field: getattr(seen, field) == getattr(combo, field) for field in ("colour", "background", "direction")}
        hits["all"] = all(hits.values())
        for field, hit in hits.items():
            right[field] += hit
        print(f"{combo}: seen {seen.colour} {seen.direction} on {seen.background} (travel {seen.travel:.1f})", flush=True)
    print(" ".join(f"{field} {count}/{len(held_out)}" for field, count in right.items()))


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else None)  # a guidance scale other than the native one
