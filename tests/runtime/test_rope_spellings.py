"""The two spellings of the interleaved RoPE rotation (TPU pair-swap product, CPU pair reshape) give the same
bits: the TPU one runs in CI only through this test, with the backend query answering "tpu". Each spelling is
traced afresh (`_fresh`: a jitted function called again with the same shapes would reuse the CPU trace, and the
comparison could not fail), and each test checks that the TPU products ran."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.parts import rope


def _fresh(function):
    """`function` jitted under a new identity: traced now, whatever was traced before."""
    return jax.jit(lambda *args: function(*args))


@pytest.fixture
def products(monkeypatch):
    """The shapes `swapped_lanes` (the TPU spelling's product) was traced with, and the backend set to "tpu"
    (call `on_tpu()` after the CPU run)."""
    from vidax.zoo.compute.kernels import heads_major

    seen = []
    real = heads_major.swapped_lanes

    def recording(x, *args, **kwargs):
        seen.append(tuple(x.shape))
        return real(x, *args, **kwargs)

    def on_tpu():
        monkeypatch.setattr(rope.jax, "default_backend", lambda: "tpu")
        monkeypatch.setattr(rope, "swapped_lanes", recording)
        from vidax.zoo.ltx2 import rope as ltx2_rope

        monkeypatch.setattr(ltx2_rope, "swapped_lanes", recording)
        return seen

    return on_tpu


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("per_sample", [False, True], ids=["tables [S, D]", "tables [B, S, D]"])
def test_pair_swap_product_equals_the_pair_reshape(products, dtype, per_sample):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, 9, 3, 16)), dtype)
    shape = (2, 9, 16) if per_sample else (9, 16)
    cos, sin = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    on_cpu = _fresh(rope.rotate_interleaved)(x, cos, sin)
    traced = products()
    on_tpu = _fresh(rope.rotate_interleaved)(x, cos, sin)
    assert traced == [x.shape] and on_tpu.dtype == on_cpu.dtype == dtype
    np.testing.assert_array_equal(np.asarray(on_tpu, np.float32), np.asarray(on_cpu, np.float32))
    pairs = np.asarray(x, np.float32).reshape(2, 9, 3, 8, 2)  # the rotation by hand, pair by pair
    c, s = np.asarray(cos)[..., ::2], np.asarray(sin)[..., ::2]
    c = c[None, :, None] if not per_sample else c[:, :, None]
    s = s[None, :, None] if not per_sample else s[:, :, None]
    first = pairs[..., 0] * c - pairs[..., 1] * s
    assert np.abs(np.asarray(on_tpu, np.float32)[..., ::2] - first).max() < (1e-5 if dtype == jnp.float32 else 2e-2)


@pytest.mark.parametrize("per_sample", [False, True], ids=["tables [S, D]", "tables [B, S, D]"])
def test_a_width_of_several_lane_groups_rotates_group_by_group_to_the_same_bits(products, per_sample):
    """LTX-Video rotates its whole width as one head (`x` `[B, S, 1, 2048]`): on a TPU in groups of 128 lanes
    (`rope.LANE_GROUP`), each its own [128, 128] product, where one [2048, 2048] product cost 16 times the FLOPs."""
    rng = np.random.default_rng(3)
    width = 3 * rope.LANE_GROUP
    x = jnp.asarray(rng.standard_normal((2, 5, 1, width)), jnp.float32)
    shape = (2, 5, width) if per_sample else (5, width)
    cos, sin = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    on_cpu = _fresh(rope.rotate_interleaved)(x, cos, sin)
    traced = products()
    on_tpu = _fresh(rope.rotate_interleaved)(x, cos, sin)
    assert traced == [(2, 5, 1, 3, rope.LANE_GROUP)], traced
    np.testing.assert_array_equal(np.asarray(on_tpu), np.asarray(on_cpu))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_half_swap_product_equals_the_halves_concatenate(products, dtype):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((2, 9, 3, 16)), dtype)
    cos, sin = (jnp.asarray(rng.standard_normal((9, 16)), jnp.float32) for _ in range(2))
    on_cpu = _fresh(rope.rotate_half)(x, cos, sin)
    traced = products()
    on_tpu = _fresh(rope.rotate_half)(x, cos, sin)
    assert traced and on_tpu.dtype == on_cpu.dtype == dtype
    np.testing.assert_array_equal(np.asarray(on_tpu, np.float32), np.asarray(on_cpu, np.float32))
    x32 = np.asarray(x, np.float32)  # by hand: first half x1 cos - x2 sin
    want = x32[..., :8] * np.asarray(cos)[None, :, None, :8] - x32[..., 8:] * np.asarray(sin)[None, :, None, :8]
    assert np.abs(np.asarray(on_tpu, np.float32)[..., :8] - want).max() < (1e-5 if dtype == jnp.float32 else 3e-2)


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("per_sample", [False, True], ids=["tables [S, ...]", "tables [B, S, ...]"])
def test_ltx2_rope_products_equal_its_reshapes(products, rope_type, per_sample):
    """LTX-2 rotates whole-width projections its own way (`zoo/ltx2/rope.py`); its TPU spelling too is bit for bit."""
    from vidax.zoo.ltx2 import rope as ltx2_rope

    rng = np.random.default_rng(2)
    heads, head_dim = 2, 64  # 128 lanes: the interleaved tables rotate in groups of 128
    x = jnp.asarray(rng.standard_normal((2, 5, heads * head_dim)), jnp.float32)
    lead = (2, 5) if per_sample else (5,)
    shape = (*lead, heads * head_dim) if rope_type == "interleaved" else (*lead, heads, head_dim // 2)
    cos, sin = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    on_cpu = _fresh(lambda *a: ltx2_rope.apply_rope(*a, rope_type))(x, cos, sin)
    traced = products()
    on_tpu = _fresh(lambda *a: ltx2_rope.apply_rope(*a, rope_type))(x, cos, sin)
    assert traced, "the TPU spelling did not run"
    np.testing.assert_array_equal(np.asarray(on_tpu), np.asarray(on_cpu))
