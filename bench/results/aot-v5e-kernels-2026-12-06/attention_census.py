"""Every family's one-block step traced on the CPU (no compile): its attention calls and FLOPs, one JSON line each.

    PYTHONPATH=. JAX_PLATFORMS=cpu python bench/results/aot-v5e-kernels-2026-12-06/attention_census.py [MODEL ...]
"""
import json
import sys
import time

from bench.accelerator.chip import dit_programs as dp
from bench.accelerator.chip.every_dit import MODELS
from vidax.zoo.registry import make_pipeline

for spec in sys.argv[1:] or MODELS:
    started = time.time()
    try:
        model, size = dp._split(spec)
        family = make_pipeline(model, dp._options(model, size))
        settings = family.resolve_settings(dp._options(model, size))
        fn, args, _ = dp._program(family, settings, 1)
        calls: list = []
        with dp.recorded_attention(calls):
            flops = dp.count_flops(fn, args)
        counted = dp._counted(calls)
        print(json.dumps({"spec": spec, "size": f"{settings.width}x{settings.height}x{settings.frames}",
                          "tflop": round(flops / 1e12, 1), "calls": [[list(q), k[1], m] for (q, k, m, _), _ in counted],
                          "counts": [n for _, n in counted], "s": round(time.time() - started, 1)}), flush=True)
    except Exception as error:  # noqa: BLE001 - one line per model that cannot be traced
        print(json.dumps({"spec": spec, "error": f"{type(error).__name__}: {str(error)[:300]}"}), flush=True)
