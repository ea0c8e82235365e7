"""LTX-2.5's diffusion decoder against diffusers `LTX2VideoDiffusionDecoderModel` (its FlexAttention
processor), through the real spec: one x0 step as released and a two-step Euler decode, with the
same host noise; and the blocked neighborhood attention against a dense masked reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from vidax.translator import convert, load_spec
from vidax.zoo.compute.attention import neighborhood_attention
from vidax.zoo.ltx2.config import DiffusionDecoderConfig
from vidax.zoo.ltx2.decoding.diffusion_decoder import LTX2DiffusionDecoder

from tests.oracle import unflatten

from .references.ltx2_spec_fixtures import diffusion_decoder_reference, save_diffusers

ATOL = 5e-5  # fp32 through 11 attention/SwiGLU blocks of values ~1-10; observed ~3e-6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = diffusion_decoder_reference()
    root = tmp_path_factory.mktemp("ltx2_diffusion_decoder")
    save_diffusers(ref, root / "vae_diffusion")
    cfg = DiffusionDecoderConfig.from_hf_config(dict(ref.config))
    decoder = LTX2DiffusionDecoder(cfg, block=(2, 4, 4), blocks_per_step=2)  # several query blocks per grid
    params = unflatten(convert(load_spec("ltx2/diffusion_decoder"), root, decoder.param_shapes(), dtype="float32"))
    return ref, decoder, params


@pytest.mark.parametrize("steps", [1, 2])
def test_decode(setup, steps):
    ref, decoder, params = setup
    z = torch.randn(1, 8, 2, 3, 3, generator=torch.Generator().manual_seed(0))
    shape = decoder.noise_shape(tuple(z.shape))
    noise = torch.randn(shape, generator=torch.Generator().manual_seed(7))  # what randn_tensor draws first
    with torch.no_grad():
        want = ref.decode(z, generator=torch.Generator().manual_seed(7), num_inference_steps=steps).sample.numpy()
    got = np.asarray(decoder.decode(params, jnp.asarray(z.numpy()), jnp.asarray(noise.numpy()), steps))
    assert got.shape == want.shape == shape
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def dense_neighborhood(q, k, v, kernel):
    """Every query against every key, masked to its inward-shifted window (diffusers' mask_mod)."""
    b, *grid, h, d = q.shape
    pos = np.stack(np.meshgrid(*[np.arange(n) for n in grid], indexing="ij"), -1).reshape(-1, 3)
    start = np.clip(pos - np.array(kernel) // 2, 0, np.array(grid) - np.array(kernel))
    mask = np.all((pos[None] >= start[:, None]) & (pos[None] < start[:, None] + np.array(kernel)), -1)
    logits = np.einsum("bqhd,bkhd->bhqk", q.reshape(b, -1, h, d), k.reshape(b, -1, h, d))
    logits = np.where(mask[None, None], logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v.reshape(b, -1, h, d)).reshape(q.shape)


@pytest.mark.parametrize("grid,kernel,block", [((5, 7, 9), (3, 3, 5), (2, 4, 4)), ((3, 11, 12), (3, 11, 11), (4, 8, 8))])
def test_neighborhood_attention_equals_dense(grid, kernel, block):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, *grid, 2, 4)).astype(np.float32) for _ in range(3))
    got = jax.jit(lambda q, k, v: neighborhood_attention(q, k, v, kernel, block=block, blocks_per_step=3))(q, k, v)
    np.testing.assert_allclose(np.asarray(got), dense_neighborhood(q, k, v, kernel), atol=1e-5, rtol=1e-5)


def test_bf16_decode_stays_near_fp32(setup):
    """bf16 weights and activations (the accelerator setting) trace and land near the fp32 result."""
    _, decoder, params = setup
    bf16 = LTX2DiffusionDecoder(decoder.cfg, dtype=jnp.bfloat16, block=(2, 4, 4), blocks_per_step=2)
    z = jax.random.normal(jax.random.key(0), (1, 8, 2, 3, 3))
    noise = jax.random.normal(jax.random.key(1), decoder.noise_shape(z.shape))
    want = np.asarray(decoder.decode(params, z, noise))
    got = np.asarray(bf16.decode(jax.tree.map(lambda a: a.astype(jnp.bfloat16), params), z, noise), np.float32)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    # bf16 keeps ~3 significant digits through 11 blocks: a few percent of the output range
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
