"""The latent upsampler against diffusers `LTXLatentUpsamplerModel` (the 0.9.7 / 0.9.8 multi-scale pipeline's),
through the real spec, for the released spatial x2 model (3D blocks, per-frame 2D upsampling conv), a
spatio-temporal one and a 2D one; the official file's header config reads back as the diffusers config."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.zoo.ltx_video.config import LTXConfigError, UpsamplerConfig, read_checkpoint_config
from vidax.zoo.ltx_video.upsampler import LTXLatentUpsampler

from .references.helpers import load_params, to_np
from .references.ltx_spec_fixtures import diffusers_config, official_upsampler_config, save, upsampler_reference


@pytest.mark.parametrize("overrides, out_frames", [({}, 3), ({"temporal_upsample": True}, 5), ({"dims": 2}, 3)],
                         ids=["spatial", "spatiotemporal", "2d"])
def test_upsampler_matches_reference(tmp_path, overrides, out_frames):
    ref = upsampler_reference(**overrides)
    save(ref.state_dict(), tmp_path / "latent_upsampler", diffusers_config(ref, "LTXLatentUpsamplerModel"))
    model = LTXLatentUpsampler(UpsamplerConfig.from_hf_config(dict(ref.config)))
    params = load_params("ltx_video/upsampler", tmp_path, model.param_shapes())
    latents = torch.randn(2, 8, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = to_np(ref(latents))
    ours = np.asarray(model(params, jnp.asarray(to_np(latents))))
    assert ours.shape == expected.shape == (2, 8, out_frames, 8, 10)
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=1e-5)


def test_official_file_reads_as_diffusers(tmp_path):
    ref = upsampler_reference()
    path = save(ref.state_dict(), tmp_path / "ltxv-spatial-upscaler-tiny.safetensors",
                metadata={"config": __import__("json").dumps(official_upsampler_config(ref))})
    cfg = UpsamplerConfig.from_official_config(read_checkpoint_config(path))
    assert cfg == UpsamplerConfig.from_hf_config(dict(ref.config))
    model = LTXLatentUpsampler(cfg)
    params = load_params("ltx_video/upsampler", path, model.param_shapes())
    latents = torch.randn(1, 8, 2, 3, 3, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = to_np(ref(latents))
    np.testing.assert_allclose(np.asarray(model(params, jnp.asarray(to_np(latents)))), expected, atol=1e-5, rtol=1e-5)


def test_released_configs():
    """0.9.7 / 0.9.8 spatial upsamplers (diffusers scripts/convert_ltx_to_diffusers.py): 128 -> 512, 4 blocks."""
    released = {"in_channels": 128, "mid_channels": 512, "num_blocks_per_stage": 4, "dims": 3,
                "spatial_upsample": True, "temporal_upsample": False}
    cfg = UpsamplerConfig.from_hf_config(released)
    assert cfg == UpsamplerConfig() == UpsamplerConfig.from_official_config({"_class_name": "LatentUpsampler", **released})
    assert cfg.factors == (1, 2, 2)
    with pytest.raises(LTXConfigError, match="temporal upsampling needs dims 3"):
        UpsamplerConfig.from_hf_config({**released, "dims": 2, "temporal_upsample": True})
