"""vidax's exp2 kernels (`zoo/compute/kernels/pallas_exp2.py`) in Pallas' interpreter against float64 softmax
attention: ragged lengths, cross attention, key masks with full, mixed and empty key blocks, rows with no key,
head dims 64 and 128, fp32 and bf16, the fixed bound and its gate, the heads-major entry, and gradients (splash's,
through the custom VJP)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.compute.attention import attention
from vidax.zoo.compute.kernels import pallas_exp2
from vidax.zoo.compute.kernels.pallas_exp2 import Exp2Blocks, exp2_attention, fixed_bounds
from vidax.zoo.compute.kernels.pallas_tpu import TpuAttention, tpu_attention, tpu_attention_heads_major

from tests.attention_reference import naive

SMALL = Exp2Blocks(128, 256, 128, 64)  # two products per key block, two exponential passes per product


def heads_major(x, length):  # [B, S, H, D] -> [B*H, length, D], zero-padded
    b, s, h, d = x.shape
    return jnp.pad(x, ((0, 0), (0, length - s), (0, 0), (0, 0))).transpose(0, 2, 1, 3).reshape(b * h, length, d)


def run_kernel(q, k, v, mask, scale, *, bounded, blocks=SMALL):
    """The kernel alone on `[B, S, H, D]` inputs; rows whose batch has no allowed key set to zero (the caller's
    job, as `tpu_attention` does)."""
    b, sq, h, d = q.shape
    skv = k.shape[1]
    sq_pad, skv_pad = -(-sq // blocks.block_q) * blocks.block_q, -(-skv // blocks.block_kv) * blocks.block_kv
    q2 = heads_major(q * jnp.asarray(scale * pallas_exp2.LOG2E, q.dtype), sq_pad)
    padded_mask = None if mask is None else jnp.pad(jnp.asarray(mask), ((0, 0), (0, skv_pad - skv)))
    out = exp2_attention(q2, heads_major(k, skv_pad), heads_major(v, skv_pad), kv_len=skv, blocks=blocks, heads=h,
                         kv_mask=padded_mask, bounded=bounded, interpret=True)
    out = np.asarray(out, np.float32).reshape(b, h, sq_pad, d).transpose(0, 2, 1, 3)[:, :sq]
    if mask is not None:
        out = np.where(np.asarray(mask).any(axis=1)[:, None, None, None], out, 0.0)
    return out


def inputs(rng, b, sq, skv, h, d, dtype=jnp.float32):
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float32) for s in (sq, skv, skv))
    return tuple(jnp.asarray(x, dtype) for x in (q, k, v))


@pytest.mark.parametrize("bounded", [False, True], ids=["running_max", "fixed_bound"])
@pytest.mark.parametrize("d", [64, 128])
def test_fp32_ragged_cross_attention_with_every_kind_of_key_block(rng, bounded, d):
    # 700 keys in blocks of 256 (products of 128): block 0 mixed, block 1 mixed with its first chunk empty (skipped),
    # block 2 ragged (700 of 768) and mixed; batch row 1 has no allowed key at all (zeros, never NaN)
    q, k, v = inputs(rng, 2, 200, 700, 2, d)
    mask = np.ones((2, 700), bool)
    mask[0, :100] = False
    mask[0, 256:384] = False
    mask[0, 600:650] = False
    mask[1] = False
    out = run_kernel(q, k, v, mask, d ** -0.5, bounded=bounded)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[1], 0.0)
    # the fixed bound puts exponents near RECENTER (88) through fp32's 24 bits: 2^-24 * 100 * ln 2 relative
    tolerance = 1e-5 if bounded else 2e-6
    np.testing.assert_allclose(out, naive(q, k, v, mask, d ** -0.5), atol=tolerance, rtol=1e-5)


def test_a_masked_key_block_or_chunk_is_skipped_and_a_full_one_needs_no_mask():
    mask = np.zeros((2, 1024), bool)
    mask[0, :256] = True  # blocks of 512 keys: mixed (chunk 1 full, chunk 2 empty), empty
    mask[1, 300:700] = True  # mixed (chunks empty, mixed), mixed (chunks mixed, empty)
    kinds = np.asarray(pallas_exp2.block_kinds(jnp.asarray(mask), 1000, 512, 256, 1024))
    full, mixed, empty = pallas_exp2.BLOCK_FULL, pallas_exp2.BLOCK_MIXED, pallas_exp2.BLOCK_EMPTY
    assert kinds.tolist() == [[mixed, full, empty, empty, empty, empty], [mixed, empty, mixed, mixed, mixed, empty]]


@pytest.mark.parametrize("kernel", ["exp2", "exp2_bounded"])
@pytest.mark.parametrize("d", [64, 128])
def test_bf16_within_its_rounding(rng, kernel, d):
    """bf16 inputs: the kernel rounds q times scale * log2(e) to bf16 (as splash rounds q times the scale) and the
    probabilities to bf16 for the second product; against float64 softmax of the same bf16 values the error is
    within 2^-8 relative on each logit (|t| ln 2 on its weight) and on each probability, times max |v|."""
    q, k, v = inputs(rng, 2, 300, 300, 2, d, jnp.bfloat16)
    q32, k32, v32 = (np.asarray(x, np.float64) for x in (q, k, v))
    want = naive(q32, k32, v32, None, d ** -0.5)
    got = np.asarray(tpu_attention(q, k, v, None, d ** -0.5, TpuAttention(kernel, 128, 256, 128), interpret=True),
                     np.float32)
    largest_logit = np.abs(np.einsum("bqhd,bkhd->bhqk", q32, k32)).max() * d ** -0.5 * pallas_exp2.LOG2E
    bound = 2.0 ** -8 * (1 + largest_logit * np.log(2)) * np.abs(v32).max()
    assert np.abs(got - want).max() < bound, (np.abs(got - want).max(), bound)


def test_the_fixed_bound_is_taken_only_where_it_keeps_precision(rng):
    """Heads whose bound passes the gate run with it; a head whose queries are 20 times larger (a bound past the
    gate: its smaller keys would flush to zero once shifted) keeps the running maximum, and both match float64."""
    q, k, v = inputs(rng, 1, 150, 400, 2, 64)
    q = q.at[:, :, 1].multiply(20.0)
    scale = 64 ** -0.5
    q2 = heads_major(q * scale * pallas_exp2.LOG2E, 256)
    bounds, eligible = fixed_bounds(q2, heads_major(k, 512), None, 400, heads=2)
    assert np.asarray(eligible).tolist() == [1, 0] and bounds.shape == (2, 1, 256)
    out, want = run_kernel(q, k, v, None, scale, bounded=True), naive(q, k, v, None, scale)
    # fp32 carries each exponent through 24 bits: the bounded head's reach RECENTER plus its bound, the other
    # head's are its logits (base 2); 2^-21 of that, relative to outputs of order one
    logits = np.abs(np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64)))
    exponents = [pallas_exp2.RECENTER + float(np.asarray(bounds)[0].max() + pallas_exp2.RECENTER),
                 float(logits[0, 1].max()) * scale * pallas_exp2.LOG2E]
    for head, exponent in enumerate(exponents):
        np.testing.assert_allclose(out[..., head, :], want[..., head, :], atol=2.0 ** -21 * exponent, rtol=1e-5)


def test_safe_bound_leaves_room_for_every_key():
    # the largest term is >= 2^(RECENTER - m); keys within log2(keys) + KEPT_BITS binary orders of it must stay
    # above fp32's flush at 2^-126
    for keys in (512, 32760, 111600):
        bound = pallas_exp2.safe_bound(keys)
        lowest = pallas_exp2.RECENTER - (bound - pallas_exp2.RECENTER) - np.ceil(np.log2(keys)) - pallas_exp2.KEPT_BITS
        assert lowest >= -126


def test_entry_point_heads_major_and_rows_with_no_key(rng):
    q, k, v = inputs(rng, 2, 37, 37, 3, 8)
    mask = jnp.asarray(np.stack([np.zeros(37, bool), np.arange(37) < 20]))
    for kernel in ("exp2_interpret", "exp2_bounded_interpret"):
        out = np.asarray(attention(q, k, v, kv_mask=mask, scale=0.3, implementation=kernel))
        assert np.isfinite(out).all()
        np.testing.assert_array_equal(out[0], 0.0)
        np.testing.assert_allclose(out[1], naive(q, k, v, mask, 0.3)[1], atol=2e-6, rtol=1e-5)
    choice = TpuAttention("exp2", 128, 128, 128)
    qh, kh = (jnp.pad(x, ((0, 0), (0, 91), (0, 0), (0, 56))).transpose(0, 2, 1, 3) for x in (q, k))
    vh = jnp.pad(v, ((0, 0), (0, 91), (0, 0), (0, 56))).transpose(0, 2, 1, 3)
    out = tpu_attention_heads_major(qh, kh, vh, 0.3, choice, 37, 37, interpret=True)
    np.testing.assert_allclose(np.asarray(out).transpose(0, 2, 1, 3)[:, :37, :, :8], naive(q, k, v, None, 0.3),
                               atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["exp2_interpret", "exp2_bounded_interpret"])
def test_gradients_are_splash_s(rng, kernel):
    """Differentiated, an exp2 call runs splash's forward and backward: the gradients equal plain attention's."""
    q, k, v = inputs(rng, 1, 29, 11, 2, 8)
    mask = jnp.asarray(rng.random((1, 11)) > 0.3)

    def loss(implementation):
        return lambda q, k, v: jnp.sum(jnp.sin(attention(q, k, v, kv_mask=mask, scale=0.3,
                                                         implementation=implementation)))

    got = jax.grad(loss(kernel), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss("plain"), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-6, rtol=1e-5)
