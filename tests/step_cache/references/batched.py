"""What the batched-CFG families' step-cache tests share: the three hooks' configs and one cached run."""

from __future__ import annotations

import diffusers
import numpy as np
import torch

from tests.step_cache.references.oracle_calls import recorded_calls

STEPS = 6
TAYLOR = dict(cache_interval=2, cache_warmup=2, cache_order=1)  # full runs at 0, 1, 3, 5
# made-up ratios (a model's are calibrated): retention int(0.2 * 6 + 0.5) = 1 step; then steps 1, 2 skip
# (error .02, .0502), 3 runs (a third skip), 4 runs (ratio .9: error .1 > .08), 5 skips
MAG_RATIOS = [1.0, 1.02, 1.01, 0.99, 0.9, 1.0]
MAG = dict(cache_threshold=0.08, cache_max_skip=2, cache_retention=0.2)
MAG_STEPS = [True, False, False, True, True, False]
TAYLOR_STEPS = [True, True, False, True, False, True]


def configs(first_block: float) -> dict:
    """The diffusers configs of `TAYLOR`, a first-block threshold and `MAG` (fp32, lite TaylorSeer)."""
    return {
        "taylorseer": diffusers.TaylorSeerCacheConfig(
            cache_interval=TAYLOR["cache_interval"], disable_cache_before_step=TAYLOR["cache_warmup"],
            max_order=TAYLOR["cache_order"], use_lite_mode=True, taylor_factors_dtype=torch.float32),
        "first-block": diffusers.FirstBlockCacheConfig(threshold=first_block),
        "magcache": diffusers.MagCacheConfig(threshold=MAG["cache_threshold"], max_skip_steps=MAG["cache_max_skip"],
                                             retention_ratio=MAG["cache_retention"], num_inference_steps=STEPS,
                                             mag_ratios=MAG_RATIOS),
    }


def cached_runs(transformer, inner, run, first_block: float) -> dict:
    """{method: (frames, per call whether `inner` ran)} of `run()` under each hook, plus {"none": frames}."""
    with torch.no_grad():
        runs = {"none": run()}
    for method, config in configs(first_block).items():
        transformer.enable_cache(config)
        try:
            with recorded_calls(transformer, inner) as calls, torch.no_grad():
                runs[method] = (run(), list(calls))
        finally:
            transformer.disable_cache()
    return runs


def knobs(method: str, ratios_file) -> dict:
    """vidax's options of each method's config above."""
    return {"taylorseer": TAYLOR, "magcache": {**MAG, "mag_ratios": ratios_file}}.get(method, {})


def save_ratios(path) -> None:
    np.save(path, np.asarray(MAG_RATIOS, np.float32))
