"""Wan VACE DiT parity with diffusers `WanVACETransformer3DModel`, through the real spec `wan/vace_transformer`.

A tiny perturbed reference (3 main layers, hints after layers 0 and 2) is saved in the real folder layouts
(vace_spec_fixtures.py), converted with `vidax.translator.convert`, and compared in fp32 at highest matmul
precision: a VACE block and a main block (with its hint) on the reference blocks' own inputs, and the whole
model with the conditioning scale as one value, one per layer and the default; the official layout (checked
to map back through diffusers' own converter); short control latents (zero-padded, as diffusers does); the
streamed-offload runner; and sharded runs (dp/tp/sp on 8 fake CPU devices) against one device.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import traverse_util

from tests.wan_vace import vace_spec_fixtures as fixtures
from vidax.translator import convert, load_spec
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.weights.offload import StreamedDiT
from vidax.zoo.compute.runtime import use_mesh
from vidax.zoo.compute.sharding import place_model
from vidax.zoo.wan.config import WanConfigError
from vidax.zoo.wan.sharding import DIT_RULES
from vidax.zoo.wan.transformer import Context
from vidax.zoo.wan.vace import MainState, VaceContext, VaceState, WanVACEConfig, WanVACETransformer


LATENT = (3, 4, 6)  # latent frames, height, width -> 18 tokens after the (1, 2, 2) patch
SCALES = {"default": None, "one value": 0.6, "per layer": [1.4, -0.5]}

_forward = jax.jit(lambda model, params, *inputs: model(params, *inputs), static_argnums=0)


def _inputs(config: dict, batch: int = 2, seed: int = 0, control_frames: int = LATENT[0]) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(batch, config["in_channels"], *LATENT, generator=gen),
        "timestep": torch.tensor([999.0, 321.5][:batch]),
        "encoder_hidden_states": torch.randn(batch, 9, config["text_dim"], generator=gen),
        "control_hidden_states": torch.randn(batch, config["vace_in_channels"], control_frames, *LATENT[1:],
                                             generator=gen),
    }


def _scale_tensor(scale, layers: int):
    """The pipeline's `conditioning_scale` as it reaches the DiT (one value -> one per layer)."""
    if scale is None:
        return None
    return torch.tensor([float(scale)] * layers if np.isscalar(scale) else scale)


def _ours(inputs: dict, scale: torch.Tensor | None) -> tuple:
    j = lambda t: jnp.asarray(t.numpy())  # noqa: E731
    b = inputs["hidden_states"].shape[0]
    per_sample = None if scale is None else jnp.broadcast_to(j(scale), (b, scale.shape[0]))
    return (j(inputs["hidden_states"]), j(inputs["timestep"]), j(inputs["encoder_hidden_states"]), None,
            j(inputs["control_hidden_states"]), per_sample)


def _load(root, model, **kwargs) -> dict:
    tree = convert(load_spec("wan/vace_transformer"), root, model.param_shapes(), dtype="float32", **kwargs)
    return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(reference, root, model, params, inputs)."""
    ref = fixtures.build_reference(fixtures.tiny_config())
    root = fixtures.save_reference(ref, tmp_path_factory.mktemp("vace"), "diffusers")
    cfg = WanVACEConfig.from_hf_config(json.loads((root / "transformer" / "config.json").read_text()))
    model = WanVACETransformer(cfg)
    return ref, root, model, _load(root, model), _inputs(fixtures.tiny_config())


# --- config ----------------------------------------------------------------------------------

# Wan2.1-VACE-1.3B's published configs in both layouts (the -diffusers repo's transformer/config.json; the
# official repo's config.json, VaceWanModel)
VACE_13B_LAYERS = list(range(0, 30, 2))
PUBLISHED = (
    {"_class_name": "WanVACETransformer3DModel", "added_kv_proj_dim": None, "attention_head_dim": 128,
     "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 8960, "freq_dim": 256, "image_dim": None, "in_channels": 16,
     "num_attention_heads": 12, "num_layers": 30, "out_channels": 16, "patch_size": [1, 2, 2], "pos_embed_seq_len": None,
     "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096, "vace_in_channels": 96,
     "vace_layers": VACE_13B_LAYERS},
    {"_class_name": "VaceWanModel", "dim": 1536, "eps": 1e-06, "ffn_dim": 8960, "freq_dim": 256, "in_dim": 16,
     "model_type": "vace", "num_heads": 12, "num_layers": 30, "out_dim": 16, "text_len": 512, "vace_in_dim": 96,
     "vace_layers": VACE_13B_LAYERS},
)


def test_config_same_from_both_layouts():
    from_diffusers, from_official = (WanVACEConfig.from_hf_config(c) for c in PUBLISHED)
    assert dataclasses.replace(from_official, model_type=None) == from_diffusers
    assert from_diffusers.vace_layers == tuple(VACE_13B_LAYERS) and from_diffusers.vace_in_channels == 96
    assert from_diffusers.hint_slots[:4] == (0, -1, 1, -1)


def test_config_rejects_what_it_cannot_run():
    with pytest.raises(WanConfigError, match="exceed"):
        WanVACEConfig.from_hf_config({**PUBLISHED[0], "vace_layers": [0, 30]})
    with pytest.raises(WanConfigError, match="start at 0"):
        WanVACEConfig.from_hf_config({**PUBLISHED[0], "vace_layers": [2, 4]})
    with pytest.raises(WanConfigError, match="ascending"):  # diffusers and the official code disagree on these
        WanVACEConfig.from_hf_config({**PUBLISHED[0], "vace_layers": [0, 10, 5]})


# --- per block -------------------------------------------------------------------------------


def _captured(ref, inputs: dict, scale) -> dict:
    """What the reference's VACE block 1 and main block 2 receive and return in a full forward."""
    seen = {}
    hooks = [ref.vace_blocks[1].register_forward_hook(lambda m, a, o: seen.update(vace=(a, o))),
             ref.blocks[2].register_forward_hook(lambda m, a, o: seen.update(main=(a, o)))]
    try:
        with torch.no_grad():
            ref(**inputs, control_hidden_states_scale=scale, return_dict=False)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _context(model, temb, text, rope, scale) -> VaceContext:
    j = lambda t: jnp.asarray(t.numpy())  # noqa: E731
    b, d = temb.shape[0], model.cfg.inner_dim
    base = Context(modulation=j(temb).reshape(b, -1, 6, d), temb=jnp.zeros((b, 1, d)), text=j(text), image=None,
                   rope_cos=j(rope[0][0, :, 0]), rope_sin=j(rope[1][0, :, 0]))
    return VaceContext(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Context)},
                       vace_scale=jnp.broadcast_to(j(scale), (b, scale.shape[0])))


def test_vace_block_matches_reference(case):
    ref, _, model, params, inputs = case
    scale = torch.tensor([1.4, -0.5])
    (hidden, text, control, temb, rope), (hint, control_out) = _captured(ref, inputs, scale)["vace"]
    hints = jnp.zeros((2, *hidden.shape))
    state = VaceState(jnp.asarray(hidden.numpy()), jnp.asarray(control.numpy()), hints, jnp.int32(1))
    layer = jax.tree.map(lambda a: a[1], params["vace_blocks"])
    got = jax.jit(lambda p, s, c: model.vace_block.apply({"params": p}, s, c))(
        layer, state, _context(model, temb, text, rope, scale))
    np.testing.assert_allclose(np.asarray(got.control), control_out.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got.hints[1]), hint.numpy(), rtol=1e-5, atol=1e-5)
    assert not np.asarray(got.hints[0]).any() and int(got.index) == 2  # only its own slot written


def test_main_block_adds_its_hint(case):
    ref, _, model, params, inputs = case
    scale = torch.tensor([1.4, -0.5])
    seen = _captured(ref, inputs, scale)
    (hidden, text, temb, rope), block_out = seen["main"]
    hint = seen["vace"][1][0]  # VACE block 1's hint is added after main block 2 (vace_layers [0, 2])
    want = (block_out + hint * scale[1]).numpy()
    hints = jnp.stack([jnp.zeros(hint.shape), jnp.asarray(hint.numpy())])
    state = MainState(jnp.asarray(hidden.numpy()), hints, jnp.int32(2))
    layer = jax.tree.map(lambda a: a[2], params["blocks"])
    got = jax.jit(lambda p, s, c: model.block.apply({"params": p}, s, c))(
        layer, state, _context(model, temb, text, rope, scale))
    np.testing.assert_allclose(np.asarray(got.hidden), want, rtol=1e-5, atol=1e-5)
    state = MainState(jnp.asarray(hidden.numpy()), hints, jnp.int32(1))  # layer 1 adds no hint
    got = jax.jit(lambda p, s, c: model.block.apply({"params": p}, s, c))(
        layer, state, _context(model, temb, text, rope, scale))
    np.testing.assert_allclose(np.asarray(got.hidden), block_out.numpy(), rtol=1e-5, atol=1e-5)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", sorted(SCALES))
def test_forward_matches_reference(case, scale):
    ref, _, model, params, inputs = case
    scale = _scale_tensor(SCALES[scale], len(model.cfg.vace_layers))
    with torch.no_grad():
        want = ref(**inputs, control_hidden_states_scale=scale, return_dict=False)[0].numpy()
    got = _forward(model, params, *_ours(inputs, scale))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_scales_change_the_output(case):
    """The scale reaches the sum: 0 on every layer is the plain Wan DiT's output, and the two layers differ."""
    _, _, model, params, inputs = case
    outs = [np.asarray(_forward(model, params, *_ours(inputs, torch.tensor(s)))) for s in ([0.0, 0.0], [1.0, 0.0],
                                                                                           [0.0, 1.0])]
    assert np.abs(outs[0] - outs[1]).max() > 1e-3 and np.abs(outs[0] - outs[2]).max() > 1e-3
    assert np.abs(outs[1] - outs[2]).max() > 1e-3


def test_short_control_is_zero_padded(case):
    ref, _, model, params, _ = case
    inputs = _inputs(fixtures.tiny_config(), seed=5, control_frames=2)
    with torch.no_grad():
        want = ref(**inputs, return_dict=False)[0].numpy()
    np.testing.assert_allclose(np.asarray(_forward(model, params, *_ours(inputs, None))), want, rtol=1e-5, atol=1e-5)


def test_official_layout_runs_the_same(case, tmp_path):
    """The official names map back to the reference's exactly through diffusers' own converter, and convert
    through the spec to the same model."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
    from safetensors.torch import load_file

    ref, _, model, _, inputs = case
    root = fixtures.save_reference(ref, tmp_path / "official", "official")
    official = load_file(root / "diffusion_pytorch_model.safetensors")
    assert any(k.startswith("vace_blocks.0.before_proj.") for k in official)
    back = convert_wan_transformer_to_diffusers(dict(official))
    state = fixtures.state_of(ref)
    assert sorted(back) == sorted(state) and all(torch.equal(back[k], state[k]) for k in state)
    tree = convert(load_spec("wan/vace_transformer"), root, dtype="float32")
    hf = json.loads((root / "config.json").read_text())
    cfg = WanVACEConfig.from_hf_config(hf, param_shapes={p: a.shape for p, a in tree.items()})
    assert dataclasses.replace(cfg, model_type=None) == model.cfg
    scale = torch.tensor([1.4, -0.5])
    with torch.no_grad():
        want = ref(**inputs, control_hidden_states_scale=scale, return_dict=False)[0].numpy()
    got = _forward(WanVACETransformer(cfg), _load(root, model), *_ours(inputs, scale))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_streamed_offload_matches_reference(case):
    """The offload runner streams both block groups (chunks of one block)."""
    ref, _, model, params, inputs = case
    scale = torch.tensor([1.4, -0.5])
    with torch.no_grad():
        want = ref(**inputs, control_hidden_states_scale=scale, return_dict=False)[0].numpy()
    params = dict(params)
    streamed = StreamedDiT(model, chunk=1)
    host = streamed.offload({name: params.pop(name) for name in ("vace_blocks", "blocks")})
    got = streamed(params, host, *_ours(inputs, scale))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_bad_inputs_are_clear_errors(case):
    _, _, model, params, inputs = case
    latents, timestep, text, image, control, _ = _ours(inputs, None)
    with pytest.raises(ValueError, match=r"control latents \[2, 12, F, H, W\]"):
        model.embed(params, latents, timestep, text, image, control[:, :4])
    with pytest.raises(ValueError, match=r"one conditioning scale per VACE layer \[2, 2\]"):
        model.embed(params, latents, timestep, text, image, control, jnp.ones((2, 3)))


# --- sharded ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded_case(tmp_path_factory):
    """8 heads (tp x sp up to 8), batch 2 for dp, a scale per layer and sample."""
    config = fixtures.tiny_config(num_attention_heads=8, attention_head_dim=8)
    ref = fixtures.build_reference(config, seed=3)
    root = fixtures.save_reference(ref, tmp_path_factory.mktemp("sharded"), "diffusers")
    model = WanVACETransformer(WanVACEConfig.from_hf_config(config))
    tree = convert(load_spec("wan/vace_transformer"), root, model.param_shapes(), dtype="float32")
    inputs = list(_ours(_inputs(config, seed=3), torch.tensor([0.8, 1.2])))
    inputs[5] = jnp.asarray([[0.8, 1.2], [1.1, -0.3]])
    one_device = _forward(model, jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/")), *inputs)
    return model, tree, tuple(inputs), np.asarray(one_device)


@pytest.mark.parametrize("dp, tp, sp", [(2, 2, 2), (1, 2, 4)])
def test_sharded_equals_one_device(sharded_case, dp, tp, sp):
    model, tree, inputs, want = sharded_case
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place_model(model, tree, DIT_RULES, mesh)
    assert params["vace_blocks"]["attn1"]["to_q"]["kernel"].sharding.spec[-1] == "tensor"
    with use_mesh(mesh, DIT_RULES):
        got = _forward(model, params, *inputs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
