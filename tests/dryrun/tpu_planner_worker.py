"""One process that plans and compiles each named model's DiT step for one TPU v5e without a chip (libtpu is loaded
once per process), printing one JSON line per model: XLA's bytes per device and the planner's. What
`test_planner_tpu.py`'s recorded figures are refreshed from; XLA's figures come from the book
(`tests/xla_figures.py`) where it has the program, else the program is compiled (about a minute a model).

    python -m tests.dryrun.tpu_planner_worker MODEL=LAYOUT ...     LAYOUT: resident or offload-N (one device)
"""

from __future__ import annotations

import json
import sys


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
            layout = Layout(offload_chunk=None if kind == "resident" else int(kind.removeprefix("offload-")))
            options = GenerateOptions(model=model, prompt="")
            with compiling_for(target) as targeted:
                (step,) = dry_run(make_pipeline(model, options), options, layout, 1, target.chip.device_bytes,
                                  targeted=targeted, stages=("dit",)).stages
            print(json.dumps({"model": model, "layout": layout.describe(), "xla": step.total,
                              "planned": step.planned}), flush=True)
    finally:
        close_book()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
