"""LTX-Video VAE against diffusers `AutoencoderKLLTXVideo`, through the real spec, for the three generations.

Encode (posterior moments) and decode of tiny perturbed references saved in the diffusers `vae/` layout:
0.9.0 (no timestep conditioning), 0.9.1 (timestep-conditioned decoder with injected noise: the maps are
drawn from a seeded torch RNG in the reference's order and passed in) and 0.9.5+ (space-to-depth encoder,
timestep-conditioned decoder: the VAE of every 0.9.5 - 0.9.8 checkpoint), whole and tiled (the reference
after `enable_tiling()`, with `use_framewise_decoding` for the temporal windows). The official header
configs (block lists) must read back as the diffusers configs. The planner's decode working set is
checked against XLA's memory analysis of the compiled tile body of the shipped VAE.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.zoo.ltx_video.config import LTXConfigError, VAEConfig
from vidax.zoo.ltx_video.vae import LTXVideoVAE, decoder_noise_shapes
from vidax.zoo.parts.vae_tiling import TilePlan, TileSizes

from .references.helpers import load_params, to_np
from .references.ltx_spec_fixtures import OFFICIAL_VAE_CONFIGS, TINY_VAES, VAE_BLOCK_CONFIGS, diffusers_config, save, vae_reference

ATOL = 2e-5  # fp32 through ~40 convolutions with RMS norms; observed max error ~2e-6
VERSIONS = sorted(TINY_VAES)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Per generation (on first use): reference, our VAE, converted params."""
    cache = {}

    def get(version):
        if version not in cache:
            ref = vae_reference(version)
            root = tmp_path_factory.mktemp(f"ltx_vae_{version}")
            save(ref.state_dict(), root / "vae", diffusers_config(ref, "AutoencoderKLLTXVideo"))
            vae = LTXVideoVAE(VAEConfig.from_hf_config(dict(ref.config)))
            cache[version] = (ref, vae, load_params("ltx_video/vae", root, vae.param_shapes()))
        return cache[version]

    return get


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_matches_reference(built, version):
    ref, vae, params = built(version)
    video = torch.rand(2, 3, 9, 64, 96, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        expected = to_np(ref.encode(video).latent_dist.parameters)
    ours = np.asarray(vae.encode(params, jnp.asarray(to_np(video))))
    assert ours.shape == expected.shape == (2, 16, 2, 2, 3)
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_matches_reference(built, version):
    ref, vae, params = built(version)
    latents = torch.randn(2, 8, 2, 2, 3, generator=torch.Generator().manual_seed(1))
    timestep = torch.tensor([0.05, 0.4]) if vae.cfg.timestep_conditioning else None
    shapes = decoder_noise_shapes(vae.cfg, 2, 3)
    assert bool(shapes) == (version == "0.9.1")  # only 0.9.1 injects noise
    torch.manual_seed(7)  # the reference draws its noise maps from the global RNG, in forward order
    noise = [torch.randn(shape) for shape in shapes]
    torch.manual_seed(7)
    with torch.no_grad():
        expected = to_np(ref.decode(latents, timestep).sample)
    ours = np.asarray(vae.decode(params, jnp.asarray(to_np(latents)),
                                 None if timestep is None else jnp.asarray(to_np(timestep)),
                                 [jnp.asarray(to_np(n)) for n in noise]))
    assert ours.shape == expected.shape == (2, 3, 9, 64, 96)
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("name", list(VAE_BLOCK_CONFIGS))
def test_block_configurations_match_reference(built, name):
    """Encode and decode of each `VAE_BLOCK_CONFIGS` VAE (per-block lists read as diffusers reads them)."""
    ref, vae, params = built(name)
    assert (vae.cfg.spatial_ratio, vae.cfg.temporal_ratio) == (ref.spatial_compression_ratio,
                                                               ref.temporal_compression_ratio) == (32, 8)
    video = torch.rand(1, 3, 9, 64, 96, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        expected = to_np(ref.encode(video).latent_dist.parameters)
    ours = np.asarray(vae.encode(params, jnp.asarray(to_np(video))))
    assert ours.shape == expected.shape == (1, 16, 2, 2, 3)
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)
    latents = torch.randn(1, 8, 2, 2, 3, generator=torch.Generator().manual_seed(1))
    timestep = torch.tensor([0.3])
    assert decoder_noise_shapes(vae.cfg, 2, 3) == []
    with torch.no_grad():
        expected = to_np(ref.decode(latents, timestep).sample)
    ours = np.asarray(vae.decode(params, jnp.asarray(to_np(latents)), jnp.asarray(to_np(timestep)), []))
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


# diffusers' tiling at the tiny VAEs' scale (32 px, 8 frames a latent): 96-px tiles every 64 px (3 latents
# every 2, 32-px cross-fades), 16-frame windows every 8 (3 latent frames every 1, 8-frame cross-fades). The
# latents below make 3 x 3 spatial tiles (the last row and column cut short: 1 and 2 latents) in 3 windows.
TILES = dict(tile_sample_min_height=96, tile_sample_min_width=96, tile_sample_min_num_frames=16,
             tile_sample_stride_height=64, tile_sample_stride_width=64, tile_sample_stride_num_frames=8)
LATENT_GRID = (4, 5, 6)  # 25 frames of 160 x 192 pixels
VIDEO_GRID = (33, 160, 192)  # encode: 4 windows (the fifth, one frame, keeps nothing) of 3 x 3 tiles


def _tiles(temporal: bool) -> TileSizes:
    return TileSizes(*(TILES[k] for k in ("tile_sample_min_height", "tile_sample_min_width",
                                          "tile_sample_min_num_frames", "tile_sample_stride_height",
                                          "tile_sample_stride_width", "tile_sample_stride_num_frames")),
                     temporal=temporal)


def _tiled(ref, temporal: bool):
    """The reference with tiling on (restored by the caller: the module's references are shared)."""
    ref.enable_tiling(**TILES)
    ref.use_framewise_decoding = temporal
    return ref


def _untile(ref):
    ref.use_tiling = ref.use_framewise_decoding = False


# Spatial tiles alone (`enable_tiling()` without frame-wise decoding) run the same tiler: tests/ltx2/test_vae.py.
# "temporal": 3 latent frames of one tile's size: the first window is the whole clip, yet the second (2
# frames) still fades in.
@pytest.mark.parametrize("version, grid", [("0.9.0", LATENT_GRID), ("0.9.1", LATENT_GRID), ("0.9.5", LATENT_GRID),
                                           ("0.9.5", (3, 2, 3))], ids=["0.9.0", "0.9.1-noise", "0.9.5", "0.9.5-temporal"])
def test_tiled_decode_matches_reference(built, version, grid):
    from vidax.zoo.ltx_video.vae import _decode_tile

    ref, vae, params = built(version)
    temporal = True
    plan = TilePlan(grid, _tiles(temporal), 32, 8)
    _, rows, cols = plan.axes
    spatial = 1 if grid[1:] == (2, 3) else 3
    assert (len(rows.starts), len(cols.starts), len(plan.chunks())) == (spatial, spatial, grid[0] - 1)
    latents = torch.randn(1, 8, *grid, generator=torch.Generator().manual_seed(2))
    timestep = torch.tensor([0.05]) if vae.cfg.timestep_conditioning else None
    torch.manual_seed(7)  # 0.9.1: every tile draws its own noise maps from the global RNG, tile by tile
    try:
        with torch.no_grad():
            expected = to_np(_tiled(ref, temporal).decode(latents, timestep).sample)
    finally:
        _untile(ref)
    torch.manual_seed(7)
    drawn = []

    def noise(k, shape):
        drawn.append(k)
        return to_np(torch.randn(shape))

    compiled = _decode_tile.jitted._cache_size()
    ours = vae.decode(params, jnp.asarray(to_np(latents)), None if timestep is None else jnp.asarray(to_np(timestep)),
                      noise, tiling=_tiles(temporal))
    assert _decode_tile.jitted._cache_size() == compiled + 1  # every tile, edge tiles too: one compiled body
    assert drawn == list(range(len(drawn))) and bool(drawn) == (version == "0.9.1")
    assert ours.shape == expected.shape == (1, 3, 8 * grid[0] - 7, 32 * grid[1], 32 * grid[2])
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("version, temporal", [("0.9.0", True), ("0.9.5", False)], ids=["0.9.0", "0.9.5-spatial"])
def test_tiled_encode_matches_reference(built, version, temporal):
    ref, vae, params = built(version)
    frames = VIDEO_GRID[0] if temporal else 9
    video = torch.rand(1, 3, frames, *VIDEO_GRID[1:], generator=torch.Generator().manual_seed(3)) * 2 - 1
    try:
        with torch.no_grad():
            expected = to_np(_tiled(ref, temporal).encode(video).latent_dist.parameters)
    finally:
        _untile(ref)
    ours = vae.encode(params, jnp.asarray(to_np(video)), tiling=_tiles(temporal))
    assert ours.shape == expected.shape == (1, 16, (frames - 1) // 8 + 1, 5, 6)
    np.testing.assert_allclose(ours, expected, atol=ATOL, rtol=1e-5)


def test_decode_working_set_matches_xla():
    """The planner's VAE term: `decode_peak_bytes` of the shipped 0.9.5+ VAE (real widths) on a small tile,
    against XLA's memory analysis of the compiled tile body (abstract: nothing runs), and the default tiles
    at the 13B second pass (896 x 1600 x 121) far below the whole video's."""
    import jax

    from vidax.translator import load_registry
    from vidax.zoo.ltx_video.vae import _decode_tile, decode_peak_bytes

    cfg = VAEConfig.from_hf_config(load_registry()["ltx-video-13b"].config["vae"])
    vae = LTXVideoVAE(cfg)
    params = jax.eval_shape(vae.init_params, jax.random.key(0))["decoder"]
    body = (3, 4, 4)  # latent frames, rows, columns: 17 x 128 x 128 pixels
    spec = lambda *shape, dtype=jnp.float32: jax.ShapeDtypeStruct(shape, dtype)  # noqa: E731
    ints = spec(3, dtype=jnp.int32)
    compiled = _decode_tile.jitted.lower(vae, body, params, spec(1, *body, 128), ints, ints, spec(1),
                                         ()).compile().memory_analysis()
    measured = compiled.temp_size_in_bytes + compiled.output_size_in_bytes
    predicted = decode_peak_bytes(cfg, 17, 128, 128)
    assert abs(predicted - measured) <= 0.15 * measured, (predicted / 2**20, measured / 2**20)
    whole = decode_peak_bytes(cfg, 121, 896, 1600)
    tiled = decode_peak_bytes(cfg, 121, 896, 1600, TileSizes())
    one_tile = 17 * 512 * 512 * 3 * 4  # a second tile's output: the next tile runs while the host stitches
    assert tiled == decode_peak_bytes(cfg, 17, 512, 512) + one_tile and tiled < whole / 30


def test_decode_timestep_matters(built):
    """The conditioned decoder reads the timestep (a dead time path would pass the parity test at one t)."""
    _, vae, params = built("0.9.5")
    z = jnp.asarray(np.random.default_rng(0).normal(size=(1, 8, 2, 2, 3)), jnp.float32)
    a = vae.decode(params, z, jnp.array([0.0]))
    b = vae.decode(params, z, jnp.array([0.5]))
    assert np.abs(np.asarray(a - b)).max() > 1e-3


def test_bad_calls_are_clear_errors(built):
    _, vae, params = built("0.9.5")
    with pytest.raises(ValueError, match="8k\\+1"):
        vae.encode(params, jnp.zeros((1, 3, 8, 64, 64)))
    with pytest.raises(ValueError, match="decode timestep"):
        vae.decode(params, jnp.zeros((1, 8, 2, 2, 2)))
    _, vae091, params091 = built("0.9.1")
    with pytest.raises(ValueError, match="noise maps"):
        vae091.decode(params091, jnp.zeros((1, 8, 2, 2, 2)), jnp.zeros((1,)))


# --- configs ---------------------------------------------------------------------------------

# The released diffusers VAE configs (diffusers scripts/convert_ltx_to_diffusers.py get_vae_config:
# 0.9.0 = Lightricks/LTX-Video vae/config.json, 0.9.5 = the 0.9.5 - 0.9.8 VAE).
DIFFUSERS_090 = dict(block_out_channels=(128, 256, 512, 512), decoder_block_out_channels=(128, 256, 512, 512),
                     layers_per_block=(4, 3, 3, 3, 4), decoder_layers_per_block=(4, 3, 3, 3, 4))
DIFFUSERS_091 = dict(block_out_channels=(128, 256, 512, 512), decoder_block_out_channels=(256, 512, 1024),
                     layers_per_block=(4, 3, 3, 3, 4), decoder_layers_per_block=(5, 6, 7, 8),
                     decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(True, True, True, False),
                     upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True)
DIFFUSERS_095 = dict(block_out_channels=(128, 256, 512, 1024, 2048), decoder_block_out_channels=(256, 512, 1024),
                     down_block_types=("LTXVideo095DownBlock3D",) * 4, layers_per_block=(4, 6, 6, 2, 2),
                     decoder_layers_per_block=(5, 5, 5, 5), spatio_temporal_scaling=(True, True, True, True),
                     decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(False, False, False, False),
                     downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
                     upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True,
                     spatial_compression_ratio=32, temporal_compression_ratio=8)
# The official header configs of the same VAEs: 0.9.0 from ltx_video/utils/diffusers_config_mapping.py
# (OURS_VAE_CONFIG); 0.9.1 and 0.9.5 block lists as their checkpoints write them.
_COMMON = {"_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3, "latent_channels": 128,
           "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
           "use_quant_conv": False, "causal_decoder": False}
OFFICIAL_090 = {**_COMMON, "blocks": [["res_x", 4], ["compress_all", 1], ["res_x_y", 1], ["res_x", 3], ["compress_all", 1],
                                      ["res_x_y", 1], ["res_x", 3], ["compress_all", 1], ["res_x", 3], ["res_x", 4]]}
OFFICIAL_091 = {**_COMMON, "timestep_conditioning": True,
                "encoder_blocks": OFFICIAL_090["blocks"],
                "decoder_blocks": [["res_x", {"num_layers": 5, "inject_noise": True}],
                                   ["compress_all", {"residual": True, "multiplier": 2}],
                                   ["res_x", {"num_layers": 6, "inject_noise": True}],
                                   ["compress_all", {"residual": True, "multiplier": 2}],
                                   ["res_x", {"num_layers": 7, "inject_noise": True}],
                                   ["compress_all", {"residual": True, "multiplier": 2}],
                                   ["res_x", {"num_layers": 8, "inject_noise": False}]]}
OFFICIAL_095 = {**_COMMON, "timestep_conditioning": True,
                "encoder_blocks": [["res_x", {"num_layers": 4}], ["compress_space_res", {"multiplier": 2}],
                                   ["res_x", {"num_layers": 6}], ["compress_time_res", {"multiplier": 2}],
                                   ["res_x", {"num_layers": 6}], ["compress_all_res", {"multiplier": 2}],
                                   ["res_x", {"num_layers": 2}], ["compress_all_res", {"multiplier": 2}],
                                   ["res_x", {"num_layers": 2}]],
                "decoder_blocks": [["res_x", {"num_layers": 5, "inject_noise": False}],
                                   ["compress_all", {"residual": True, "multiplier": 2}],
                                   ["res_x", {"num_layers": 5, "inject_noise": False}],
                                   ["compress_all", {"residual": True, "multiplier": 2}],
                                   ["res_x", {"num_layers": 5, "inject_noise": False}],
                                   ["compress_all", {"residual": True, "multiplier": 2}],
                                   ["res_x", {"num_layers": 5, "inject_noise": False}]]}


def _same(a: VAEConfig, b: VAEConfig) -> bool:
    """Equal as architectures (compression ratios given or derived)."""
    keys = ("spatial_compression_ratio", "temporal_compression_ratio")
    strip = lambda c: {k: v for k, v in c.__dict__.items() if k not in keys and not k.startswith("_")}  # noqa: E731
    trim = lambda c: {k: (tuple(v[: len(c.decoder_block_out_channels) + 1]) if k == "decoder_inject_noise" else v)  # noqa: E731
                      for k, v in strip(c).items()}
    return trim(a) == trim(b) and (a.spatial_ratio, a.temporal_ratio) == (b.spatial_ratio, b.temporal_ratio)


@pytest.mark.parametrize("official, diffusers", [(OFFICIAL_090, DIFFUSERS_090), (OFFICIAL_091, DIFFUSERS_091),
                                                 (OFFICIAL_095, DIFFUSERS_095)], ids=["0.9.0", "0.9.1", "0.9.5"])
def test_released_official_configs_read_as_diffusers(official, diffusers):
    got = VAEConfig.from_official_config({"vae": official})
    assert _same(got, VAEConfig(**diffusers)), got
    assert (got.spatial_ratio, got.temporal_ratio) == (32, 8)


@pytest.mark.parametrize("version", VERSIONS)
def test_tiny_official_configs_read_as_their_diffusers_twin(version):
    assert _same(VAEConfig.from_official_config(OFFICIAL_VAE_CONFIGS[version]), VAEConfig(**TINY_VAES[version]))


def test_official_configs_vidax_cannot_run_are_refused():
    with pytest.raises(LTXConfigError, match="norm_layer"):
        VAEConfig.from_official_config({**OFFICIAL_095, "norm_layer": "group_norm"})
    with pytest.raises(LTXConfigError, match="attn_res_x"):
        VAEConfig.from_official_config({**OFFICIAL_095, "decoder_blocks": [["attn_res_x", {"num_layers": 1}]]
                                                                          + OFFICIAL_095["decoder_blocks"]})
    with pytest.raises(LTXConfigError, match="latent_log_var"):
        VAEConfig.from_official_config({**OFFICIAL_095, "latent_log_var": "per_channel"})
    with pytest.raises(LTXConfigError, match="spatial_padding_mode"):
        VAEConfig.from_official_config({**OFFICIAL_095, "spatial_padding_mode": "reflect"})
