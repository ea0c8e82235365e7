"""Every attention kernel, and the sharded entry point, equals naive softmax attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.compute import attention as attn_mod
from vidax.zoo.compute.attention import attention, choose_kernel, joint_attention
from vidax.zoo.compute.kernels.blockwise import balanced_blocks, blockwise_attention
from vidax.zoo.compute.kernels.cudnn import cudnn_attention
from vidax.zoo.compute.mesh import MeshError, make_mesh
from vidax.zoo.compute.runtime import use_mesh

from tests.attention_reference import naive


def make(rng, b, s, h, d):
    return jnp.asarray(rng.normal(size=(b, s, h, d)).astype(np.float32))


CASES = {  # (Sq, Skv): self, ragged (not a block multiple), cross attention shapes
    "self": (16, 16),
    "ragged": (37, 37),
    "cross": (29, 11),
}
KERNELS = ["plain", "blockwise", "splash_interpret", "flash_interpret"]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_kernel_matches_naive(rng, kernel, case, masked):
    sq, skv = CASES[case]
    q, k, v = make(rng, 2, sq, 3, 8), make(rng, 2, skv, 3, 8), make(rng, 2, skv, 3, 8)
    mask = jnp.asarray(rng.random((2, skv)) > 0.4) if masked else None
    out = attention(q, k, v, kv_mask=mask, scale=0.3, implementation=kernel)
    assert out.shape == q.shape and out.dtype == q.dtype
    np.testing.assert_allclose(np.asarray(out), naive(q, k, v, mask, 0.3), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["splash_interpret", "flash_interpret"])
def test_gradients_through_the_tpu_kernels_match_plain(rng, kernel):
    # LoRA training differentiates through attention: the flash kernel's VJP refused to run on the chip until its
    # backward blocks were given (the cross-attention, ragged and masked here, is where flash wins)
    q, k, v = make(rng, 1, 29, 2, 8), make(rng, 1, 11, 2, 8), make(rng, 1, 11, 2, 8)
    mask = jnp.asarray(rng.random((1, 11)) > 0.3)

    def loss(implementation):
        return lambda q, k, v: jnp.sum(jnp.sin(attention(q, k, v, kv_mask=mask, scale=0.3,
                                                         implementation=implementation)))

    # the flash VJP's own Pallas calls are traced after the forward's interpret scope has closed
    from jax.experimental.pallas import tpu as pltpu

    with pltpu.force_tpu_interpret_mode():
        got = jax.grad(loss(kernel), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(loss("plain"), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=2e-6, rtol=1e-5)


def test_blockwise_folds_many_blocks(rng):
    """Small blocks force several query blocks and a multi-step scan with a padded last block."""
    q, k, v = make(rng, 1, 45, 2, 4), make(rng, 1, 45, 2, 4), make(rng, 1, 45, 2, 4)
    mask = jnp.asarray(rng.random((1, 45)) > 0.3)
    out = blockwise_attention(q, k, v, mask, 0.5, block_q=8, block_kv=8)
    np.testing.assert_allclose(np.asarray(out), naive(q, k, v, mask, 0.5), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("heads_per_step", [1, 2, None])
@pytest.mark.parametrize("blocks", [(8, 8), (16, 64)], ids=["online", "exact"])
def test_blockwise_head_groups(rng, heads_per_step, blocks):
    """One head per step (CPU), two, or all heads (accelerators); keys folded online or in one tile."""
    q, k, v = make(rng, 2, 37, 4, 8), make(rng, 2, 45, 4, 8), make(rng, 2, 45, 4, 8)
    mask = jnp.asarray(rng.random((2, 45)) > 0.3)
    for m in (None, mask):
        out = blockwise_attention(q, k, v, m, 0.4, block_q=blocks[0], block_kv=blocks[1], heads_per_step=heads_per_step)
        np.testing.assert_allclose(np.asarray(out), naive(q, k, v, m, 0.4), atol=2e-6, rtol=1e-5)


def test_blockwise_online_fold_zeroes_fully_masked_rows(rng):
    """A row whose keys are all masked stays zero across several folded key blocks, and a row whose
    first blocks are all masked recovers once an allowed key comes."""
    q, k, v = make(rng, 2, 20, 2, 8), make(rng, 2, 40, 2, 8), make(rng, 2, 40, 2, 8)
    mask = jnp.asarray(np.stack([np.zeros(40, bool), np.arange(40) >= 30]))
    out = np.asarray(blockwise_attention(q, k, v, mask, 0.3, block_q=8, block_kv=8))
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0], 0.0)
    np.testing.assert_allclose(out[1], naive(q, k, v, mask, 0.3)[1], atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("blocks", [(8, 8), (16, 64)], ids=["online", "exact"])
@pytest.mark.parametrize("valid", [21, 40, 0], ids=["prefix", "all", "none"])
def test_blockwise_mask_branches(rng, blocks, valid):
    """Key blocks whose mask is all True skip the select, all False skip the block: a prefix mask
    (text padding behind the valid tokens) gives full, mixed and empty blocks."""
    q, k, v = make(rng, 2, 20, 2, 8), make(rng, 2, 40, 2, 8), make(rng, 2, 40, 2, 8)
    mask = jnp.asarray(np.broadcast_to(np.arange(40) < valid, (2, 40)))
    out = np.asarray(blockwise_attention(q, k, v, mask, 0.3, block_q=blocks[0], block_kv=blocks[1]))
    want = np.zeros(q.shape) if valid == 0 else naive(q, k, v, mask, 0.3)
    np.testing.assert_allclose(out, want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("length,preferred,expected", [
    (1000, 1024, (1, 1000)),  # fits: one exact block, no padding
    (3510, 1024, (5, 702)),  # Wan 33f 240x416: a divisor, so no key is padded or masked
    (4096, 1024, (4, 1024)),
    (2053, 1024, (3, 688)),  # prime: the fewest equal blocks, multiples of 8
])
def test_balanced_blocks(length, preferred, expected):
    count, size = balanced_blocks(length, preferred)
    assert (count, size) == expected and count * size >= length and size <= preferred


@pytest.mark.parametrize("kernel", KERNELS)
def test_fully_masked_rows_are_zero_not_nan(rng, kernel):
    q, k, v = make(rng, 2, 9, 2, 8), make(rng, 2, 9, 2, 8), make(rng, 2, 9, 2, 8)
    mask = jnp.asarray(np.stack([np.zeros(9, bool), np.arange(9) < 4]))  # batch 0: nothing to attend
    out = np.asarray(attention(q, k, v, kv_mask=mask, implementation=kernel))
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0], 0.0)
    np.testing.assert_allclose(out[1], naive(q, k, v, mask)[1], atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("mask_kind", ["none", "prefix", "scattered", "empty_row"])
def test_cudnn_path_logic(rng, mask_kind):
    """The GPU wrapper's prefix-mask -> lengths logic, run with jax's XLA implementation on CPU
    (the fused kernel itself needs a GPU): prefix masks go through lengths, others fall back."""
    q, k, v = make(rng, 2, 11, 2, 8), make(rng, 2, 11, 2, 8), make(rng, 2, 11, 2, 8)
    masks = {
        "none": None,
        "prefix": np.arange(11)[None] < np.array([[7], [11]]),
        "scattered": rng.random((2, 11)) > 0.4,
        "empty_row": np.stack([np.zeros(11, bool), np.arange(11) < 5]),
    }
    mask = None if masks[mask_kind] is None else jnp.asarray(masks[mask_kind])
    out = np.asarray(jax.jit(lambda *a: cudnn_attention(*a, mask, 0.4, implementation="xla"))(q, k, v))
    want = naive(q, k, v, mask, 0.4)
    if mask_kind == "empty_row":
        np.testing.assert_array_equal(out[0], 0.0)
        out, want = out[1:], want[1:]
    np.testing.assert_allclose(out, want, atol=2e-6, rtol=1e-5)


def test_long_self_attention_never_builds_the_s_by_s_matrix():
    s = 4096
    x = jax.ShapeDtypeStruct((1, s, 2, 8), jnp.float32)
    assert choose_kernel(x, x, None) == "blockwise"  # CPU, above the plain threshold
    jaxpr = jax.make_jaxpr(lambda q, k, v: attention(q, k, v))(x, x, x)
    sizes = [np.prod(var.aval.shape) for eqn in _all_eqns(jaxpr.jaxpr) for var in eqn.outvars]
    assert max(sizes) < s * s  # largest temporary is a tile, not [S, S]


def _all_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():  # scan / map / pjit bodies
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                yield from _all_eqns(inner)


def test_short_cross_attention_takes_the_plain_path():
    q, t = jax.ShapeDtypeStruct((1, 256, 2, 8), jnp.float32), jax.ShapeDtypeStruct((1, 64, 2, 8), jnp.float32)
    assert choose_kernel(q, t, None) == "plain"


def test_bad_inputs_are_clear_errors(rng):
    q = make(rng, 1, 4, 2, 8)
    with pytest.raises(ValueError, match="kv_mask must be"):
        attention(q, q, q, kv_mask=jnp.ones((1, 5), bool))
    with pytest.raises(ValueError, match="unknown attention implementation"):
        attention(q, q, q, implementation="magic")
    with pytest.raises(ValueError, match=r"\[B, S, H, D\]"):
        attention(q[0], q[0], q[0])
    text = make(rng, 1, 3, 4, 8)
    with pytest.raises(ValueError, match="video and text attention shapes disagree"):
        joint_attention(q, q, q, text, text, text)


# --- under a mesh: Ulysses, query-split cross attention, joint attention ------------------------

MESHES = [(1, 1, 2), (2, 2, 2), (1, 2, 4), (1, 1, 8)]


@pytest.fixture(scope="module")
def qkv():
    rng = np.random.default_rng(3)
    return {
        "video": [make(rng, 2, 13, 8, 4) for _ in range(3)],  # 13: padded for every sp > 1
        "text": [make(rng, 2, 5, 8, 4) for _ in range(3)],
        "video_mask": jnp.asarray(rng.random((2, 13)) > 0.3),
        "text_mask": jnp.asarray([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool),
    }


@pytest.mark.parametrize("dp,tp,sp", MESHES)
def test_sharded_entry_point_equals_one_device(qkv, dp, tp, sp):
    (q, k, v), (tq, tk, tv) = qkv["video"], qkv["text"]
    vmask, tmask = qkv["video_mask"], qkv["text_mask"]

    def run(q, k, v, tq, tk, tv):
        return (
            attention(q, k, v, kv_mask=vmask),
            attention(q, tk, tv, kv_mask=tmask),
            *joint_attention(q, k, v, tq, tk, tv, txt_mask=tmask),
        )

    with use_mesh(make_mesh(dp, tp, sp)):
        sharded = jax.jit(run)(q, k, v, tq, tk, tv)
    expected = [
        naive(q, k, v, vmask),
        naive(q, tk, tv, tmask),
    ]
    joint = naive(jnp.concatenate([q, tq], 1), jnp.concatenate([k, tk], 1), jnp.concatenate([v, tv], 1),
                  jnp.concatenate([jnp.ones((2, 13), bool), tmask], 1))
    expected += [joint[:, :13], joint[:, 13:]]
    for got, want in zip(sharded, expected):
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-6, rtol=1e-5)


def test_ulysses_really_exchanges_heads(qkv, monkeypatch):
    """Under sp the kernel sees the whole sequence with H/sp heads (not a local sequence slice)."""
    seen = []
    original = attn_mod.local_attention

    def spy(q, k, v, kv_mask=None, **kw):
        seen.append(q.shape)
        return original(q, k, v, kv_mask, **kw)

    monkeypatch.setattr(attn_mod, "local_attention", spy)
    q, k, v = qkv["video"]
    with use_mesh(make_mesh(1, 2, 4)):
        jax.jit(lambda q, k, v: attention(q, k, v))(q, k, v)
    assert seen == [(2, 16, 1, 4)]  # 13 padded to 16 tokens; 8 heads / (tp 2 · sp 4)


def test_heads_the_mesh_cannot_split_name_valid_degrees(rng):
    q = make(rng, 1, 8, 6, 4)
    with use_mesh(make_mesh(1, 4, 1)):
        with pytest.raises(MeshError, match=r"6 attention heads cannot be split over tp=4; valid tp degrees: 1, 2, 3, 6"):
            attention(q, q, q)
    with use_mesh(make_mesh(1, 2, 2)):
        with pytest.raises(MeshError, match=r"leave 3 per device.*valid sp degrees at tp=2: 1, 3"):
            attention(q, q, q)


@pytest.mark.parametrize("dp,tp,sp", [(1, 2, 2), (2, 1, 2)])
def test_pallas_kernel_inside_shard_map(qkv, dp, tp, sp):
    """The TPU kernel (interpret mode) under a mesh: Ulysses all-to-all around it, padding masked.

    Four devices: Pallas' TPU interpreter synchronises its simulated devices, which stalls with
    all eight fake devices on a 2-core machine.
    """
    q, k, v = qkv["video"]
    mask = qkv["video_mask"]
    with use_mesh(make_mesh(dp, tp, sp)):
        out = jax.jit(lambda q, k, v: attention(q, k, v, kv_mask=mask, implementation="pallas_interpret"))(q, k, v)
    np.testing.assert_allclose(np.asarray(out), naive(q, k, v, mask), atol=2e-6, rtol=1e-5)


def test_entry_point_inside_shard_map_runs_per_device(qkv):
    """Code that is already per-device (a VAE's own shard_map) gets the local kernel, not a nested map."""
    q, k, v = qkv["video"]
    spec = jax.sharding.PartitionSpec(None, None, "tensor", None)
    with use_mesh(make_mesh(1, 2, 1)):
        out = jax.jit(jax.shard_map(lambda q, k, v: attention(q, k, v), in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
    np.testing.assert_allclose(np.asarray(out), naive(q, k, v), atol=2e-6, rtol=1e-5)
