"""HunyuanVideo-1.5 VAE against diffusers `AutoencoderKLHunyuanVideo15`, through the real spec.

Encode (posterior moments), plain decode, and tiled decode with the reference's cross-fade, on a
tiny perturbed reference saved in the diffusers `vae/` layout.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.hunyuan_video15 import VAEConfig
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

from tests.oracle import save_diffusers, to_np, unflatten

from .hunyuan_spec_fixtures import vae_reference

TILE = 32  # pixels: latent tiles of 2 with stride 1, so a 3x4 latent decodes as 12 blended tiles
ATOL = 2e-5  # fp32 through ~30 convolutions; observed max error ~3e-6


@pytest.fixture(scope="module")
def reference():
    return vae_reference()


@pytest.fixture(scope="module")
def vae(reference):
    return HunyuanVideo15VAE(VAEConfig.from_hf_config({**dict(reference.config), "tile_sample_min_size": TILE}))


@pytest.fixture(scope="module")
def params(reference, vae, tmp_path_factory):
    root = tmp_path_factory.mktemp("hv15_vae")
    save_diffusers(reference, root / "vae")
    return unflatten(convert(load_spec("hunyuan_video15/vae"), root, vae.param_shapes()))


def test_encode(reference, vae, params):
    video = torch.randn(1, 3, 5, 32, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = to_np(reference.encode(video).latent_dist.parameters)
    ours = np.asarray(vae.encode(params, jnp.asarray(to_np(video))))
    assert ours.shape == expected.shape == (1, 8, 2, 2, 3)
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("tiling", [False, True], ids=["whole", "tiled"])
def test_decode(reference, vae, params, tiling):
    latents = torch.randn(1, 4, 2, 3, 4, generator=torch.Generator().manual_seed(1))
    reference.use_tiling = False
    if tiling:
        reference.enable_tiling(tile_sample_min_height=TILE, tile_sample_min_width=TILE,
                                tile_latent_min_height=TILE // 16, tile_latent_min_width=TILE // 16)
    with torch.no_grad():
        expected = to_np(reference.decode(latents).sample)
    ours = np.asarray(vae.decode(params, jnp.asarray(to_np(latents)), tiling=tiling))
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("latent_frames", [3, 5])
def test_decode_peak_prediction_matches_xla(latent_frames):
    """The planner's VAE term: the widest decoder stage of the shipped VAE (real channel widths) on one
    256-px tile, against XLA's own memory analysis of that compiled stage (abstract: nothing runs)."""
    import jax

    from vidax.zoo.hunyuan_video15.vae import decode_peak_bytes, decoder_stages, widest_stage_bytes
    from vidax.zoo.parts.vae_layers import _stage_params

    cfg = VAEConfig()
    params = jax.eval_shape(HunyuanVideo15VAE(cfg).init_params, jax.random.key(0))["decoder"]
    tile = cfg.tile_latent_min_size
    x = jax.ShapeDtypeStruct((1, latent_frames, tile, tile, cfg.latent_channels), jnp.float32)
    widest = 0
    for key, module in decoder_stages(cfg):
        run = jax.jit(lambda p, x, m=module: m.apply({"params": p}, x))
        stage = run.lower(_stage_params(params, key), x).compile().memory_analysis()
        weights = sum(np.prod(a.shape) * 4 for a in jax.tree.leaves(_stage_params(params, key)))
        widest = max(widest, stage.argument_size_in_bytes - weights + stage.temp_size_in_bytes + stage.output_size_in_bytes)
        x = jax.eval_shape(run, _stage_params(params, key), x)
    frames, size = x.shape[1], x.shape[2]
    assert size == cfg.tile_sample_min_size
    predicted = widest_stage_bytes(cfg, frames, size, size)
    assert abs(predicted - widest) <= 0.15 * widest, (predicted / 2**20, widest / 2**20)
    assert decode_peak_bytes(cfg, frames, 720, 1280) > predicted  # the tiles held for the blend come on top
