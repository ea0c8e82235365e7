"""The shared dense projection: row blocks on one CPU device, one call elsewhere, same numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax.core.meta import unbox as nn_unbox

from vidax.zoo.compute import layers
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.runtime import use_mesh


def _loops(fn, *args) -> int:
    """Loops in a fresh trace of `fn` (jax caches traces per function, not per setting)."""
    return str(jax.make_jaxpr(lambda *a: fn(*a))(*args)).count("scan[")


@pytest.mark.parametrize("use_bias", [True, False])
def test_row_blocks_equal_the_one_call_product_bit_for_bit(monkeypatch, use_bias):
    """37 rows (with a batch axis) in blocks of at most 8: 5 blocks of 8, the last one starting at row 29."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1, 37, 48), np.float32))
    kernel = jnp.asarray(rng.standard_normal((48, 40), np.float32))
    bias = jnp.asarray(rng.standard_normal((40,), np.float32)) if use_bias else None
    one_call = jnp.dot(x, kernel) + (0 if bias is None else bias)

    monkeypatch.setattr(layers, "CPU_ROW_BLOCK", 8)
    blocked = jax.jit(lambda x, k: layers.project(x, k, bias))
    assert _loops(lambda x, k: layers.project(x, k, bias), x, kernel) == 1  # the row-block path ran
    out = blocked(x, kernel)
    assert out.shape == (1, 37, 40)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(one_call))


def test_small_and_sharded_products_take_one_call(monkeypatch):
    x, kernel = jnp.ones((2, 16, 8)), jnp.ones((8, 4))
    assert _loops(layers.project, x, kernel) == 0  # 32 rows <= CPU_ROW_BLOCK
    monkeypatch.setattr(layers, "CPU_ROW_BLOCK", 8)
    assert _loops(layers.project, x, kernel) == 1
    with use_mesh(make_mesh(dp=2, sp=2)):
        assert _loops(layers.project, x, kernel) == 0  # each device's share is already smaller
    with use_mesh(make_mesh(dp=1)):
        assert _loops(layers.project, x, kernel) == 1  # a one-device mesh is not split


def test_the_input_activation_is_applied_to_every_row_block(monkeypatch):
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((2, 13, 16), np.float32))
    kernel = jnp.asarray(rng.standard_normal((16, 8), np.float32))
    expected = np.asarray(jnp.dot(layers.gelu_tanh(x), kernel))
    monkeypatch.setattr(layers, "CPU_ROW_BLOCK", 8)  # 26 rows: 4 blocks of 8, the last from row 18
    out = jax.jit(lambda x, k: layers.project(x, k, input_activation=layers.gelu_tanh))(x, kernel)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-6)  # the activation may fuse differently
    dense = layers.Dense(8, input_activation=layers.gelu_tanh)
    params = {"params": {"kernel": kernel, "bias": jnp.zeros(8)}}
    np.testing.assert_allclose(np.asarray(dense.apply(params, x)), expected, rtol=1e-6, atol=1e-6)


UNIT_ROUNDOFF = 2.0**-24  # fp32


def reordering_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How far two fp32 evaluations of `a @ b` that add the same products in different orders can be apart,
    per element: each is within gamma_K * (|a| @ |b|) of the exact sum (Higham, Accuracy and Stability of
    Numerical Algorithms, 3.1), K the contracted length."""
    k = a.shape[-1]
    gamma = k * UNIT_ROUNDOFF / (1 - k * UNIT_ROUNDOFF)
    return 2 * gamma * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))


@pytest.mark.parametrize("chunks", [2, 3])
def test_feed_forward_in_token_chunks_equals_one_pass(monkeypatch, chunks):
    """Accelerators run a large feed-forward in token chunks (one hidden activation chunk live at a
    time); the output is the one pass's, row for row (7 tokens: a short last chunk).

    Exactly: the chunked output is, bit for bit, each chunk's tokens sent through the feed-forward on their
    own, side by side (no token lost, moved or computed twice). Against the one pass over all 7 tokens the
    products are the same sums, but not always added in the same order: XLA's CPU matmul (YNNPACK) picks its
    kernel by the row count, and with AVX2 alone (AMD EPYC 7003, no AVX-512) a product of 1-6, 9-12 or 17-18
    rows of an 8-wide output adds in another order than one of 14 (here 2 x 4 or 2 x 3 tokens against
    2 x 7: the last bits of 27-58 of 112 values moved, by at most 4.7e-10). So that comparison is held to the
    bound of reordering the sums, not to the bits."""
    ffn = layers.FeedForward(dim=8, hidden=16)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 7, 8)), jnp.float32)
    params = ffn.init(jax.random.key(0), x)
    whole = np.asarray(ffn.apply(params, x))
    monkeypatch.setattr(layers, "ffn_token_chunks", lambda shape, *a: chunks if shape[1] == 7 else 1)
    chunked = np.asarray(ffn.apply(params, x))
    size = -(-7 // chunks)
    pieces = np.concatenate([np.asarray(ffn.apply(params, x[:, i:i + size])) for i in range(0, 7, size)], axis=1)
    np.testing.assert_array_equal(chunked, pieces)
    # the bound of both products: the first's reordering carried through the activation (|gelu'| < 1.13) into
    # the second, plus the second's own (a bias is one more term of each sum)
    p = jax.tree_util.tree_map(np.asarray, nn_unbox(params))["params"]
    w0, b0 = p["net_0"]["proj"]["kernel"], p["net_0"]["proj"]["bias"]
    w2, b2 = p["net_2"]["kernel"], p["net_2"]["bias"]
    x0 = np.concatenate([np.asarray(x), np.ones((2, 7, 1), np.float32)], axis=-1)
    hidden = np.asarray(layers.gelu_tanh(jnp.asarray(x0 @ np.vstack([w0, b0]))))
    h1 = np.concatenate([hidden, np.ones((2, 7, 1), np.float32)], axis=-1)
    w2b = np.vstack([w2, b2])
    bound = 1.13 * reordering_bound(x0, np.vstack([w0, b0])) @ np.abs(w2) + reordering_bound(h1, w2b)
    assert np.all(np.abs(chunked.astype(np.float64) - whole) <= bound), np.max(np.abs(chunked - whole) - bound)
    assert np.any(np.abs(np.roll(whole, 1, axis=1) - whole) > bound)  # tight enough to see a token moved by one


@pytest.mark.parametrize("per_token_gate", [False, True])
def test_feed_forward_adds_into_the_residual_chunk_by_chunk(monkeypatch, per_token_gate):
    """With a residual, the feed-forward adds `out * gate` into it: in one pass the expression the blocks wrote
    before (`residual + out.astype(residual.dtype) * gate`), bit for bit; in token chunks each chunk's tokens
    through the feed-forward on their own, added into the residual's rows, a gate per token sliced with them
    (7 tokens in chunks of 3, 3 and 1)."""
    ffn = layers.FeedForward(dim=8, hidden=16)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((2, 7, 8)), jnp.bfloat16)
    residual = jnp.asarray(rng.standard_normal((2, 7, 8)), jnp.float32)
    gate = jnp.asarray(rng.standard_normal((2, 7 if per_token_gate else 1, 8)), jnp.float32)
    params = ffn.init(jax.random.key(0), x)
    whole = np.asarray(ffn.apply(params, x, residual=residual, gate=gate))
    np.testing.assert_array_equal(whole, np.asarray(residual + ffn.apply(params, x).astype(jnp.float32) * gate))
    monkeypatch.setattr(layers, "ffn_token_chunks", lambda shape, *a: 3 if shape[1] == 7 else 1)
    chunked = np.asarray(ffn.apply(params, x, residual=residual, gate=gate))
    for start in (0, 3, 6):
        rows = slice(start, start + 3)
        part = ffn.apply(params, x[:, rows], residual=residual[:, rows], gate=gate[:, rows] if per_token_gate else gate)
        np.testing.assert_array_equal(chunked[:, rows], np.asarray(part))


def test_a_gate_given_by_rows_equals_the_gate_it_gives(monkeypatch):
    """A gate given as `gate(start, stop)` (Cosmos-Predict2.5's per-frame gate, made per token only where it is
    used) gives the same sums as the whole per-token gate, in one pass and in token chunks; each chunk asks for
    its own rows."""
    ffn = layers.FeedForward(dim=8, hidden=16)
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((2, 7, 8)), jnp.bfloat16)
    residual = jnp.asarray(rng.standard_normal((2, 7, 8)), jnp.float32)
    gate = jnp.asarray(rng.standard_normal((2, 7, 8)), jnp.float32)
    params = ffn.init(jax.random.key(0), x)
    asked = []
    rows = lambda start, stop: (asked.append((start, stop)), gate[:, start:stop])[1]  # noqa: E731
    for chunks in (1, 3):
        monkeypatch.setattr(layers, "ffn_token_chunks", lambda shape, *a, n=chunks: n if shape[1] == 7 else 1)
        asked.clear()
        np.testing.assert_array_equal(np.asarray(ffn.apply(params, x, residual=residual, gate=rows)),
                                      np.asarray(ffn.apply(params, x, residual=residual, gate=gate)))
        assert asked == ([(0, 7)] if chunks == 1 else [(0, 3), (3, 6), (6, 7)])


def test_feed_forward_chunks_only_where_it_pays(monkeypatch):
    big = (2, 75600, 5120)  # Wan2.1-14B at 720p, the CFG pair: 4.2 GB of bf16 hidden activation
    assert layers.ffn_token_chunks(big, 13824, jnp.bfloat16) == 1  # a CPU run: its own row blocks
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert layers.ffn_token_chunks(big, 13824, jnp.bfloat16) == 4
    assert layers.ffn_token_chunks((2, 1024, 5120), 13824, jnp.bfloat16) == 1
    with use_mesh(make_mesh(1, 1, 2)):
        assert layers.ffn_token_chunks(big, 13824, jnp.bfloat16) == 1  # a sequence-split axis is not cut
