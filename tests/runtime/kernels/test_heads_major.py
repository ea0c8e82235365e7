"""The heads-major TPU attention path (`zoo/compute/kernels/heads_major.py`), run on CPU in Pallas' interpreter:
q/k/v projected straight into `[B, H, S_pad, Dh]`, and the attention sub-block one CFG row at a time, give the
`[B, S, H, D]` program's output (same params) for the Wan block (the one family that takes it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.compute import attention as attention_module
from vidax.zoo.compute import planner
from vidax.zoo.compute.kernels import heads_major

KERNELS = ("splash_interpret", "flash_interpret")


@pytest.fixture
def heads_major_kernel(monkeypatch):
    def use(name):
        monkeypatch.setattr(attention_module, "HEADS_MAJOR_IMPLEMENTATION", name)
    return use


def _wan():
    from vidax.zoo.wan.config import WanTransformerConfig
    from vidax.zoo.wan.transformer import WanTransformer

    cfg = WanTransformerConfig.from_hf_config(dict(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=128, in_channels=4, out_channels=4,
        text_dim=16, freq_dim=32, ffn_dim=64, num_layers=1, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=1e-6, rope_max_seq_len=1024))
    model = WanTransformer(cfg)
    params = model.init_params(jax.random.key(0))
    inputs = (jax.random.normal(jax.random.key(1), (2, 4, 3, 8, 12)), jnp.array([700.0, 300.0]),
              jax.random.normal(jax.random.key(2), (2, 5, 16)))
    return model, params, inputs


@pytest.mark.parametrize("kernel", KERNELS)
def test_heads_major_matches_the_token_major_program(kernel, heads_major_kernel, monkeypatch):
    model, params, inputs = _wan()
    reference = np.asarray(model(params, *inputs))
    heads_major_kernel(kernel)
    monkeypatch.setenv(heads_major.ROWS_ENV, "0")
    whole = np.asarray(model(params, *inputs))
    np.testing.assert_allclose(whole, reference, atol=2e-5 * np.abs(reference).max())
    if kernel != "splash_interpret":  # rows run the same kernel call per row: one kernel shows it (interpret is slow)
        return
    monkeypatch.setenv(heads_major.ROWS_ENV, "1")
    rows = np.asarray(model(params, *inputs))
    np.testing.assert_allclose(rows, whole, atol=1e-6 * np.abs(reference).max())


def test_rows_without_heads_major_keep_the_values(monkeypatch):
    model, params, inputs = _wan()
    reference = np.asarray(model(params, *inputs))
    monkeypatch.setenv(heads_major.ROWS_ENV, "1")
    np.testing.assert_allclose(np.asarray(model(params, *inputs)), reference, atol=1e-6 * np.abs(reference).max())


def test_cpu_programs_stay_token_major(monkeypatch):
    monkeypatch.setenv(heads_major.ROWS_ENV, "auto")
    assert attention_module.heads_major_choice(2, 75600, 75600, 40, 128, jnp.bfloat16) is None
    assert not heads_major.attention_rows(2, 75600, 5120, jnp.bfloat16)


def test_rotation_product_is_the_roll():
    x = jax.random.normal(jax.random.key(0), (1, 2, 5, 128)).astype(jnp.bfloat16)
    angles = jax.random.uniform(jax.random.key(1), (5, 64)) * 6
    cos, sin = jnp.repeat(jnp.cos(angles), 2, -1), jnp.repeat(jnp.sin(angles), 2, -1)
    from vidax.zoo.parts.rope import rotate_interleaved

    token_major = rotate_interleaved(x.transpose(0, 2, 1, 3), cos, sin).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(np.asarray(heads_major.rotate_interleaved(x, cos, sin), np.float32),
                                  np.asarray(token_major, np.float32))


def test_planner_rule_picks_the_720p_cases_only():
    v5e = int(15.75 * 2**30)
    assert planner.attention_by_rows(2, 75600, 5120, 2, v5e)  # Wan2.1-14B 720p
    assert planner.attention_by_rows(2, 113585, 2048, 2, v5e)  # HunyuanVideo-1.5 720p, joint text
    assert not planner.attention_by_rows(2, 32760, 5120, 2, v5e)  # Wan 480p
    assert not planner.attention_by_rows(2, 51275, 2048, 2, v5e)  # HunyuanVideo-1.5 480p
    assert not planner.attention_by_rows(1, 75600, 5120, 2, v5e)


def test_heads_major_only_where_the_token_major_copies_crowd_the_device(monkeypatch):
    """The `[B, S, H, D]` program (the one timed on the chip) wherever it fits; heads-major at the 720p shapes."""
    v5e = int(15.75 * 2**30)
    assert planner.heads_major_needed(2, 75600, 5120, 2, v5e)  # Wan2.1-14B 720p
    assert planner.heads_major_needed(2, 113585, 2048, 2, v5e)  # HunyuanVideo-1.5 720p
    assert not planner.heads_major_needed(2, 32760, 5120, 2, v5e)  # Wan2.1-14B 480p
    assert not planner.heads_major_needed(2, 32760, 1536, 2, v5e)  # Wan2.1-1.3B 480p
    monkeypatch.setattr(attention_module, "choose_kernel", lambda q, k, mask: "splash_interpret")
    monkeypatch.setattr(planner, "device_memory_bytes", lambda: (1, v5e))
    assert attention_module.heads_major_choice(2, 32760, 32760, 40, 128, jnp.bfloat16) is None
    monkeypatch.setenv(attention_module.HEADS_MAJOR_ENV, "1")
    assert attention_module.heads_major_choice(2, 32760, 32760, 40, 128, jnp.bfloat16) is not None
