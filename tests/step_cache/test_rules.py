"""The step caches' decision rules and state updates as pure functions, against hand-computed values and
diffusers' own helpers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from vidax.zoo.step_caches import methods as sc


def test_taylorseer_decisions_by_hand():
    """warm-up 3, interval 5 (diffusers' defaults): full at 0, 1, 2, then 4, 9, 14 (step - 3 - 1 = 0 mod 5);
    with a stop at 12 every step from 12 on."""
    config = sc.TaylorSeerConfig()
    assert [s for s in range(16) if sc.taylorseer_computes(config, s)] == [0, 1, 2, 4, 9, 14]
    stopped = sc.TaylorSeerConfig(disable_cache_after_step=12)
    assert [s for s in range(16) if sc.taylorseer_computes(stopped, s)] == [0, 1, 2, 4, 9, 12, 13, 14, 15]


def test_taylor_factors_extrapolate_a_quadratic_exactly():
    """Outputs q(s) = 1 + 2s + 3s^2 seen at steps 0, 2, 4 (q = 1, 17, 57): the factors are the divided
    differences over the step gaps, and step 5 (offset 1) is their series."""
    q = lambda s: jnp.full((2,), 1.0 + 2 * s + 3 * s * s)  # noqa: E731
    factors = None
    for prev, step in ((None, 0), (0, 2), (2, 4)):
        factors = sc.taylor_update(factors, q(step), None if prev is None else step - prev, max_order=2)
    assert len(factors) == 3
    # by hand: f0 = q(4) = 57; f1 = (57 - 17) / 2 = 20; f2 = (20 - (17 - 1) / 2) / 2 = 6
    np.testing.assert_allclose([f[0] for f in factors], [57.0, 20.0, 6.0])
    np.testing.assert_allclose(sc.taylor_extrapolate(factors, 1), 57.0 + 20.0 + 6.0 / 2)
    first_order = sc.taylor_update(None, q(0), None, max_order=1)
    assert len(first_order) == 1  # one output: no difference yet


def test_first_block_change_per_branch_and_for_the_pair():
    previous = jnp.asarray([[1.0, -1.0], [2.0, 2.0]])
    residual = jnp.asarray([[1.5, -1.0], [2.0, 2.0]])
    np.testing.assert_allclose(sc.first_block_change(residual, previous, per_row=True), [0.25 / 1.0, 0.0])
    np.testing.assert_allclose(sc.first_block_change(residual, previous, per_row=False), [(0.5 / 4) / (6 / 4)])


def test_first_block_step_decides_each_branch_alone():
    """Row 0 (cond) changed past the threshold, row 1 (uncond) did not: row 0 runs the remaining blocks,
    row 1 takes its cached tail residual; each row's state follows its own decision."""
    def run_part(h, part):
        return h + 1.0 if part == "first" else h * 10.0

    step = sc.FirstBlockStep(threshold=0.1, per_row=True)
    h0 = jnp.zeros((2, 1, 2))
    h_n, (previous, tail), full = step(None, h0, run_part)
    np.testing.assert_allclose(h_n, 10.0)
    np.testing.assert_allclose(tail, 9.0)
    assert full.tolist() == [True, True]
    # both rows' first-block residual is now 1; row 0's was 2 (change 0.5), row 1's was 1 (change 0)
    h0 = jnp.asarray([[[1.0, 1.0]], [[0.0, 0.0]]])
    state = (jnp.asarray([[[2.0, 2.0]], [[1.0, 1.0]]]), tail)
    h_n, (previous, new_tail), full = step(state, h0, run_part)
    assert full.tolist() == [True, False]
    np.testing.assert_allclose(h_n[0], 20.0)  # (1 + 1) * 10: the remaining blocks ran
    np.testing.assert_allclose(h_n[1], 1.0 + 9.0)  # first block's output + the cached tail
    np.testing.assert_allclose(previous, [[[1.0, 1.0]], [[1.0, 1.0]]])
    np.testing.assert_allclose(new_tail, [[[18.0, 18.0]], [[9.0, 9.0]]])


def test_magcache_decisions_by_hand():
    """threshold 0.1, at most 2 skips, retention 0.25 of 8 steps (2 steps)."""
    config = sc.MagCacheConfig(threshold=0.1, max_skip_steps=2, retention_ratio=0.25, mag_ratios=(1.0,) * 8)
    ratios = np.asarray([1.0, 1.0, 0.98, 0.99, 0.9, 1.0, 1.0, 1.0], np.float32)
    state, decisions = sc.MagState(), []
    for _ in range(8):
        compute, state = sc.magcache_decide(config, ratios, 8, state)
        decisions.append(compute)
        state = sc.magcache_advance(state, compute, 8)
    # 0, 1 retained; 2: ratio .98, err .02 skip; 3: ratio .9702, err .0498 skip; 4: 3 skips > 2 -> run, reset;
    # 5: ratio 1, err 0 skip; 6 skip; 7: third skip -> run
    assert decisions == [True, True, False, False, True, False, False, True]
    assert state == sc.MagState()  # a full pass starts over


def test_nearest_interp_is_diffusers():
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS, nearest_interp

    for length in (1, 7, 28, 50):
        np.testing.assert_array_equal(sc.nearest_interp(FLUX_MAG_RATIOS.numpy(), length),
                                      nearest_interp(FLUX_MAG_RATIOS, length).numpy())
