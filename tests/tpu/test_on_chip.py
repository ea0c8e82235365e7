"""The TPU tier: the attention kernels and one DiT on the chip itself, against plain attention and the CPU.

Runs only on a TPU host, in one process (one process can hold the chip):
`VIDAX_TEST_TPU=1 python -m pytest -m tpu tests/tpu`. Elsewhere it is skipped with that reason
(tests/conftest.py); it never passes without running: the first test asserts the backend is a TPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.compute import attention as attention_module
from vidax.zoo.compute.attention import attention, local_attention
from vidax.zoo.compute.kernels.pallas_tpu import TpuAttention, tpu_attention
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.runtime import use_mesh

from tests.attention_reference import naive

pytestmark = pytest.mark.tpu


def test_the_tier_runs_on_a_tpu():
    assert jax.default_backend() == "tpu", f"the TPU tier ran on {jax.default_backend()}"


CASES = {  # (Sq, Skv, head_dim): several query/key blocks, ragged lengths, cross attention, D 64
    "self": (2304, 2304, 128),
    "ragged": (1999, 1999, 128),
    "cross": (2100, 300, 128),
    "d64": (1500, 1500, 64),
}
CHOICES = [TpuAttention("splash", 1024, 2048, 1024), TpuAttention("flash", 1024, 1024, 512),
           TpuAttention("exp2", 1024, 2048, 1024), TpuAttention("exp2_bounded", 1024, 2048, 1024)]


@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: c.label())
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("masked", [False, True], ids=["open", "masked"])
def test_kernel_matches_plain_attention(case, choice, masked):
    sq, skv, d = CASES[case]
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, sq, 3, d)).astype(np.float32)
    k, v = (rng.standard_normal((2, skv, 3, d)).astype(np.float32) for _ in range(2))
    mask = np.stack([np.arange(skv) < skv - 37, rng.random(skv) > 0.3]) if masked else None
    scale = d ** -0.5
    want = naive(q, k, v, mask, scale)
    with jax.default_matmul_precision("highest"):
        fp32 = jax.jit(lambda *a: tpu_attention(*a, scale, choice))(q, k, v, None if mask is None else jnp.asarray(mask))
    bf16 = jax.jit(lambda *a: tpu_attention(*a, scale, choice))(
        *(jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)), None if mask is None else jnp.asarray(mask))
    err32 = float(np.abs(np.asarray(fp32) - want).max())
    err16 = float(np.abs(np.asarray(bf16, np.float32) - want).max())
    print(f"{case} {choice.label()} {'masked' if masked else 'open'}: max |err| fp32 {err32:.2e} bf16 {err16:.2e}")
    assert err16 < 3e-2
    assert err32 < 2e-3


def test_entry_point_under_a_one_device_mesh_and_rows_with_no_key():
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((2, 1600, 4, 128)), jnp.bfloat16)
    mask = jnp.asarray(np.stack([np.zeros(1600, bool), np.arange(1600) < 900]))
    with use_mesh(make_mesh(1, 1, 1)):
        out = jax.jit(lambda q, m: attention(q, q, q, kv_mask=m))(q, mask)
    out = np.asarray(out, np.float32)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0], 0.0)
    want = naive(np.asarray(q, np.float32), np.asarray(q, np.float32), np.asarray(q, np.float32), mask, 128 ** -0.5)
    assert np.abs(out[1] - want[1]).max() < 3e-2


@pytest.mark.parametrize("kernel", ["splash", "flash", "exp2_bounded"])
def test_gradients_through_the_kernel_match_plain(kernel):
    rng = np.random.default_rng(2)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 1280, 2, 128)), jnp.float32) for _ in range(3))

    def loss(kernel):
        return lambda q, k, v: jnp.sum(local_attention(q, k, v, scale=0.1, implementation=kernel) ** 2)

    with jax.default_matmul_precision("highest"):
        got = jax.jit(jax.grad(loss(kernel), argnums=(0, 1, 2)))(q, k, v)
        want = jax.jit(jax.grad(loss("plain"), argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(got, want):
        err = float(jnp.abs(g - w).max() / jnp.abs(w).max())
        print(f"grad relative error {err:.2e}")
        assert err < 2e-3


def test_one_wan_block_on_the_chip_equals_the_cpu(monkeypatch):
    """A one-block Wan DiT at 2 heads x 128, 1536 video tokens (above the plain-attention size, so the
    chip runs splash), fp32 at the highest precision, against the same program on the host CPU with
    the blockwise kernel."""
    from bench.accelerator.vidax_side import random_tree
    from vidax.zoo.wan.transformer import WanTransformer, WanTransformerConfig

    config = WanTransformerConfig.from_hf_config(dict(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=16, out_channels=16,
        text_dim=64, freq_dim=256, ffn_dim=512, num_layers=1, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024))
    model = WanTransformer(config)
    params = random_tree({p: (s, jnp.float32) for p, s in model.param_shapes().items()})
    rng = np.random.default_rng(3)
    inputs = (rng.standard_normal((1, 16, 3, 32, 64)).astype(np.float32), np.array([700.0], np.float32),
              rng.standard_normal((1, 512, 64)).astype(np.float32))
    from vidax.zoo.parts.dit import forward

    with jax.default_matmul_precision("highest"):
        on_chip = np.asarray(jax.jit(lambda p, *x: forward(model, p, *x))(params, *inputs))
        cpu = jax.devices("cpu")[0]
        monkeypatch.setattr(attention_module, "choose_kernel", lambda q, k, m: "blockwise")
        on_cpu = np.asarray(jax.jit(lambda p, *x: forward(model, p, *x))(jax.device_put(params, cpu),
                                                                          *jax.device_put(inputs, cpu)))
    err = float(np.abs(on_chip - on_cpu).max() / np.abs(on_cpu).max())
    print(f"Wan block, chip vs CPU: max relative error {err:.2e}")
    assert err < 1e-4
