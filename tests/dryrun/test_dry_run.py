"""`vidax.zoo.dry_run`: stages compiled at their native size on abstract weights, XLA's figures beside the planner's.

The DiT is compiled at a reduced depth (2 blocks) that keeps the native sequence length, so what the
planner models per block (activations, the attention tiles) is measured at real size while the compile
stays short; the planner's job is cut to the same depth. The weights are fp32 here: XLA's CPU backend
runs bf16 dots in fp32 with fp32 copies of weights and activations, which no accelerator does
(docs/DRY_RUN.md), so a bf16 compile on CPU would measure the CPU, not the model.
"""

from __future__ import annotations

import dataclasses

import jax
import pytest

from vidax.zoo.dry_run import compile_dit_step, dry_run, job_at_depth, wan_vae_decode_units
from vidax.zoo.pipeline import GenerateOptions
from vidax.zoo.planner import GIB, Layout, plan
from vidax.zoo.registry import make_pipeline

MODEL = "wan2.1-t2v-1.3b"  # native 832x480, 81 frames: 32,760 video tokens
DEPTH = 2
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def wan():
    options = GenerateOptions(model=MODEL, prompt="", dtype="float32")
    return make_pipeline(MODEL, options), options


def _chosen(family, options, devices: int, gib: float) -> Layout:
    """The layout the planner picks for the full model on `devices` x `gib`."""
    _, chosen = plan(family.memory_job(options), devices, int(gib * GIB))
    return chosen[0]


@pytest.mark.parametrize("devices, gib", [(4, 30.75), (8, 80.0)])
def test_dit_step_planner_within_ten_percent_of_xla(wan, devices, gib):
    family, options = wan
    layout = _chosen(family, options, devices, gib)
    assert layout.devices > 1  # a sharded layout is what is being checked
    result = dry_run(family, options, layout, devices, int(gib * GIB), depth=DEPTH, stages=("dit",))
    (step,) = result.stages
    assert step.temp > 0 and step.flops > 0
    assert abs(step.planned - step.total) <= TOLERANCE * step.total, (layout.describe(), step.planned / 2**20,
                                                                        step.total / 2**20)


def _temp_at(family, options, **size) -> int:
    s = family.resolve_settings(dataclasses.replace(options, **size))
    parts = __import__("vidax.zoo.dry_run", fromlist=["stages_of"]).stages_of(family)
    dit = parts.dit(family, s, 1, jax.numpy.float32)
    return compile_dit_step(family, s, dit, jax.numpy.float32, None, parts.cond(family, s, 2), None).temp


def test_dit_temp_memory_is_linear_in_video_tokens(wan):
    """Attention never materialises S x S: twice the tokens, at most ~twice the temporaries (4x if quadratic)."""
    family, options = wan
    short, long = _temp_at(family, options, frames=41), _temp_at(family, options, frames=81)  # 11 vs 21 latent frames
    tokens = 21 / 11
    assert long / short < 1.25 * tokens, (short / 2**20, long / 2**20)


def test_vae_decode_temp_memory_is_linear_in_pixels(wan):
    family, _ = wan
    temps = []
    for height in (240, 480):  # 2x the pixels per frame
        units = wan_vae_decode_units(family.model.vae, family.latent_shape(family.resolve_settings(
            GenerateOptions(model=MODEL, prompt="", height=height, width=832, frames=5))))
        name, fn, args, donate, static = units[1]  # the steady-state unit (the cache of the frames before)
        from vidax.zoo.dry_run import compile_stage

        temps.append(compile_stage(name, fn, args, donate=donate, static=static).temp)
    assert temps[1] / temps[0] < 2.5, [t / 2**20 for t in temps]
