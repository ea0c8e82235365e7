"""Cosmos-Predict2.5 DiT against diffusers `CosmosTransformer3DModel`, through the real spec.

A tiny perturbed reference (cross-attention projection and learned position embedding on) saved in
the diffusers folder layout and converted with `conversion_specs/cosmos/transformer.toml`; compared
per stage (embed, block 0, end to end) in fp32, with per-frame sigmas as the Predict2.5 pipeline
passes them and with one sigma per sample. A patch_t=2 variant checks the unpatchify order
(diffusers lays each token out (ph, pw, pt, C), not patchify's inverse). The official `.pt`
layout converts to the same tree, and diffusers' own single-file converter maps our official
fixture back to the diffusers keys.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import CosmosTransformer3DModel
from diffusers.loaders.single_file_utils import (
    convert_cosmos_transformer_checkpoint_to_diffusers,
)
from vidax.translator import AccountingError, convert, load_spec
from vidax.zoo.cosmos import CosmosTransformer, CosmosTransformerConfig
from vidax.zoo.cosmos.transformer import per_token

from tests.oracle import recorded, save_diffusers, spec_without_rule, to_np, unflatten

from .cosmos_spec_fixtures import TINY_DIT, dit_reference, official_state_dict, save_official
from .helpers import install_torchvision_standin, randn

ATOL = 2e-5  # fp32 through ~12 matmuls and two softmaxes per block; observed max error ~1e-6
SPEC = "cosmos/transformer"


@pytest.fixture(scope="module")
def reference():
    install_torchvision_standin()
    return dit_reference()


@pytest.fixture(scope="module")
def checkpoint(reference, tmp_path_factory):
    return save_diffusers(reference, tmp_path_factory.mktemp("cosmos_diffusers") / "transformer").parent


@pytest.fixture(scope="module")
def model(reference):
    return CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(reference.config)))


@pytest.fixture(scope="module")
def params(model, checkpoint):
    return unflatten(convert(load_spec(SPEC), checkpoint, model.param_shapes(), dtype="float32"))


def make_inputs(per_frame: bool, frames: int = 3, pixel_padding: bool = False, seed: int = 1):
    """Batch of 2: sample 0 conditions on its first latent frame (1e-4), sample 1 on none."""
    b, h, w = 2, 4, 6
    cond = torch.zeros(b, 1, frames, 1, 1)
    cond[0, :, 0] = 1.0
    sigma = torch.tensor([0.7, 0.3]).view(b, 1, 1, 1, 1)
    timestep = (cond * 1e-4 + (1 - cond) * sigma) if per_frame else torch.tensor([0.7, 0.3])
    pad_hw = (h * 16, w * 16) if pixel_padding else (h, w)
    padding = (randn(1, 1, *pad_hw, seed=seed + 2) > 0).float()  # the pipeline passes zeros; ones exercise it
    return dict(hidden_states=randn(b, 4, frames, h, w, seed=seed), timestep=timestep,
                encoder_hidden_states=randn(b, 7, 24, seed=seed + 1), condition_mask=cond.expand(b, 1, frames, h, w),
                padding_mask=padding)


def our_inputs(inputs: dict):
    j = lambda t: jnp.asarray(to_np(t))
    timestep = inputs["timestep"]
    timestep = timestep.reshape(timestep.shape[0], -1) if timestep.ndim == 5 else timestep
    return (j(inputs["hidden_states"]), j(timestep), j(inputs["encoder_hidden_states"]), j(inputs["condition_mask"]),
            j(inputs["padding_mask"]))


def run_reference(reference, inputs: dict):
    """Output, and what block 0 received and returned (captured by hooks)."""
    with recorded(reference.transformer_blocks[0]) as seen, torch.no_grad():
        out = reference(**inputs, return_dict=False)[0]
    return to_np(out), seen


@pytest.mark.parametrize("per_frame,pixel_padding", [(True, False), (False, False), (True, True)],
                         ids=["per_frame_sigma", "one_sigma", "pixel_padding_mask"])
def test_end_to_end_and_embed(reference, model, params, per_frame, pixel_padding):
    inputs = make_inputs(per_frame, pixel_padding=pixel_padding)
    expected, seen = run_reference(reference, inputs)
    ours_in = our_inputs(inputs)

    # Embed: the tokens, text, modulation inputs, RoPE and learned positions that diffusers hands block 0.
    hidden, ctx = model.embed(params, *ours_in)
    video, text, emb, temb, (cos, sin), pos = seen["args"][:6]
    close = lambda a, b, what: np.testing.assert_allclose(np.asarray(a), to_np(b), atol=ATOL, rtol=1e-5, err_msg=what)
    close(hidden, video, "patch embedding")
    close(ctx.text, text, "cross-attention projection")
    # diffusers keeps [B, D] for one sigma per sample, [B, S, D] per token for per-frame sigmas
    close(np.asarray(per_token(ctx.emb, ctx.grid)).reshape(emb.shape), emb, "embedded timestep")
    close(np.asarray(per_token(ctx.temb, ctx.grid)).reshape(temb.shape), temb, "timestep MLP")
    close(ctx.rope_cos, cos, "rope cos")
    close(ctx.rope_sin, sin, "rope sin")
    close(ctx.pos[0], pos[0], "learned position embedding")

    out = np.asarray(jax.jit(model.__call__)(params, *ours_in))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, atol=ATOL, rtol=1e-5)


def test_block_zero(reference, model, params):
    """One block on diffusers' own block-0 inputs, with our per-frame modulation context."""
    inputs = make_inputs(per_frame=True)
    _, seen = run_reference(reference, inputs)
    _, ctx = model.embed(params, *our_inputs(inputs))
    video = jnp.asarray(to_np(seen["args"][0]))
    block_params = jax.tree.map(lambda a: a[0], params["blocks"])
    out = jax.jit(model.block.apply)({"params": block_params}, video, ctx)
    np.testing.assert_allclose(np.asarray(out), to_np(seen["out"]), atol=ATOL, rtol=1e-5)


def test_patch_t2_unpatchify_order(tmp_path):
    """patch (2, 2, 2): diffusers' output permute is not patchify's inverse; ours must follow it."""
    install_torchvision_standin()
    reference = dit_reference(seed=3, patch_size=(2, 2, 2), extra_pos_embed_type=None)
    save_diffusers(reference, tmp_path / "transformer")
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(reference.config)))
    params = unflatten(convert(load_spec(SPEC), tmp_path, model.param_shapes(), dtype="float32"))
    inputs = make_inputs(per_frame=False, frames=4)
    expected, _ = run_reference(reference, inputs)
    np.testing.assert_allclose(np.asarray(model(params, *our_inputs(inputs))), expected, atol=ATOL, rtol=1e-5)


def test_official_layout_matches_diffusers_converter(tmp_path):
    """The official `.pt` (net. keys, TE extra states, RoPE buffers) converts to the diffusers layout's
    tree; diffusers' single-file converter maps the same file's keys back to the reference's. The
    release has no learned position embedding (diffusers' converter has no name for one)."""
    reference = dit_reference(seed=5, extra_pos_embed_type=None)
    state = reference.state_dict()
    back = convert_cosmos_transformer_checkpoint_to_diffusers(official_state_dict(state))
    fresh = CosmosTransformer3DModel(**{**TINY_DIT, "extra_pos_embed_type": None})
    fresh.load_state_dict(back, strict=True)
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(reference.config)))
    pt = save_official(state, tmp_path / "official" / "base" / "post-trained" / "x_ema_bf16.pt")
    official = convert(load_spec(SPEC), pt, model.param_shapes(), dtype="float32")
    diffusers = convert(load_spec(SPEC), save_diffusers(reference, tmp_path / "d" / "transformer").parent,
                        model.param_shapes(), dtype="float32")
    assert official.keys() == diffusers.keys()
    for key in diffusers:
        np.testing.assert_array_equal(np.asarray(official[key]), np.asarray(diffusers[key]), err_msg=key)


def test_param_shapes_give_the_config(reference, model, params):
    """An official checkpoint has no config.json: its sizes are read off the converted tree."""
    shapes = {k: v.shape for k, v in jax.tree_util.tree_flatten_with_path(params)[0] for k in [
        "/".join(p.key for p in k)]}
    cfg = CosmosTransformerConfig.from_param_shapes(shapes, max_size=TINY_DIT["max_size"])
    assert cfg == model.cfg


def test_broken_spec_fails_loudly(checkpoint, model, tmp_path):
    """Dropping the q/k-norm rule leaves keys unclaimed and leaves unproduced: one clear error."""
    broken = spec_without_rule(SPEC, "match = 'transformer_blocks\\.(?P<i>\\d+)\\.(?P<m>attn[12]\\.norm_[qk])", tmp_path)
    with pytest.raises(AccountingError, match="norm_q"):
        convert(load_spec(broken), checkpoint, model.param_shapes())


def test_bad_inputs_are_clear_errors(model, params):
    latents, timestep, text, cond, pad = our_inputs(make_inputs(per_frame=True))
    with pytest.raises(ValueError, match="channels"):
        model.embed(params, latents, timestep, text)
    with pytest.raises(ValueError, match="per latent frame"):
        model.embed(params, latents, timestep[:, :2], text, cond, pad)
    with pytest.raises(ValueError, match="text features"):
        model.embed(params, latents, timestep, text[..., :16], cond, pad)
