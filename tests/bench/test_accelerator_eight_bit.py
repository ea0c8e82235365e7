"""bench/accelerator's fp8 and int8 entries (issue #30), without an accelerator: the real profile lists them
(Wan2.1-14B 480p with 8-bit block kernels), and the vidax side builds and runs such a case at toy shapes on
CPU with its block kernels 8-bit beside their scales, as `--weights-dtype` places them."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `bench` is a top-level folder

from bench.accelerator import cases, vidax_side  # noqa: E402


def test_the_real_profile_lists_fp8_and_int8_entries():
    dits = {c.key: c for c in cases.profile("real").dits}
    for choice in ("fp8", "int8"):
        case = dits[f"wan-480p-{choice}"]
        assert case.weights_dtype == choice and case.config == cases.WAN14B and choice in case.label
        assert dataclasses.replace(case, key="wan-480p", label=dits["wan-480p"].label, weights_dtype=None) == dits["wan-480p"]
    assert dits["wan-480p"].weights_dtype is None


def test_an_eight_bit_case_runs_with_8bit_kernels_and_scales():
    toy = dataclasses.replace(cases.profile("toy").dits[0], run_depth=1)
    case = cases._eight_bit(toy, "int8")
    harness = vidax_side.DitHarness(case)
    blocks = {"/".join(str(getattr(k, "key", k)) for k in path): leaf
              for path, leaf in jax.tree_util.tree_flatten_with_path(harness.params["blocks"])[0]}
    kernels = [p for p in blocks if p.endswith("kernel")]
    assert kernels and all(blocks[p].dtype == np.int8 and np.any(np.asarray(blocks[p])) for p in kernels)
    assert all(blocks[p[:-len("kernel")] + "kernel_scale"].dtype == np.float32 for p in kernels)
    assert harness.block_weight_bytes() < 0.6 * vidax_side.DitHarness(toy).block_weight_bytes()
    harness.compile()
    out = np.asarray(harness.run(), np.float32)
    assert np.all(np.isfinite(out)) and np.any(out)
