"""One process that plans and compiles a stage of each named model for one TPU v5e without a chip (libtpu is
loaded once per process), printing one JSON line per item: XLA's bytes per device for the stage's widest compiled
unit and the planner's figure. What `test_planner_tpu.py`'s recorded figures are refreshed from; XLA's figures
come from the book (`tests/xla_figures.py`) where it has the program, else the program is compiled (about a
minute a model).

    python -m tests.dryrun.tpu_planner_worker MODEL=WHAT ...
        WHAT: resident or offload-N (the DiT step on one device), text (the text encoder), vae (the decode)
"""

from __future__ import annotations

import json
import sys

STAGES = ("text", "vae")  # dry_run's stages by name; any other name is a layout of the DiT step


def main(argv: list[str]) -> int:
    from tests.xla_figures import close_book, open_book
    from vidax.zoo.compute.planner import Layout
    from vidax.zoo.compute.target import compiling_for, parse_target
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.plan.dry_run import dry_run
    from vidax.zoo.registry import make_pipeline

    open_book()
    target = parse_target("v5e")
    try:
        for item in argv:
            model, _, kind = item.partition("=")
            stage = kind if kind in STAGES else "dit"
            offload = None if kind in ("resident", *STAGES) else int(kind.removeprefix("offload-"))
            layout = Layout(offload_chunk=offload)
            options = GenerateOptions(model=model, prompt="")
            with compiling_for(target) as targeted:
                run = dry_run(make_pipeline(model, options), options, layout, 1, target.chip.device_bytes,
                              targeted=targeted, stages=(stage,))
            widest = max(run.stages, key=lambda unit: unit.total)
            print(json.dumps({"model": model, "what": kind, "unit": widest.stage, "xla": widest.total,
                              "planned": widest.planned}), flush=True)
    finally:
        close_book()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
