"""CogVideoX VAE against diffusers `AutoencoderKLCogVideoX`, through the real spec `cogvideox/vae`.

A tiny perturbed reference (4 levels, GroupNorm of 4 groups) decodes an odd latent count (first
batch of 3 latent frames, then 2) and an even one (4 frames per latent), encodes one frame (I2V) and
9 frames (a first batch of 9), tiled and untiled, in fp32; decode also under a mesh. Shapes are
chosen so that few distinct batch shapes compile (each costs seconds on CPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import traverse_util
from vidax.translator import convert, load_spec
from vidax.zoo.cogvideox.config import CogVideoXVAEConfig
from vidax.zoo.cogvideox.vae import (
    VAE_RULES,
    CogVideoXVAE,
    CogVideoXVAEError,
    Tiling,
    frame_batches,
)
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.runtime import use_mesh
from vidax.zoo.compute.sharding import place

from tests.oracle import save_diffusers

from . import cogvideox_spec_fixtures as fx

ATOL = 2e-5  # fp32 through ~40 convolutions and GroupNorms; observed ~6e-6 on outputs of magnitude ~6


@pytest.fixture(scope="module")
def vae(tmp_path_factory):
    ref = fx.vae_reference()
    root = tmp_path_factory.mktemp("vae")
    save_diffusers(ref, root / "vae")
    ours = CogVideoXVAE(CogVideoXVAEConfig.from_hf_config(fx.config_json(ref)))
    tree = convert(load_spec("cogvideox/vae"), root, ours.param_shapes())
    return ref, ours, tree, jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))


def test_frame_batches_follow_the_reference():
    assert frame_batches(13, 2) == [(0, 3), (3, 5), (5, 7), (7, 9), (9, 11), (11, 13)]
    assert frame_batches(4, 2) == [(0, 2), (2, 4)]
    assert frame_batches(1, 2) == [(0, 3)]  # one batch, sliced past the end as the reference does
    assert frame_batches(9, 8) == [(0, 9)]


def test_decode_matches_reference(vae):
    """5 latent frames: a first batch of 3 (9 frames), then one of 2 (8 frames) with the caches carried."""
    ref, ours, _, params = vae
    z = torch.randn(1, 4, 5, 6, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = ref.decode(z).sample.numpy()
    got = np.asarray(ours.decode(params, jnp.asarray(z.numpy())))
    assert got.shape == want.shape == (1, 3, 17, 48, 64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=ATOL)


def test_even_decode_matches_reference_on_one_device_and_a_mesh(vae):
    """An even latent count gives 4 frames per latent; under a mesh the activations split along
    their width (VAE_RULES) and GroupNorm reduces across devices."""
    ref, ours, tree, params = vae
    z = torch.randn(1, 4, 2, 6, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ref.decode(z).sample.numpy()
    got = np.asarray(ours.decode(params, jnp.asarray(z.numpy())))
    assert got.shape == want.shape == (1, 3, 8, 48, 64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=ATOL)
    mesh = make_mesh(dp=2, tp=2, sp=2)
    placed = place(tree, ours.logical_specs(), VAE_RULES, mesh)
    with use_mesh(mesh, VAE_RULES):
        sharded = np.asarray(ours.decode(placed, jnp.asarray(z.numpy())))
    np.testing.assert_allclose(sharded, got, rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize("frames", [1, 9])
def test_encode_matches_reference(vae, frames):
    ref, ours, _, params = vae
    x = torch.rand(1, 3, frames, 48, 64, generator=torch.Generator().manual_seed(frames)) * 2 - 1
    with torch.no_grad():
        want = ref.encode(x).latent_dist.parameters.numpy()
    got = np.asarray(ours.encode_moments(params, jnp.asarray(x.numpy())))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=ATOL)


def test_tiled_decode_and_encode_match_reference(vae):
    """diffusers' `enable_tiling` with tiles smaller than the input: overlapping tiles, each blended
    in place with the (already blended) tiles above and to the left. Decode: a 2 x 2 grid of latent
    tiles (3 x 4, stride 2 x 3); encode: one row of 2 pixel tiles (24 x 32, stride 25)."""
    ref, ours, _, params = vae
    ref.enable_tiling(tile_sample_min_height=24, tile_sample_min_width=32)
    try:
        gen = torch.Generator().manual_seed(7)
        z = torch.randn(1, 4, 2, 4, 5, generator=gen)
        x = torch.rand(1, 3, 1, 16, 40, generator=gen) * 2 - 1
        with torch.no_grad():
            want_video = ref.decode(z).sample.numpy()
            want_moments = ref.encode(x).latent_dist.parameters.numpy()
    finally:
        ref.disable_tiling()
    tiling = Tiling(24, 32)
    np.testing.assert_allclose(np.asarray(ours.decode(params, jnp.asarray(z.numpy()), tiled=tiling)), want_video,
                               rtol=1e-5, atol=ATOL)
    np.testing.assert_allclose(np.asarray(ours.encode_moments(params, jnp.asarray(x.numpy()), tiled=tiling)),
                               want_moments, rtol=1e-5, atol=ATOL)
    assert Tiling.default(ours.cfg) == Tiling(24, 32)  # half the config's sample size, as diffusers


def test_bad_inputs_are_clear_errors(vae):
    _, ours, _, params = vae
    with pytest.raises(CogVideoXVAEError, match="multiples of 8"):
        ours.encode_moments(params, jnp.zeros((1, 3, 1, 44, 64)))
    with pytest.raises(CogVideoXVAEError, match="1, 8k or 8k"):
        ours.encode_moments(params, jnp.zeros((1, 3, 5, 48, 64)))
