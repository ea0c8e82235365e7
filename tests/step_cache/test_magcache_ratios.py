"""MagCache's published ratios (`zoo/step_caches/magcache.toml`) and how `--cache magcache` uses them.

The table against values typed from the MagCache reference code (Zehong-Ma/MagCache: MagCache4Wan2.1,
MagCache4HunyuanVideo); the resampling to another step count against diffusers' `nearest_interp`,
applied per CFG branch as the reference does; vidax's per-branch decisions against the reference's own
loop over its interleaved list (one call counter, accumulators alternating with its parity), written
here from the reference's description; a step whose branches decide differently, on one array step
and on a tiny Wan (against diffusers' hooks handed one list per cache context); the default of a
request without `--mag-ratios`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.hooks.mag_cache import nearest_interp as diffusers_nearest_interp

from vidax.zoo.step_caches import methods as sc
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.step_caches.rules import branch_ratios, magcache_ratio_set, magcache_ratio_sets

WAN = ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.1-i2v-14b-480p", "wan2.1-i2v-14b-720p")
BRANCHES = ("cond", "uncond")


def _options(model: str, **extra) -> GenerateOptions:
    return GenerateOptions(model=model, prompt="a kite", cache="magcache", **extra)


@pytest.mark.parametrize("model, height, index, value", [
    ("wan2.1-t2v-1.3b", None, 2, 1.0124), ("wan2.1-t2v-1.3b", None, 3, 1.02213),
    ("wan2.1-t2v-1.3b", None, -1, 0.81939), ("wan2.1-t2v-14b", None, 2, 1.02504),
    ("wan2.1-t2v-14b", None, -2, 0.86111), ("wan2.1-i2v-14b-480p", None, -1, 0.92616),
    ("wan2.1-i2v-14b-720p", None, 2, 0.99428), ("hunyuanvideo", 720, 1, 1.0754),
    ("hunyuanvideo", 720, -1, 0.75456), ("hunyuanvideo", 544, 1, 1.06971), ("hunyuanvideo", 544, -1, 0.76592),
])
def test_shipped_table_holds_the_reference_values(model, height, index, value):
    assert magcache_ratio_set(model, height).ratios[index] == value


def test_shipped_table_layout():
    """Wan: 50 (T2V) / 40 (I2V) steps, cond and uncond interleaved after two 1.0 pads; HunyuanVideo: one
    list of 50 after one pad, a set per height (the nearest one for another height)."""
    assert set(magcache_ratio_sets()) == {*WAN, "hunyuanvideo"}
    for model, steps in zip(WAN, (50, 50, 40, 40)):
        published = magcache_ratio_set(model)
        assert (published.steps, published.interleave, len(published.ratios)) == (steps, BRANCHES, 2 * steps)
        assert published.ratios[:2] == (1.0, 1.0)
    for height in (720, 544):
        published = magcache_ratio_set("hunyuanvideo", height)
        assert (published.height, published.interleave, len(published.ratios), published.ratios[0]) == (
            height, (), 50, 1.0)
    assert magcache_ratio_set("hunyuanvideo", 480).height == 544


@pytest.mark.parametrize("model", WAN)
@pytest.mark.parametrize("steps", [1, 8, 30, 50, 61])
def test_per_branch_ratios_resampled_as_diffusers(model, steps):
    """Each branch's slice of the interleaved list, resampled on its own by diffusers' `nearest_interp`."""
    published = magcache_ratio_set(model)
    rows = sc.decision_ratios(sc.MagCacheConfig(shipped_for=model), BRANCHES, steps)
    for offset, (branch, row) in enumerate(zip(BRANCHES, rows)):
        own = torch.tensor(published.ratios[offset::2], dtype=torch.float32)
        np.testing.assert_array_equal(row, diffusers_nearest_interp(own, steps).numpy())
        assert branch_ratios(published, branch) == published.ratios[offset::2]


def _reference_loop(ratios: list[float], steps: int, threshold: float, max_skip: int, retention: float):
    """The reference's Wan loop: one counter over the 2 * steps DiT calls indexes the interleaved list
    (resampled per branch when its length differs), accumulators alternate with the counter's parity;
    a call runs while the counter is under int(2 * steps * retention)."""
    if len(ratios) != 2 * steps:
        halves = [diffusers_nearest_interp(torch.tensor(ratios[b::2], dtype=torch.float64), steps).numpy()
                  for b in (0, 1)]
        ratios = np.stack(halves, axis=1).reshape(-1).tolist()
    ratio, error, skipped, runs = [1.0, 1.0], [0.0, 0.0], [0, 0], []
    for count in range(2 * steps):
        branch, run = count % 2, True
        if count >= int(2 * steps * retention):
            ratio[branch] *= ratios[count]
            skipped[branch] += 1
            error[branch] += abs(1 - ratio[branch])
            run = not (error[branch] < threshold and skipped[branch] <= max_skip)
            if run:
                ratio[branch], error[branch], skipped[branch] = 1.0, 0.0, 0
        runs.append(run)
    return np.asarray(runs).reshape(steps, 2)


def _vidax_runs(options: GenerateOptions, steps: int) -> np.ndarray:
    """Per step, whether each branch's call runs every block, as `StepCache` decides them."""
    cache = sc.step_cache_for(options, BRANCHES, steps)
    states, runs = cache._fresh()[0], []
    for _ in range(steps):
        decided = [sc.magcache_decide(cache.config, row, steps, s) for row, s in zip(cache.ratios, states)]
        runs.append([run for run, _ in decided])
        states = [sc.magcache_advance(s, run, steps) for run, (_, s) in zip(runs[-1], decided)]
    return np.asarray(runs)


@pytest.mark.parametrize("model", WAN)
@pytest.mark.parametrize("steps, threshold, max_skip", [(50, 0.12, 2), (40, 0.06, 3), (30, 0.12, 2), (20, 0.2, 4)])
def test_per_branch_decisions_match_the_reference_loop(model, steps, threshold, max_skip):
    published = list(magcache_ratio_set(model).ratios)
    options = _options(model, cache_threshold=threshold, cache_max_skip=max_skip, cache_retention=0.2)
    runs = _vidax_runs(options, steps)
    np.testing.assert_array_equal(runs, _reference_loop(published, steps, threshold, max_skip, 0.2))
    assert not runs.all()  # the shipped ratios skip something at these thresholds


@pytest.mark.parametrize("model, steps, threshold, first_apart", [
    ("wan2.1-t2v-14b", 50, 0.03, 12), ("wan2.1-i2v-14b-480p", 30, 0.05, 8)])
def test_branches_decide_apart_as_in_the_reference(model, steps, threshold, first_apart):
    """The two branches' lists differ slightly: here their decisions part (so one shared list would
    not reproduce the reference), still as the reference's loop takes them."""
    options = _options(model, cache_threshold=threshold, cache_max_skip=3, cache_retention=0.2)
    runs = _vidax_runs(options, steps)
    assert np.flatnonzero(runs[:, 0] != runs[:, 1])[0] == first_apart
    reference = _reference_loop(list(magcache_ratio_set(model).ratios), steps, threshold, 3, 0.2)
    np.testing.assert_array_equal(runs, reference)


def test_a_step_whose_branches_decide_apart():
    """cond runs its blocks, uncond adds its cached residual; the new cached residual keeps uncond's."""
    h0 = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
    cached = {"": jnp.full((2, 3, 4), 0.5, jnp.float32)}
    out, residual, _ = sc.MagStep((True, False), False, True)(cached, h0, lambda h, part: h * 3.0 + 1.0)
    np.testing.assert_array_equal(out[0], h0[0] * 3.0 + 1.0)
    np.testing.assert_array_equal(out[1], h0[1] + 0.5)
    np.testing.assert_array_equal(residual[""][0], h0[0] * 2.0 + 1.0)
    np.testing.assert_array_equal(residual[""][1], cached[""][1])


def test_request_without_ratios_takes_the_shipped_ones():
    config = sc.config_from_options(_options("wan2.1-t2v-1.3b"))
    assert (config.mag_ratios, config.shipped_for) == (None, "wan2.1-t2v-1.3b")
    cache = sc.step_cache_for(_options("wan2.1-t2v-1.3b"), BRANCHES, 50)
    np.testing.assert_array_equal(cache.ratios[1], np.float32(magcache_ratio_set("wan2.1-t2v-1.3b").ratios[1::2]))


def test_given_ratios_win(tmp_path):
    np.save(tmp_path / "r.npy", np.asarray([1.0, 0.9, 0.8], np.float32))
    cache = sc.step_cache_for(_options("wan2.1-t2v-1.3b", mag_ratios=tmp_path / "r.npy"), BRANCHES, 3)
    assert cache.config.shipped_for is None
    for row in cache.ratios:
        np.testing.assert_array_equal(row, np.float32([1.0, 0.9, 0.8]))


def test_hunyuan_takes_the_set_of_its_height():
    class Settings:
        height = 544

    cache = sc.step_cache_for(_options("hunyuanvideo"), ("cond",), 50, percents=(None, Settings()))
    np.testing.assert_array_equal(cache.ratios[0], np.float32(magcache_ratio_set("hunyuanvideo", 544).ratios))


def test_model_without_shipped_ratios_is_one_line():
    with pytest.raises(PipelineError, match=r"needs --mag-ratios FILE.npy: no published ratios for wan-tiny") as err:
        sc.config_from_options(_options("wan-tiny"))
    assert "\n" not in str(err.value)


def test_vidax_gen_without_shipped_ratios_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    result = CliRunner().invoke(app, ["wan-tiny", "--prompt", "a kite", "--cache", "magcache",
                                      "--out", str(tmp_path / "v.mp4")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1 and "no published ratios for wan-tiny" in lines[0], result.output
    assert not list(tmp_path.iterdir())


# --- through a tiny Wan: the branches decide apart, against diffusers' hooks given a list per context ---

# 8 steps of the shipped wan2.1-t2v-1.3b lists: at threshold 0.0575, up to 4 skips, retention 0.1 the
# cond and uncond branches decide apart on steps 4, 5 and 6
SPLIT = dict(cache_threshold=0.0575, cache_max_skip=4, cache_retention=0.1)


class _RatiosPerContext:
    """diffusers' `MagCacheConfig.mag_ratios` stand-in: each `cache_context` its own list (the context
    the pipeline entered last, as recorded by `_tracked_contexts`)."""

    def __init__(self, lists: dict, current: dict):
        self.lists, self.current = lists, current

    def __len__(self):
        return len(next(iter(self.lists.values())))

    def __getitem__(self, step):
        return self.lists[self.current["name"]][step]


def test_wan_branches_deciding_apart_match_diffusers_hooks(tmp_path):
    """vidax-gen's default shipped ratios on a tiny Wan registered as wan2.1-t2v-1.3b: per step and
    branch the same full-DiT calls as diffusers' MagCache hooks given each context's own resampled
    list, and the same frames within 2e-5."""
    import contextlib

    import diffusers

    from tests.step_cache.families import test_wan as wan

    pipe = wan._reference(tmp_path / "model")
    latents = torch.randn((1, 16, 2, wan.HEIGHT // 8, wan.WIDTH // 8), generator=torch.Generator().manual_seed(3))
    np.save(tmp_path / "latents.npy", latents.numpy())
    published = magcache_ratio_set("wan2.1-t2v-1.3b").ratios
    lists = {b: diffusers_nearest_interp(torch.tensor(published[k::2], dtype=torch.float32), wan.STEPS)
             for k, b in enumerate(BRANCHES)}
    current, entered = {}, pipe.transformer.cache_context

    @contextlib.contextmanager
    def tracked(name, **where):
        current["name"] = name
        with entered(name, **where):
            yield

    pipe.transformer.cache_context = tracked
    config = diffusers.MagCacheConfig(threshold=SPLIT["cache_threshold"], max_skip_steps=SPLIT["cache_max_skip"],
                                      retention_ratio=SPLIT["cache_retention"], num_inference_steps=wan.STEPS,
                                      mag_ratios=[1.0] * wan.STEPS)
    config.mag_ratios = _RatiosPerContext(lists, current)
    frames, calls, _ = wan._cached_run(pipe, latents, config)
    assert np.any(calls[:, 0] != calls[:, 1]), calls  # the branches decided apart
    result, log = wan._generate(tmp_path, tmp_path / "v.npy", cache="magcache", **SPLIT)
    assert [[entry["full_dit"][b] for b in BRANCHES] for entry in log] == calls.tolist()
    np.testing.assert_allclose(result.frames, frames, atol=wan.FRAME_ATOL, rtol=0)
