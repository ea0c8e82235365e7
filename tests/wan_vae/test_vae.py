"""Wan2.1 / Wan2.2 VAE against diffusers `AutoencoderKLWan`, through the real specs of both layouts.

Tiny perturbed references (2.1-style z 16; 2.2-style residual, patchified, z 8) are saved in the
diffusers `vae/` layout and as the official single `.pth` file, converted with
`vidax.translator.convert`, and run chunk by chunk (first frame, then 4-frame chunks to encode; one
latent frame at a time to decode) against the reference in fp32 at highest matmul precision.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.translator import TranslatorError, convert, load_spec
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.runtime import use_mesh
from vidax.zoo.compute.sharding import place
from vidax.zoo.parts.wan_vae import (
    WAN21_VAE, WAN22_VAE, WAN_VAE_RULES, MidBlock, Resample, ResidualBlock, ResidualDownBlock, UpBlock, WanVAE,
    WanVAEConfig, WanVAEError, _run_stage, decode_stages, denormalize_latents, normalize_latents,
)

import torch
import diffusers  # noqa: F401  (the oracle must be installed)


def _load_fixtures():
    path = Path(__file__).with_name("wan_vae_spec_fixtures.py")
    module_spec = importlib.util.spec_from_file_location("wan_vae_spec_fixtures_for_tests", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


fixtures = _load_fixtures()

ATOL = 2e-5  # fp32 through ~40 convolutions and a softmax; observed max error ~3e-6
# (pixels of the video, latent frames decoded) per spec: 2.1 is 8x spatial, 2.2 16x (2x2 patches)
SIZES = {"wan/vae": (16, 24), "wan/vae22": (32, 32)}
FRAMES = 9  # the first frame, then two 4-frame chunks: the steady-state unit runs twice
LATENT_FRAMES = 3


def _np(t) -> np.ndarray:
    return t.detach().float().numpy()


@pytest.fixture(scope="module", params=["wan/vae", "wan/vae22"])
def case(request, tmp_path_factory):
    """Reference, its two checkpoints converted through the real spec, and the reference's outputs."""
    spec = request.param
    model = fixtures.reference(spec)
    roots = fixtures.save_checkpoints(spec, model, tmp_path_factory.mktemp(spec.replace("/", "-")))
    vae = WanVAE(WanVAEConfig.from_hf_config(dict(model.config)))
    trees = {root.name: convert(load_spec(spec), root, vae.param_shapes()) for root in roots}
    h, w = SIZES[spec]
    factor = vae.config.scale_factor_spatial
    gen = torch.Generator().manual_seed(1)
    video = torch.rand(1, 3, FRAMES, h, w, generator=gen) * 2 - 1
    latents = torch.randn(1, vae.config.z_dim, LATENT_FRAMES, h // factor, w // factor, generator=gen)
    with torch.no_grad():
        moments = _np(model.encode(video).latent_dist.parameters)
        decoded = _np(model.decode(latents).sample)
    return dict(spec=spec, model=model, vae=vae, trees=trees, video=_np(video), latents=_np(latents),
                moments=moments, decoded=decoded)


def _params(tree: dict) -> dict:
    from flax.traverse_util import unflatten_dict

    return unflatten_dict(dict(tree), sep="/")


def test_both_layouts_convert_to_the_independent_tree(case):
    expected = fixtures.expected_tree(case["model"].state_dict())
    for layout, tree in case["trees"].items():
        assert set(tree) == set(expected), layout
        for path, value in expected.items():
            np.testing.assert_array_equal(tree[path], value, err_msg=f"{layout}: {path}")


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_encode(case, layout):
    ours = np.asarray(case["vae"].encode_moments(_params(case["trees"][layout]), jnp.asarray(case["video"])))
    assert ours.shape == case["moments"].shape
    np.testing.assert_allclose(ours, case["moments"], atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_decode(case, layout):
    ours = np.asarray(case["vae"].decode(_params(case["trees"][layout]), jnp.asarray(case["latents"])))
    assert ours.shape == case["decoded"].shape == (1, 3, 1 + 4 * (LATENT_FRAMES - 1), *SIZES[case["spec"]])
    assert np.abs(case["decoded"]).max() <= 1.0
    np.testing.assert_allclose(ours, case["decoded"], atol=ATOL, rtol=1e-5)


def test_encode_mean_and_sample(case):
    vae, params = case["vae"], _params(case["trees"]["diffusers"])
    video = jnp.asarray(case["video"])
    z = case["vae"].config.z_dim
    np.testing.assert_allclose(np.asarray(vae.encode(params, video)), case["moments"][:, :z], atol=ATOL, rtol=1e-5)
    sample = np.asarray(vae.encode(params, video, key=jax.random.key(0)))
    std = np.exp(0.5 * np.clip(case["moments"][:, z:], -30, 20))
    noise = (sample - case["moments"][:, :z]) / std
    assert 0.5 < noise.std() < 1.5 and not np.allclose(noise, 0)


def test_official_21_layout_maps_back_through_diffusers_converter():
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    state = fixtures.reference("wan/vae").state_dict()
    official = {fixtures.official_key("wan/vae", k): v for k, v in state.items()}
    back = convert_wan_vae_to_diffusers(dict(official))
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_spec_refuses_the_other_vae(case, tmp_path):
    other = {"wan/vae": "wan/vae22", "wan/vae22": "wan/vae"}[case["spec"]]
    for root in fixtures.save_checkpoints(case["spec"], case["model"], tmp_path):
        with pytest.raises(TranslatorError):
            convert(load_spec(other), root)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """spec -> (reference, our VAE, its tree converted from the diffusers layout), built once each."""
    built = {}

    def get(spec: str):
        if spec not in built:
            model = fixtures.reference(spec)
            diffusers_root, _ = fixtures.save_checkpoints(spec, model, tmp_path_factory.mktemp(spec.replace("/", "_")))
            vae = WanVAE(WanVAEConfig.from_hf_config(dict(model.config)))
            built[spec] = model, vae, convert(load_spec(spec), diffusers_root, vae.param_shapes())
        return built[spec]

    return get


@pytest.fixture(scope="module")
def tiny21(converted):
    """The 2.1-style reference's VAE and its converted tree (diffusers layout)."""
    return converted("wan/vae")[1:]


# (spec, block path, our block, input channels): blocks whose reference runs without the chunk
# cache (zero-padded causal convs, no time resampling), so one call compares them whole.
BLOCKS = [
    ("wan/vae", "encoder/down_blocks_3", lambda: ResidualBlock(16), 8),  # with the 1x1x1 shortcut conv
    ("wan/vae", "encoder/down_blocks_2", lambda: Resample("downsample2d", 8), 8),
    ("wan/vae", "decoder/mid_block", lambda: MidBlock(), 32),  # resnet, attention, resnet
    ("wan/vae", "decoder/up_blocks_3", lambda: UpBlock(8, 2, None, False), 8),
    ("wan/vae22", "encoder/down_blocks_0", lambda: ResidualDownBlock(8, 2, False, True), 8),  # + AvgDown3D
    ("wan/vae22", "decoder/up_blocks_3", lambda: UpBlock(12, 2, None, True), 24),
]


@pytest.mark.parametrize("spec, path, block, channels", BLOCKS, ids=[f"{s}:{p}" for s, p, _, _ in BLOCKS])
def test_block(converted, spec, path, block, channels):
    model, _, tree = converted(spec)
    reference = model.get_submodule(re.sub(r"_(\d+)(?=/|$)", r".\1", path).replace("/", "."))  # up_blocks_3 -> up_blocks.3
    x = torch.randn(1, channels, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = _np(reference(x))
    params = _params({k[len(path) + 1:]: v for k, v in tree.items() if k.startswith(path + "/")})
    ours, _ = block().apply({"params": params}, jnp.asarray(_np(x).transpose(0, 2, 3, 4, 1)), mutable=["cache"])
    np.testing.assert_allclose(np.asarray(ours).transpose(0, 4, 1, 2, 3), expected, atol=ATOL, rtol=1e-5)


def test_decode_compiles_each_unit_once_for_the_first_and_the_steady_chunks(tiny21):
    vae, tree = tiny21
    params = _params(tree)
    z = jnp.zeros((1, 16, 4, 1, 2), jnp.float32)  # a shape no other test uses
    units = len(decode_stages(vae.config))
    before = _run_stage.jitted._cache_size()
    vae.decode(params, z)
    # each unit once for the first chunk and once for the steady state, not once per chunk
    assert _run_stage.jitted._cache_size() - before == 2 * units
    vae.decode(params, jnp.zeros((1, 16, 6, 1, 2), jnp.float32))
    assert _run_stage.jitted._cache_size() - before == 2 * units


def test_sharded_decode_matches_one_device(tiny21):
    vae, tree = tiny21
    latents = jax.random.normal(jax.random.key(2), (1, 16, 2, 2, 8), jnp.float32)  # width 8 splits 8 ways
    expected = np.asarray(vae.decode(_params(tree), latents))
    mesh = make_mesh(dp=2, tp=2, sp=2)
    with use_mesh(mesh, WAN_VAE_RULES):
        params = place(tree, vae.logical_specs(), WAN_VAE_RULES, mesh)
        out = vae.decode(params, latents)
    assert len(out.sharding.device_set) == 8 and not out.sharding.is_fully_replicated
    np.testing.assert_allclose(np.asarray(out), expected, atol=ATOL, rtol=1e-5)


def test_latent_normalisation_matches_the_pipeline():
    cfg = WanVAEConfig.from_hf_config(fixtures.TINY_22)
    z = np.random.default_rng(0).normal(size=(1, 8, 2, 3, 4)).astype(np.float32)
    mean = torch.tensor(cfg.latents_mean).view(1, 8, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(cfg.latents_std).view(1, 8, 1, 1, 1)
    # diffusers WanPipeline: `latents / latents_std + latents_mean` before decode (latents_std = 1 / std);
    # WanImageToVideoPipeline: `(latents - latents_mean) * latents_std` after encode
    np.testing.assert_allclose(np.asarray(denormalize_latents(cfg, jnp.asarray(z))),
                               _np(torch.from_numpy(z) / inv_std + mean), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(normalize_latents(cfg, jnp.asarray(z))),
                               _np((torch.from_numpy(z) - mean) * inv_std), rtol=1e-6, atol=1e-6)


def test_official_21_config_is_the_diffusers_default():
    from diffusers import AutoencoderKLWan

    defaults = {name: p.default for name, p in inspect.signature(AutoencoderKLWan.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
    assert WanVAEConfig.from_hf_config(defaults) == WAN21_VAE


@pytest.mark.parametrize("config", [WAN21_VAE, WAN22_VAE], ids=["wan2.1", "wan2.2"])
def test_official_configs_build_the_released_trees(config):
    """The fixed configs of the official single files give diffusers' tree for the same config (meta device)."""
    import dataclasses

    from diffusers import AutoencoderKLWan

    with torch.device("meta"):
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        model = AutoencoderKLWan(**{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()})
    expected = {}
    for key, tensor in model.state_dict().items():
        path, kind = fixtures.tree_leaf(key)
        shape = tuple(tensor.shape)
        expected[path] = (shape[0],) if kind == "gamma" else (*shape[2:], shape[1], shape[0]) if kind == "kernel" else shape
    assert WanVAE(config).param_shapes() == expected


def test_official_repo_root_finds_the_vae_not_the_dit(case, tmp_path):
    """An official repo keeps its DiT as root-level diffusion_pytorch_model*.safetensors beside the VAE file."""
    from safetensors.numpy import save_file

    _, official_root = fixtures.save_checkpoints(case["spec"], case["model"], tmp_path)
    save_file({"blocks.0.self_attn.q.weight": np.zeros((4, 4), np.float32)},
              official_root / "diffusion_pytorch_model.safetensors")
    tree = convert(load_spec(case["spec"]), official_root, case["vae"].param_shapes())
    assert set(tree) == set(case["trees"]["official"])


@pytest.mark.parametrize("spec, repo_files, wanted", [
    ("wan/vae", ["Wan2.1_VAE.pth", "diffusion_pytorch_model.safetensors", "models_t5_umt5-xxl-enc-bf16.pth"],
     "Wan2.1_VAE.pth"),
    ("wan/vae22", ["Wan2.2_VAE.pth", "diffusion_pytorch_model-00001-of-00003.safetensors"], "Wan2.2_VAE.pth"),
    ("wan/vae", ["transformer/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors"],
     "vae/diffusion_pytorch_model*.safetensors"),
])
def test_hub_download_fetches_only_the_vae(monkeypatch, spec, repo_files, wanted):
    import huggingface_hub

    from vidax.translator.fetch.sources import hub_patterns

    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo, revision=None: repo_files)
    patterns = hub_patterns("Wan-AI/some-repo", list(load_spec(spec).layouts.values()), None, None)
    assert patterns[0] == wanted


def test_encode_rejects_frame_counts_off_the_chunk_grid():
    vae = WanVAE(WanVAEConfig.from_hf_config(fixtures.TINY_21))
    with pytest.raises(WanVAEError, match="1 \\+ 4k frames"):
        vae.encode_moments({}, jnp.zeros((1, 3, 6, 16, 16)))
