"""The TPU table renders the recorded chip runs (bench/results/tpu-v5e-2026-12-05): vidax's rows, the
MaxDiffusion row and their ratio on the same work, the attention sweep and the tier's outcome."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.accelerator import tpu_table

RUNS = Path(__file__).resolve().parents[2] / "bench" / "results" / "tpu-v5e-2026-12-05"


def test_table_of_the_recorded_runs(tmp_path):
    for name in ("run2/vidax480.json", "run2/vidax-wan-720p.json", "run2/md.log", "run3/vidax13.json",
                 "run1/sweep.log", "run3/tier.log"):
        shutil.copy(RUNS / name, tmp_path / Path(name).name)
    table = tpu_table.render(tmp_path)
    assert "| Wan2.1-14B 480x832 81f | 614.8 | 24.60 | 69.3% |" in table
    assert "| Wan2.1-1.3B 480x832 81f | 147.8 | 4.44 | 64.8% |" in table
    # MaxDiffusion's one-layer forward (674.5 ms, embed and head included) against vidax's block + its
    # embed and head (614.8 + 8.5 ms): 1.08x
    assert "674.5 (512/512/512, 1) | 5.13 | 1.08x |" in table
    assert "HLO temporaries (17.79G)" in table
    assert "splash:1024,2048,1024           296.92 ms    148.0 TFLOP/s" in table
    assert "TPU tier (`pytest -m tpu`): no summary (stopped)" in table


def test_the_interleaved_run_joins_the_table(tmp_path):
    """Run C of 2026-12-06: vidax and MaxDiffusion called in turns in one process."""
    runs = RUNS.parent / "tpu-v5e-2026-12-06"
    shutil.copy(runs / "runC" / "side.json", tmp_path / "side.json")
    shutil.copy(runs / "tier" / "tier.log", tmp_path / "tier.log")
    table = tpu_table.render(tmp_path)
    # the vidax attention column is what the run recorded in side.json (`tpu_blocks`)
    assert "| 1 | 2048,4096,1024 | splash:2048,4096,1024 | 599.0 | 552.7 | 0.923 |" in table
    assert "| 1 | 512,512,512 | splash:2048,4096,1024 | 599.8 | 669.4 | 1.116 |" in table
    assert "TPU tier (`pytest -m tpu`): 20 passed in 140.90s (0:02:20)" in table
