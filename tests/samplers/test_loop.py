"""The sampling loop: one compiled step per configuration, NaN/Inf stops naming the step, noise from keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.samplers import (
    DDIM,
    CogVideoXDPM,
    DPMSolverPP,
    FlowEuler,
    FlowEulerAncestral,
    NonFiniteLatentsError,
    UniPC,
    cogvideox_alphas_cumprod,
    ddim_timesteps,
    dpm_flow_schedule,
    flow_match_schedule,
    initial_noise,
    jitted_step,
    sample,
    unipc_flow_schedule,
    unipc_karras_flow_schedule,
)

SHAPE = (1, 2, 2, 3, 8)  # unlike any other test's, so the first trajectory must compile afresh


def _model(x, i, t):
    return 0.5 * x + 0.1 * i


# Two steppers per family: same configuration, different schedules (so different data, same program).
PAIRS = {
    "flow-euler": lambda: [FlowEuler.from_schedule(flow_match_schedule(8, shift=s)) for s in (5.0, 7.0)],
    "ancestral": lambda: [FlowEulerAncestral.from_schedule(flow_match_schedule(8, shift=s), eta=0.5) for s in (1.0, 3.0)],
    "unipc": lambda: [
        UniPC.from_schedule(unipc_flow_schedule(8, shift=3.0), order=3),
        UniPC.from_schedule(unipc_karras_flow_schedule(8, sigma_min=0.01, sigma_max=200.0), order=3),
    ],
    "dpm": lambda: [DPMSolverPP.from_schedule(dpm_flow_schedule(8, shift=s)) for s in (3.0, 5.0)],
    "ddim": lambda: [
        DDIM.create(cogvideox_alphas_cumprod(snr_shift_scale=s), ddim_timesteps(8, "trailing")) for s in (3.0, 1.0)
    ],
    "cogvideox-dpm": lambda: [
        CogVideoXDPM.create(cogvideox_alphas_cumprod(snr_shift_scale=s), ddim_timesteps(8, "trailing")) for s in (3.0, 1.0)
    ],
}


@pytest.mark.parametrize("family", sorted(PAIRS))
def test_a_trajectory_compiles_the_step_once(family):
    first, second = PAIRS[family]()
    latents = initial_noise(jax.random.key(0), SHAPE)
    key = jax.random.key(1)
    before = jitted_step._cache_size()
    out_first = sample(_model, first, latents, key=key)
    assert jitted_step._cache_size() == before + 1, "the step recompiled within one trajectory"
    out_second = sample(_model, second, latents, key=key)
    assert jitted_step._cache_size() == before + 1, "a new schedule of the same configuration recompiled"
    assert np.all(np.isfinite(out_first)) and np.abs(np.asarray(out_first) - np.asarray(out_second)).max() > 1e-4


# One stepper per family at a given step count (same configuration whatever the count).
BY_COUNT = {
    "flow-euler": lambda n: FlowEuler.from_schedule(flow_match_schedule(n, shift=5.0)),
    "ancestral": lambda n: FlowEulerAncestral.from_schedule(flow_match_schedule(n, shift=3.0), eta=0.5),
    "unipc": lambda n: UniPC.from_schedule(unipc_flow_schedule(n, shift=3.0), order=3),
    # a nonzero terminal sigma, so that the last step's order turns on the count (below 15: first order)
    "dpm": lambda n: DPMSolverPP(sigmas=np.linspace(1.0, 0.05, n + 1, dtype=np.float32),
                                 timesteps=np.linspace(1000, 50, n, dtype=np.float32)),
    "ddim": lambda n: DDIM.create(cogvideox_alphas_cumprod(snr_shift_scale=3.0), ddim_timesteps(n, "trailing")),
    "cogvideox-dpm": lambda n: CogVideoXDPM.create(cogvideox_alphas_cumprod(snr_shift_scale=3.0),
                                                   ddim_timesteps(n, "trailing")),
}


def _unpadded_trajectory(stepper, latents, key):
    """The loop's steps on the stepper as built (schedule at its own length, count static)."""
    state = jax.tree.map(lambda x: jnp.array(x, copy=True), stepper.init(latents, key))
    for i in range(stepper.num_steps):
        state, _, _ = jitted_step(stepper, state, _model(state["latents"], i, 0.0), jnp.int32(i))
    return np.asarray(state["latents"])


@pytest.mark.parametrize("family", sorted(BY_COUNT))
def test_every_step_count_up_to_the_capacity_shares_one_compiled_step(family):
    """A warm process asked for another step count compiles no step: the schedule is padded to a
    power-of-two capacity with the count as data. Each count still lands where the unpadded
    stepper does (the DPM case crosses its 15-step lower-order threshold)."""
    latents = initial_noise(jax.random.key(0), (1, 2, 1, 3, 8))  # this test's own shape
    key = jax.random.key(1)
    before = jitted_step._cache_size()
    for n in (3, 14, 15, 20, 64):
        padded = np.asarray(sample(_model, BY_COUNT[family](n), latents, key=key))
        np.testing.assert_allclose(padded, _unpadded_trajectory(BY_COUNT[family](n), latents, key),
                                   rtol=1e-6, atol=1e-6, err_msg=f"{family} at {n} steps")
    assert jitted_step._cache_size() == before + 1 + 5, f"{family}: one padded program plus the 5 references"
    sample(_model, BY_COUNT[family](65), latents, key=key)
    assert jitted_step._cache_size() == before + 1 + 5 + 1, "65 steps: the next capacity, compiled once"


def test_bf16_latents_with_fp32_model_output_keep_one_compile():
    """The solver state's dtypes must not drift between steps, or step 2 would recompile."""
    latents = initial_noise(jax.random.key(0), (1, 2, 1, 2, 8), jnp.bfloat16)
    for family, pair in PAIRS.items():
        before = jitted_step._cache_size()
        out = sample(lambda x, i, t: 0.5 * x.astype(jnp.float32), pair()[0], latents, key=jax.random.key(1))
        assert jitted_step._cache_size() == before + 1, family
        assert out.dtype == jnp.bfloat16 and np.all(np.isfinite(np.asarray(out, np.float32))), family


def test_nan_stops_with_the_step_named():
    stepper = FlowEuler.from_schedule(flow_match_schedule(8, shift=5.0))

    def model(x, i, t):
        return jnp.full_like(x, jnp.nan) if i == 3 else x

    seen = []
    with pytest.raises(NonFiniteLatentsError, match=r"step 4/8 \(timestep [0-9.]+\) produced NaN or Inf"):
        sample(model, stepper, jnp.ones(SHAPE), callback=lambda i, x: seen.append(i))
    assert seen == [0, 1, 2]


def test_inf_stops_too():
    stepper = UniPC.from_schedule(unipc_flow_schedule(8, shift=5.0))
    with pytest.raises(NonFiniteLatentsError, match="step 1/8"):
        sample(lambda x, i, t: jnp.full_like(x, jnp.inf), stepper, jnp.ones(SHAPE))


def test_noise_comes_from_keys_and_given_latents_are_used_as_is():
    a = initial_noise(jax.random.key(5), SHAPE)
    np.testing.assert_array_equal(a, initial_noise(jax.random.key(5), SHAPE))
    assert np.abs(np.asarray(a) - np.asarray(initial_noise(jax.random.key(6), SHAPE))).max() > 0.1
    stepper = FlowEulerAncestral.from_schedule(flow_match_schedule(4), eta=1.0)
    run = lambda key: np.asarray(sample(_model, stepper, a, key=key))  # noqa: E731
    np.testing.assert_array_equal(run(jax.random.key(1)), run(jax.random.key(1)))
    assert np.abs(run(jax.random.key(1)) - run(jax.random.key(2))).max() > 1e-3


def test_stochastic_steppers_demand_a_key():
    with pytest.raises(ValueError, match="key"):
        sample(_model, FlowEulerAncestral.from_schedule(flow_match_schedule(4), eta=1.0), jnp.ones(SHAPE))


def test_sharded_latents_keep_their_sharding_and_values():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]), ("sequence",))
    sharding = NamedSharding(mesh, P(None, None, None, None, "sequence"))
    latents = initial_noise(jax.random.key(0), SHAPE)
    stepper = UniPC.from_schedule(unipc_flow_schedule(8, shift=5.0), order=3)  # compiled above already
    single = sample(_model, stepper, latents)
    sharded = sample(_model, stepper, jax.device_put(latents, sharding))
    assert sharded.sharding.is_equivalent_to(sharding, sharded.ndim)
    np.testing.assert_allclose(sharded, single, rtol=1e-6, atol=1e-6)


def test_state_is_donated_between_steps_and_the_callers_arrays_survive():
    """The dead state's buffers go to the next step; the caller's latents are copied first."""
    from vidax.zoo.samplers.loop import jitted_step

    stepper = UniPC.from_schedule(unipc_flow_schedule(8, shift=5.0))
    latents = jnp.ones(SHAPE)
    out = sample(lambda x, i, t: 0.5 * x, stepper, latents)
    assert not latents.is_deleted() and np.isfinite(np.asarray(out)).all()
    state = jax.tree.map(lambda x: jnp.array(x, copy=True), stepper.init(latents))
    jitted_step(stepper, state, jnp.zeros(SHAPE), jnp.int32(0))
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(state))


@pytest.mark.parametrize("kind", ["ancestral", "cogvideox-dpm"])
def test_host_drawn_step_noise_replaces_the_key(kind):
    """Pipelines draw a stochastic sampler's per-step noise on the host from the run's seed
    (`step_noise`): the trajectory is the stepper driven with exactly that noise, whatever the key."""
    stepper = PAIRS[kind]()[0]
    latents = jnp.asarray(np.random.default_rng(0).standard_normal(SHAPE), jnp.float32)
    draws = {i: np.random.default_rng([7, 1, i]).standard_normal(SHAPE, dtype=np.float32) for i in range(8)}
    asked = []
    out = sample(_model, stepper, latents, step_noise=lambda i, shape: asked.append((i, shape)) or draws[i])
    assert asked == [(i, SHAPE) for i in range(stepper.num_steps)]
    state = stepper.init(latents, jax.random.key(123))
    for i in range(stepper.num_steps):
        state, _ = stepper.step(state, _model(state["latents"], i, 0.0), jnp.int32(i), jnp.asarray(draws[i]))
    np.testing.assert_allclose(np.asarray(out), np.asarray(state["latents"]), rtol=1e-6, atol=1e-6)
    other = sample(_model, stepper, latents, key=jax.random.key(123))  # a key's own noise differs
    assert float(jnp.abs(other - out).max()) > 1e-3
