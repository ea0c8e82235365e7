"""The official pipeline's guidance (Lightricks/LTX-Video pipeline_ltx_video.py): spatio-temporal guidance in
the DiT ("attention_values": a skipped block's self-attention returns its value projection for the perturbed
row) and the per-step combination of CFG, CFG*, STG and rescaling.

diffusers has no STG: the DiT reference is diffusers' `LTXVideoTransformer3DModel` with the official rule put
into block 1's attention processor for row 1; the combination reference is the official code's arithmetic,
written here in torch as it stands there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.models.transformers.transformer_ltx import LTXVideoAttnProcessor

from vidax.zoo.ltx_video import rope
from vidax.zoo.ltx_video.config import TransformerConfig
from vidax.zoo.ltx_video.family import LTXCondition, LTXPredict
from vidax.zoo.ltx_video.transformer import LTXVideoTransformer

from .references.helpers import load_params, to_np
from .references.ltx_spec_fixtures import diffusers_config, dit_reference, save


class ValuesForRowOne(LTXVideoAttnProcessor):
    """The official `SkipLayerStrategy.AttentionValues` for batch row 1: `to_out(to_v(x))`."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        out = super().__call__(attn, hidden_states, encoder_hidden_states, attention_mask, image_rotary_emb)
        values = attn.to_out[0](attn.to_v(hidden_states))
        return torch.cat([out[:1], values[1:]])


def test_stg_skips_a_blocks_attention_for_the_perturbed_row(tmp_path):
    ref = dit_reference(seed=4)
    save(ref.state_dict(), tmp_path / "transformer", diffusers_config(ref, "LTXVideoTransformer3DModel"))
    model = LTXVideoTransformer(TransformerConfig.from_hf_config(dict(ref.config)))
    params = load_params("ltx_video/transformer", tmp_path, model.param_shapes())
    g = torch.Generator().manual_seed(0)
    grid = (2, 2, 3)
    tokens = torch.randn(1, 12, 8, generator=g).repeat(2, 1, 1)  # one latent, a plain and a perturbed row
    text = torch.randn(1, 5, 24, generator=g).repeat(2, 1, 1)
    mask = torch.ones(2, 5)
    t = torch.full((2,), 700.0)
    ref.transformer_blocks[1].attn1.set_processor(ValuesForRowOne())
    with torch.no_grad():
        want = ref(hidden_states=tokens, encoder_hidden_states=text, timestep=t, encoder_attention_mask=mask,
                   num_frames=grid[0], height=grid[1], width=grid[2], rope_interpolation_scale=(8 / 25, 32, 32),
                   return_dict=False)[0]
    cos, sin = rope.rope_tables(rope.grid_coords(1, *grid, model.cfg, frame_rate=25), model.cfg)
    skip = np.ones((2, model.cfg.num_layers), np.float32)
    skip[1, 1] = 0.0
    got = jax.jit(lambda p, *a: model(p, *a))(params, *(jnp.asarray(to_np(x)) for x in (tokens, text, mask, t)),
                                              cos, sin, jnp.asarray(skip))
    np.testing.assert_allclose(np.asarray(got), to_np(want), atol=2e-5, rtol=1e-5)
    assert np.abs(to_np(want[0] - want[1])).max() > 1e-3  # the perturbation is visible


def official_combination(out: torch.Tensor, guidance: float, stg: float, rescale: float, cfg_star: bool):
    """pipeline_ltx_video.py's arithmetic on the [negative, positive, perturbed] rows (batch 1)."""
    noise_pred_uncond, noise_pred_text, noise_pred_text_perturb = out.chunk(3)
    if cfg_star:
        positive_flat, negative_flat = noise_pred_text.view(1, -1), noise_pred_uncond.view(1, -1)
        alpha = torch.sum(positive_flat * negative_flat, dim=1, keepdim=True) / (
            torch.sum(negative_flat**2, dim=1, keepdim=True) + 1e-8)
        noise_pred_uncond = alpha * noise_pred_uncond
    noise_pred = noise_pred_uncond + guidance * (noise_pred_text - noise_pred_uncond)
    noise_pred = noise_pred + stg * (noise_pred_text - noise_pred_text_perturb)
    if rescale != 1.0 and stg > 0.0:
        factor = noise_pred_text.view(1, -1).std(dim=1, keepdim=True) / noise_pred.view(1, -1).std(dim=1, keepdim=True)
        factor = rescale * factor + (1 - rescale)
        noise_pred = noise_pred * factor.view(1, 1, 1)
    return noise_pred


@pytest.mark.parametrize("guidance, stg, rescale, cfg_star", [(6.0, 4.0, 0.5, True), (3.0, 1.0, 0.7, False)])
def test_official_guidance_combination(guidance, stg, rescale, cfg_star):
    rows = torch.randn(3, 12, 8, generator=torch.Generator().manual_seed(1))  # negative, positive, perturbed
    ours_order = torch.stack([rows[1], rows[0], rows[2]])  # vidax batches [positive, negative, perturbed]

    def run(x, text, mask, ts, cos, sin, skip):
        assert x.shape[0] == 3 and skip.shape == (3, 4) and float(skip[2, 3]) == 0.0 and float(skip[:2].min()) == 1.0
        return jnp.asarray(ours_order.numpy())

    predict = LTXPredict("official", cfg=True, stg=True, stg_row=True, cfg_star=cfg_star, rescale=True, skip=(3,),
                         num_layers=4, dtype="float32", noise=False)
    cond = LTXCondition(jnp.zeros((2, 5, 24)), jnp.ones((2, 5)), jnp.zeros((1, 12, 32)), jnp.zeros((1, 12, 32)), None, None)
    knobs = {"scale": jnp.float32(guidance), "stg": jnp.float32(stg), "rescale": jnp.float32(rescale)}
    got = predict(run, jnp.zeros((1, 12, 8)), jnp.float32(500.0), cond, knobs)
    want = official_combination(rows, guidance, stg, rescale, cfg_star)
    np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=1e-5, rtol=1e-5)
