"""`vidax.train.bench`: the step setup at a registry model's shapes (random bf16 weights, the family's default
targets), its int8 / offloaded variant, and the prepared chip run's path on CPU (`chip --cases tiny`), so that
the script the chip runs cannot rot."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from vidax.train import chip
from vidax.train.bench import step_setup, timed


def test_step_setup_gives_the_bf16_base_and_a_runnable_step():
    setup = step_setup("wan-tiny", 64, 64, 17, rank=4, text=16)
    assert setup.batch_shapes["latents"].shape == (1, 8, 5, 8, 8) and setup.objective.carry_dtype == "bfloat16"
    shapes = jax.eval_shape(setup.draws)  # what an ahead-of-time compile for a chip reads
    assert {leaf.dtype for leaf in jax.tree.leaves(shapes[0]["blocks"])} == {jnp.dtype(jnp.bfloat16)}
    result = timed(setup, steps=1)
    assert np.isfinite(result["loss"]) and result["tflop_s"] > 0  # MFU: only on a chip whose peak is known


def test_the_chip_run_on_cpu(tmp_path):
    """The chip run's path with its CPU case: wan-tiny's first 2 blocks with int8 kernels and `--offload` (on CPU
    the host memory is the device's: the same program without the moves)."""
    setup = step_setup("wan-tiny", 64, 64, 17, rank=4, text=16, depth=2, weights_dtype="int8", offload=True)
    assert setup.objective.stream and setup.objective.remat == "offload"
    base = jax.eval_shape(setup.draws)[0]["blocks"]
    assert base["attn1"]["to_q"]["kernel"].dtype == jnp.int8 and base["attn1"]["to_q"]["kernel_scale"].shape == (2, 96)
    summary = chip.main(["--out-dir", str(tmp_path), "--cases", "tiny", "--budget", "600"])
    assert [c["status"] for c in summary["cases"]] == ["ok"], summary
    result = json.loads((tmp_path / "tiny.json").read_text())
    assert result["depth"] == 2 and result["offload"] and np.isfinite(result["loss"]) and result["best_step_s"] > 0
    assert (tmp_path / "summary.json").is_file()
