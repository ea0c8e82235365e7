"""The two spellings of the interleaved RoPE rotation (TPU pair-swap product, CPU pair reshape) give the same
bits: the TPU one runs in CI only through this test, with the backend query answering "tpu"."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.parts import rope


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("per_sample", [False, True], ids=["tables [S, D]", "tables [B, S, D]"])
def test_pair_swap_product_equals_the_pair_reshape(monkeypatch, dtype, per_sample):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, 9, 3, 16)), dtype)
    shape = (2, 9, 16) if per_sample else (9, 16)
    cos, sin = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    on_cpu = jax.jit(rope.rotate_interleaved)(x, cos, sin)
    monkeypatch.setattr(rope.jax, "default_backend", lambda: "tpu")
    on_tpu = jax.jit(rope.rotate_interleaved)(x, cos, sin)
    assert on_tpu.dtype == on_cpu.dtype == dtype
    np.testing.assert_array_equal(np.asarray(on_tpu, np.float32), np.asarray(on_cpu, np.float32))
    pairs = np.asarray(x, np.float32).reshape(2, 9, 3, 8, 2)  # the rotation by hand, pair by pair
    c, s = np.asarray(cos)[..., ::2], np.asarray(sin)[..., ::2]
    c = c[None, :, None] if not per_sample else c[:, :, None]
    s = s[None, :, None] if not per_sample else s[:, :, None]
    first = pairs[..., 0] * c - pairs[..., 1] * s
    assert np.abs(np.asarray(on_tpu, np.float32)[..., ::2] - first).max() < (1e-5 if dtype == jnp.float32 else 2e-2)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_half_swap_product_equals_the_halves_concatenate(monkeypatch, dtype):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((2, 9, 3, 16)), dtype)
    cos, sin = (jnp.asarray(rng.standard_normal((9, 16)), jnp.float32) for _ in range(2))
    on_cpu = jax.jit(rope.rotate_half)(x, cos, sin)
    monkeypatch.setattr(rope.jax, "default_backend", lambda: "tpu")
    on_tpu = jax.jit(rope.rotate_half)(x, cos, sin)
    assert on_tpu.dtype == on_cpu.dtype == dtype
    np.testing.assert_array_equal(np.asarray(on_tpu, np.float32), np.asarray(on_cpu, np.float32))
    x32 = np.asarray(x, np.float32)  # by hand: first half x1 cos - x2 sin
    want = x32[..., :8] * np.asarray(cos)[None, :, None, :8] - x32[..., 8:] * np.asarray(sin)[None, :, None, :8]
    assert np.abs(np.asarray(on_tpu, np.float32)[..., :8] - want).max() < (1e-5 if dtype == jnp.float32 else 3e-2)


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("per_sample", [False, True], ids=["tables [S, ...]", "tables [B, S, ...]"])
def test_ltx2_rope_products_equal_its_reshapes(monkeypatch, rope_type, per_sample):
    """LTX-2 rotates whole-width projections its own way (`zoo/ltx2/rope.py`); its TPU spelling too is bit for bit."""
    from vidax.zoo.ltx2 import rope as ltx2_rope

    rng = np.random.default_rng(2)
    heads, head_dim = 2, 64  # 128 lanes: the interleaved tables rotate in groups of 128
    x = jnp.asarray(rng.standard_normal((2, 5, heads * head_dim)), jnp.float32)
    lead = (2, 5) if per_sample else (5,)
    shape = (*lead, heads * head_dim) if rope_type == "interleaved" else (*lead, heads, head_dim // 2)
    cos, sin = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(2))
    on_cpu = ltx2_rope.apply_rope(x, cos, sin, rope_type)
    monkeypatch.setattr(ltx2_rope.jax, "default_backend", lambda: "tpu")
    on_tpu = ltx2_rope.apply_rope(x, cos, sin, rope_type)
    np.testing.assert_array_equal(np.asarray(on_tpu), np.asarray(on_cpu))
