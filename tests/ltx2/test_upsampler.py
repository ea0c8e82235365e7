"""LTX-2's latent upsampler against diffusers `LTX2LatentUpsamplerModel`, through the real spec, block by block:
the stem, each residual block, the upsampling head and the output, for the rational resampler at x2 (LTX-2's
released head) and x1.5 (its blur-downsample), the plain conv + shuffle head, and a 2D (per-frame) variant."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.oracle import save_diffusers, to_np, unflatten
from vidax.translator import convert
from vidax.zoo.ltx2.decoding.upsampler import LTX2LatentUpsampler, UpsamplerConfig, UpsamplerConfigError

from .references.upsampler_spec_fixtures import upsampler_reference

ATOL = 1e-5
# diffusers module -> the Flax module with the same output (channels-last; the head and a 2D model per frame)
BLOCKS = {"res_blocks.0": "res_blocks_0", "post_upsample_res_blocks.0": "post_upsample_res_blocks_0",
          "final_conv": "final_conv"}
HEAD = {True: {"upsampler": "upsampler", "upsampler.conv": "upsampler/conv"}, False: {"upsampler.0": "upsampler_0"}}


def _torch_outputs(ref, latents, names) -> dict:
    found = {}
    hooks = [ref.get_submodule(name).register_forward_hook(lambda m, i, o, name=name: found.__setitem__(name, to_np(o)))
             for name in names]
    with torch.no_grad():
        found["out"] = to_np(ref(latents))
    for hook in hooks:
        hook.remove()
    return found


def _flax_outputs(model, params, latents, names) -> dict:
    x = jnp.moveaxis(jnp.asarray(latents), 1, -1)
    _, state = model.module.apply({"params": jax.device_put(params)}, x, capture_intermediates=True)
    out = {}
    for theirs, mine in names.items():
        node = state["intermediates"]
        for part in mine.split("/"):
            node = node[part]
        out[theirs] = np.moveaxis(np.asarray(node["__call__"][0]), -1, 1)  # [N, C, ...] as torch holds it
    out["out"] = np.asarray(model(params, jnp.asarray(latents)))
    return out


@pytest.mark.parametrize("head, overrides", [("rational_x2", {}), ("rational_x1.5", {}), ("plain_x2", {}),
                                             ("rational_x2", {"dims": 2})],
                         ids=["rational_x2", "rational_x1.5", "plain_x2", "rational_x2_2d"])
def test_upsampler_matches_diffusers_block_by_block(tmp_path, head, overrides):
    ref = upsampler_reference(head, **overrides)
    save_diffusers(ref, tmp_path / "latent_upsampler")
    model = LTX2LatentUpsampler(UpsamplerConfig.from_hf_config(dict(ref.config)))
    params = unflatten(convert("ltx2/latent_upsampler", tmp_path, model.param_shapes(), dtype="float32"))
    latents = to_np(torch.randn(1, 8, 2, 4, 6, generator=torch.Generator().manual_seed(0)))
    names = {**BLOCKS, **HEAD[model.cfg.rational]}
    expected = _torch_outputs(ref, torch.from_numpy(latents), names)
    ours = _flax_outputs(model, params, latents, names)
    num, den = model.cfg.spatial_ratio
    assert ours["out"].shape == expected["out"].shape == (1, 8, 2, -(-4 * num // den), -(-6 * num // den))
    for name in ("out", *names):
        assert ours[name].shape == expected[name].shape, name
        np.testing.assert_allclose(ours[name], expected[name], atol=ATOL, rtol=0, err_msg=name)


def test_released_config_and_refusals():
    """LTX-2.0's released upsampler (diffusers' convert_ltx2_to_diffusers defaults): 128 -> 1024, 4 blocks, x2."""
    cfg = UpsamplerConfig.from_hf_config({"_class_name": "LTX2LatentUpsamplerModel", "in_channels": 128,
                                          "mid_channels": 1024, "num_blocks_per_stage": 4, "dims": 3,
                                          "spatial_upsample": True, "temporal_upsample": False,
                                          "rational_spatial_scale": 2.0, "use_rational_resampler": True})
    assert cfg == UpsamplerConfig() and cfg.output_grid(16, 11, 19) == (16, 22, 38)
    with pytest.raises(UpsamplerConfigError, match="rational scale 3.0"):
        UpsamplerConfig(rational_spatial_scale=3.0)
    with pytest.raises(UpsamplerConfigError, match="temporal upsampling needs dims 3"):
        UpsamplerConfig(dims=2, temporal_upsample=True)
