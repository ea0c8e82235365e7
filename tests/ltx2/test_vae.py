"""LTX-2 video VAE against diffusers `AutoencoderKLLTX2Video`, through the real spec: encode (the
posterior mean), decode (causal and not, timestep-conditioned and not), fp32; whole and tiled (the
reference after `enable_tiling()`, with `use_framewise_decoding` for the temporal windows). The planner's
decode working set is checked against XLA's memory analysis of the compiled tile body of the shipped VAE."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.ltx2.config import VideoVAEConfig
from vidax.zoo.ltx2.decoding.vae import LTX2VideoVAE
from vidax.zoo.parts.vae_tiling import TilePlan, TileSizes

from tests.oracle import unflatten

from .references.ltx2_spec_fixtures import VAE_BLOCK_CONFIGS, official_vae_state, save_diffusers, state_of, vae_reference

ATOL = 5e-5  # fp32 through ~30 convolutions of values ~1-10; observed ~5e-6


@pytest.fixture(scope="module", params=["plain", "timestep"])
def setup(request, tmp_path_factory):
    ref = vae_reference(**({"timestep_conditioning": True} if request.param == "timestep" else {}))
    root = tmp_path_factory.mktemp(f"ltx2_vae_{request.param}")
    save_diffusers(ref, root / "vae")
    vae = LTX2VideoVAE(VideoVAEConfig.from_hf_config(dict(ref.config)))
    params = unflatten(convert(load_spec("ltx2/vae"), root, vae.param_shapes(), dtype="float32"))
    return ref, vae, params


def test_config_ratios(setup):
    ref, vae, _ = setup
    assert (vae.cfg.spatial_ratio, vae.cfg.temporal_ratio) == (ref.spatial_compression_ratio,
                                                                ref.temporal_compression_ratio)


def test_encode(setup):
    ref, vae, params = setup
    video = torch.randn(2, 3, 9, 32, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = ref.encode(video).latent_dist.mode().numpy()
    got = np.asarray(jax.jit(vae.encode)(params, jnp.asarray(video.numpy())))
    assert got.shape == want.shape == (2, 8, 2, 2, 3)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_decode(setup, causal):
    ref, vae, params = setup
    z = torch.randn(2, 8, 3, 2, 3, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0.05, 0.5]) if vae.cfg.timestep_conditioning else None
    with torch.no_grad():
        want = ref.decode(z, t, causal=causal).sample.numpy()
    got = np.asarray(jax.jit(vae.decode, static_argnums=3)(params, jnp.asarray(z.numpy()),
                                                            None if t is None else jnp.asarray(t.numpy()), causal))
    assert got.shape == want.shape == (2, 3, 17, 32, 48)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def test_official_layout_converts_to_the_same_tree(setup, tmp_path):
    ref, vae, params = setup
    from safetensors.torch import save_file

    save_file(official_vae_state(state_of(ref)), tmp_path / "ltx-2-19b-dev.safetensors")
    tree = unflatten(convert(load_spec("ltx2/vae"), tmp_path, vae.param_shapes(), dtype="float32"))
    jax.tree.map(np.testing.assert_array_equal, tree, params)


@pytest.fixture(scope="module", params=list(VAE_BLOCK_CONFIGS))
def block_config(request, tmp_path_factory):
    ref = vae_reference(seed=5, **VAE_BLOCK_CONFIGS[request.param])
    root = tmp_path_factory.mktemp(f"ltx2_vae_{request.param}")
    save_diffusers(ref, root / "vae")
    vae = LTX2VideoVAE(VideoVAEConfig.from_hf_config(dict(ref.config)))
    params = unflatten(convert(load_spec("ltx2/vae"), root, vae.param_shapes(), dtype="float32"))
    return ref, vae, params


def test_block_configurations_match_diffusers(block_config):
    """Encode and decode of each `VAE_BLOCK_CONFIGS` VAE (per-block settings that differ from
    block to block) against diffusers."""
    ref, vae, params = block_config
    sr, tr = vae.cfg.spatial_ratio, vae.cfg.temporal_ratio
    assert (sr, tr) == (ref.spatial_compression_ratio, ref.temporal_compression_ratio)
    video = torch.rand(1, 3, 1 + 2 * tr, 2 * sr, 3 * sr, generator=torch.Generator().manual_seed(6)) * 2 - 1
    with torch.no_grad():
        want = ref.encode(video).latent_dist.mode().numpy()
    got = np.asarray(jax.jit(vae.encode)(params, jnp.asarray(video.numpy())))
    assert got.shape == want.shape == (1, 8, 3, 2, 3)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)
    z = torch.randn(1, 8, 3, 2, 3, generator=torch.Generator().manual_seed(7))
    t = torch.tensor([0.3]) if vae.cfg.timestep_conditioning else None
    with torch.no_grad():  # non-causal (the configs'); test_decode covers both
        want = ref.decode(z, t).sample.numpy()
    got = np.asarray(jax.jit(vae.decode)(params, jnp.asarray(z.numpy()), None if t is None else jnp.asarray(t.numpy())))
    assert got.shape == want.shape == (1, 3, 1 + 2 * tr, 2 * sr, 3 * sr)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


# diffusers' tiling at the tiny VAE's scale (16 px, 8 frames a latent): 48-px tiles every 32 px (3 latents
# every 2, 16-px cross-fades), 16-frame windows every 8. The latents make 3 x 4 tiles, the last row and
# column cut to 2 latents (the reference's reflect padding cannot take a 1-latent tile), in 3 windows.
TILES = dict(tile_sample_min_height=48, tile_sample_min_width=48, tile_sample_min_num_frames=16,
             tile_sample_stride_height=32, tile_sample_stride_width=32, tile_sample_stride_num_frames=8)
LATENT_GRID = (4, 6, 8)  # 25 frames of 96 x 128 pixels


def _tiles(temporal: bool) -> TileSizes:
    return TileSizes(48, 48, 16, 32, 32, 8, temporal=temporal)


def _reference_tiled(ref, temporal: bool, run):
    ref.enable_tiling(**TILES)
    ref.use_framewise_decoding = temporal
    try:
        with torch.no_grad():
            return run()
    finally:
        ref.use_tiling = ref.use_framewise_decoding = False


@pytest.mark.parametrize("causal, temporal", [(False, True), (True, False)], ids=["noncausal", "causal-spatial"])
def test_tiled_decode(setup, causal, temporal):
    from vidax.zoo.ltx2.decoding.vae import _decode_tile

    ref, vae, params = setup
    plan = TilePlan(LATENT_GRID, _tiles(temporal), 16, 8)
    _, rows, cols = plan.axes
    assert (len(rows.starts), len(cols.starts), len(plan.chunks())) == (3, 4, 3 if temporal else 1)
    z = torch.randn(1, 8, *LATENT_GRID, generator=torch.Generator().manual_seed(2))
    t = torch.tensor([0.05]) if vae.cfg.timestep_conditioning else None
    want = _reference_tiled(ref, temporal, lambda: ref.decode(z, t, causal=causal).sample.numpy())
    compiled = _decode_tile.jitted._cache_size()
    got = vae.decode(params, jnp.asarray(z.numpy()), None if t is None else jnp.asarray(t.numpy()), causal,
                     tiling=_tiles(temporal))
    assert _decode_tile.jitted._cache_size() == compiled + 1  # every tile, edge tiles too: one compiled body
    assert got.shape == want.shape == (1, 3, 25, 96, 128)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def test_tiled_encode(setup):
    ref, vae, params = setup
    video = torch.rand(1, 3, 33, 96, 112, generator=torch.Generator().manual_seed(3)) * 2 - 1
    want = _reference_tiled(ref, True, lambda: ref.encode(video).latent_dist.mode().numpy())
    got = vae.encode(params, jnp.asarray(video.numpy()), tiling=_tiles(True))
    assert got.shape == want.shape == (1, 8, 5, 6, 7)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-4)


def test_decode_working_set_matches_xla():
    """The planner's VAE term: `decode_peak_bytes` of LTX-2.5's VAE (real widths) on a small tile, against
    XLA's memory analysis of the compiled tile body (abstract: nothing runs); the default tiles at 704 x
    1216 x 121 far below the whole video's."""
    from vidax.translator import load_registry
    from vidax.zoo.ltx2.decoding.vae import _decode_tile, decode_peak_bytes

    cfg = VideoVAEConfig.from_hf_config(load_registry()["ltx-2.5"].config["vae"])
    params = jax.eval_shape(LTX2VideoVAE(cfg).init_params, jax.random.key(0))
    body = (3, 4, 4)  # latent frames, rows, columns: 17 x 128 x 128 pixels
    spec = lambda *shape, dtype=jnp.float32: jax.ShapeDtypeStruct(shape, dtype)  # noqa: E731
    ints = spec(3, dtype=jnp.int32)
    compiled = _decode_tile.jitted.lower(cfg, cfg.decoder_causal, body, params, spec(1, *body, 128), ints, ints,
                                         None).compile().memory_analysis()
    measured = compiled.temp_size_in_bytes + compiled.output_size_in_bytes
    predicted = decode_peak_bytes(cfg, 17, 128, 128)
    assert abs(predicted - measured) <= 0.15 * measured, (predicted / 2**20, measured / 2**20)
    tiled = decode_peak_bytes(cfg, 121, 704, 1216, TileSizes())
    one_tile = 17 * 512 * 512 * 3 * 4  # a second tile's output: the next tile runs while the host stitches
    assert tiled == decode_peak_bytes(cfg, 17, 512, 512) + one_tile < decode_peak_bytes(cfg, 121, 704, 1216) / 20


def test_memory_job_counts_the_vae_tiles(tmp_path, monkeypatch):
    """LTX-2.5 at 704 x 1216 x 121 from the registry alone: the decode is tiled by default (as Lightricks'
    pipelines), one padded tile in the planner's VAE term; --no-vae-tiling counts the whole video."""
    import huggingface_hub.constants

    from vidax.zoo.ltx2.decoding.vae import decode_peak_bytes
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))

    def job(**extra):
        options = GenerateOptions(model="ltx-2.5", prompt="", extra=extra)
        family = make_pipeline(options.model, options)
        return family.memory_job(options).vae_peak_activation_bytes, family.model.vae

    tiled, cfg = job()
    assert tiled == job(vae_tiling=True)[0] == decode_peak_bytes(cfg, 121, 704, 1216, TileSizes()) < 1e9
    assert job(vae_tiling=False)[0] == decode_peak_bytes(cfg, 121, 704, 1216) > 20 * tiled
