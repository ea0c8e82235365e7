"""HunyuanVideo 1.0 VAE against diffusers `AutoencoderKLHunyuanVideo` through the real spec (both file
layouts): encode of an image (the I2V path) with spatial tiles, decode through the reference's
temporal windows (always on past 4 latent frames) and with spatial tiles. Tile sizes are shrunk through
the same knobs as diffusers' `enable_tiling(...)` so that tiny videos cross tile borders."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert
from vidax.translator.testing import mismatches
from vidax.zoo.hunyuan_video.config import VAEConfig
from vidax.zoo.hunyuan_video.vae import HunyuanVideoVAE

from tests.oracle import save_state, to_np, unflatten

from .hunyuan_video_spec_fixtures import save_official_vae, vae_reference

ATOL = 2e-5  # fp32 through ~20 convolutions; observed max error ~1e-5 on outputs of order 1
SMALL_TILES = dict(tile_sample_min_size=64, tile_sample_stride=48)  # 8-latent tiles every 6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ref = vae_reference()
    root = tmp_path_factory.mktemp("hv_vae")
    save_state(ref.state_dict(), root / "diffusers" / "vae", dict(ref.config))
    save_official_vae(ref.state_dict(), root / "official")
    vae = HunyuanVideoVAE(VAEConfig.from_hf_config(dict(ref.config)))
    tree = convert("hunyuan_video/vae", root / "diffusers", vae.param_shapes(), dtype="float32")
    official = convert("hunyuan_video/vae", root / "official", vae.param_shapes(), dtype="float32")
    assert mismatches(official, tree) == []
    return ref, vae, unflatten(tree)


def tiled_reference(ref):
    ref.enable_tiling(tile_sample_min_height=64, tile_sample_min_width=64, tile_sample_stride_height=48,
                      tile_sample_stride_width=48)
    return ref


def test_encode_image_with_spatial_tiles(setup):
    """The I2V image latent: one frame, larger than a tile; the posterior mode as the pipeline takes it."""
    ref, vae, params = setup
    image = torch.rand(1, 3, 1, 48, 96, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        expected = tiled_reference(ref).encode(image).latent_dist.mode()
    ref.disable_tiling()
    tiled = HunyuanVideoVAE(dataclasses.replace(vae.cfg, **SMALL_TILES))
    ours = tiled.latent_mode(params, jnp.asarray(to_np(image)), tiling=True)
    assert ours.shape == (1, 4, 1, 6, 12)  # one row of two tiles (64 and 48 px wide)
    np.testing.assert_allclose(np.asarray(ours), to_np(expected), atol=ATOL, rtol=1e-5)


def test_encode_video_temporal_windows(setup):
    ref, vae, params = setup
    video = torch.rand(1, 3, 21, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        expected = ref.encode(video).latent_dist.parameters
    np.testing.assert_allclose(np.asarray(vae.encode(params, jnp.asarray(to_np(video)))), to_np(expected),
                               atol=ATOL, rtol=1e-5)


def test_decode_temporal_windows(setup):
    """7 latent frames: windows at 0, 3, 6 (5, 4 and 1 frames), cross-faded over 4 output frames."""
    ref, vae, params = setup
    z = torch.randn(1, 4, 7, 4, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = ref.decode(z).sample
    ours = np.asarray(vae.decode(params, jnp.asarray(to_np(z))))
    assert ours.shape == (1, 3, 25, 32, 32)
    np.testing.assert_allclose(ours, to_np(expected), atol=ATOL, rtol=1e-5)


def test_decode_spatial_tiles(setup):
    ref, vae, params = setup
    z = torch.randn(1, 4, 2, 6, 12, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = tiled_reference(ref).decode(z).sample
    ref.disable_tiling()
    tiled = HunyuanVideoVAE(dataclasses.replace(vae.cfg, **SMALL_TILES))
    ours = np.asarray(tiled.decode(params, jnp.asarray(to_np(z)), tiling=True))
    assert ours.shape == (1, 3, 5, 48, 96)  # one row of two tiles (8 and 6 latents wide)
    np.testing.assert_allclose(ours, to_np(expected), atol=ATOL, rtol=1e-5)
    untiled = np.asarray(vae.decode(params, jnp.asarray(to_np(z))))
    assert np.abs(untiled - ours).max() > 1e-4  # the tiles (and their cross-fade) really happened
