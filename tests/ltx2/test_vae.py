"""LTX-2 video VAE against diffusers `AutoencoderKLLTX2Video`, through the real spec: encode (the
posterior mean), decode (causal and not, timestep-conditioned and not), fp32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.ltx2.config import VideoVAEConfig
from vidax.zoo.ltx2.vae import LTX2VideoVAE

from .ltx2_spec_fixtures import official_vae_state, save_diffusers, state_of, vae_reference

ATOL = 5e-5  # fp32 through ~30 convolutions of values ~1-10; observed ~5e-6


def unflatten(tree):
    from flax.traverse_util import unflatten_dict

    return unflatten_dict(dict(tree), sep="/")


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
