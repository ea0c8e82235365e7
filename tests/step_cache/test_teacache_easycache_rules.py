"""TeaCache's and EasyCache's decision rules (`vidax.zoo.step_caches.rules`) against hand-computed values, and
the shipped coefficients against the ones the TeaCache reference code publishes."""

from __future__ import annotations

import pytest

from vidax.zoo.step_caches import rules

# As published in ali-vilab/TeaCache (TeaCache4Wan2.1 `teacache_generate.py`: use_ret_steps True -> e0,
# False -> e; TeaCache4HunyuanVideo; TeaCache4LTX-Video), typed here from the reference, not from our TOML.
PUBLISHED = {
    ("wan2.1-t2v-1.3b", "e0"): [-5.21862437e+04, 9.23041404e+03, -5.28275948e+02, 1.36987616e+01, -4.99875664e-02],
    ("wan2.1-t2v-1.3b", "e"): [2.39676752e+03, -1.31110545e+03, 2.01331979e+02, -8.29855975e+00, 1.37887774e-01],
    ("wan2.1-t2v-14b", "e0"): [-3.03318725e+05, 4.90537029e+04, -2.65530556e+03, 5.87365115e+01, -3.15583525e-01],
    ("wan2.1-t2v-14b", "e"): [-5784.54975374, 5449.50911966, -1811.16591783, 256.27178429, -13.02252404],
    ("wan2.1-i2v-14b-480p", "e0"): [2.57151496e+05, -3.54229917e+04, 1.40286849e+03, -1.35890334e+01, 1.32517977e-01],
    ("wan2.1-i2v-14b-480p", "e"): [-3.02331670e+02, 2.23948934e+02, -5.25463970e+01, 5.87348440e+00, -2.01973289e-01],
    ("wan2.1-i2v-14b-720p", "e0"): [8.10705460e+03, 2.13393892e+03, -3.72934672e+02, 1.66203073e+01, -4.17769401e-02],
    ("wan2.1-i2v-14b-720p", "e"): [-114.36346466, 65.26524496, -18.82220707, 4.91518089, -0.23412683],
    ("hunyuanvideo", "modulated"): [7.33226126e+02, -4.01131952e+02, 6.75869174e+01, -3.14987800e+00, 9.61237896e-02],
    ("ltx-video-2b", "modulated"): [2.14700694e+01, -1.28016453e+01, 2.31279151e+00, 7.92487521e-01, 9.69274326e-03],
    ("cogvideox-2b", "temb"): [-3.10658903e+01, 2.54732368e+01, -5.92380459e+00, 1.75769064e+00, -3.61568434e-03],
    ("cogvideox-5b", "temb"): [-1.53880483e+03, 8.43202495e+02, -1.34363087e+02, 7.97131516e+00, -5.23162339e-02],
    ("cogvideox-5b-i2v", "temb"): [-1.53880483e+03, 8.43202495e+02, -1.34363087e+02, 7.97131516e+00,
                                   -5.23162339e-02],
    ("cogvideox1.5-5b", "temb"): [2.50210439e+02, -1.65061612e+02, 3.57804877e+01, -7.81551492e-01, 3.58559703e-02],
    ("cogvideox1.5-5b-i2v", "temb"): [1.22842302e+02, -1.04088754e+02, 2.62981677e+01, -3.06009921e-01,
                                      3.71213220e-02],
}


def test_shipped_coefficients_are_the_published_ones():
    shipped = {(model, name): list(rule.coefficients) for model, inputs in rules.teacache_rules().items()
               for name, rule in inputs.items()}
    assert shipped == PUBLISHED
    # the reference's retention: Wan e0 (use_ret_steps) 5 warm-up steps and none at the end; e 1 and 1
    e0, e = rules.teacache_rule("wan2.1-t2v-14b", "e0"), rules.teacache_rule("wan2.1-t2v-14b", "e")
    assert (e0.warmup_steps, e0.final_steps, e.warmup_steps, e.final_steps) == (5, 0, 1, 1)
    with pytest.raises(KeyError, match="no TeaCache coefficients for cosmos-predict2.5-2b"):
        rules.teacache_rule("cosmos-predict2.5-2b", "modulated")


def test_teacache_decisions_by_hand():
    """HunyuanVideo's polynomial at a relative change of 0.1:
    733.226126e-4 - 401.131952e-3 + 67.5869174e-2 - 3.149878e-1 + 0.0961237896 = 0.1291958242.
    Threshold 0.15 over 6 steps: step 0 runs (warm-up); 1 skips (0.129); 2 runs (0.258, reset); 3 skips;
    4 runs; 5 runs (the final step)."""
    rule = rules.teacache_rule("hunyuanvideo", "modulated")
    accumulated, decisions = 0.0, []
    for step in range(6):
        full, accumulated = rules.teacache_decide(rule, 0.15, accumulated, None if step == 0 else 0.1, step, 6)
        decisions.append(full)
        if step == 1:
            assert accumulated == pytest.approx(0.1291958242, abs=1e-9)
    assert decisions == [True, False, True, False, True, True]


def test_relative_l1_by_hand():
    import numpy as np

    assert rules.relative_l1(np.asarray([1.0, 3.0]), np.asarray([2.0, 2.0])) == pytest.approx(0.5)


def test_easycache_window_on_a_shifted_flow_schedule():
    """start 0.15, end 0.95 at shift 3: sigma 3 * .85 / (1 + 2 * .85) = .944444 and 3 * .05 / 1.1 = .136364."""
    config = rules.EasyCacheConfig()
    assert rules.flow_percent_to_sigma(0.15, 3.0) == pytest.approx(0.9444444444)
    assert rules.flow_percent_to_sigma(0.15, 1.0) == pytest.approx(0.85)
    end = rules.flow_percent_to_sigma(0.95, 3.0)
    assert end == pytest.approx(0.1363636364)
    assert [rules.easycache_phase(config, sigma, 3.0) for sigma in (1.0, 0.95, 0.9444, 0.2, end, 0.1)] == [
        "before", "before", "active", "active", "past_end", "past_end"]


def test_easycache_decisions_by_hand():
    """Full steps 0 and 1 measure the rate k = output change / input change = 0.3 / 0.1 = 3 (output mean 2);
    then each step adds k * input change / 2: 0.15 (skip), 0.15 + 0.075 = 0.225 >= 0.2 (runs, reset)."""
    config = rules.EasyCacheConfig(reuse_threshold=0.2)
    state = rules.easycache_after_full(rules.EasyState(), None, None, output_norm=1.0)  # step 0: nothing to compare
    skip, state = rules.easycache_decide(config, state, input_change=0.1)  # step 1: no rate yet
    assert not skip
    state = rules.easycache_after_full(state, 0.1, 0.3, output_norm=2.0)
    assert state.rate == pytest.approx(3.0)
    skip, state = rules.easycache_decide(config, state, input_change=0.1)
    assert skip and state.cumulative == pytest.approx(0.15)
    skip, state = rules.easycache_decide(config, state, input_change=0.05)
    assert not skip and state.cumulative == 0.0
