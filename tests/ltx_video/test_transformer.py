"""LTX-Video DiT parity with diffusers `LTXVideoTransformer3DModel`, through the real spec `ltx_video/transformer`.

A tiny perturbed reference (width 32: two unrotated RoPE channels, as the released 2048 / 4096 widths
have) is saved in the diffusers layout, converted with `vidax.translator.convert`, and compared in fp32
at highest matmul precision: RoPE tables for both position paths (`LTXPipeline`'s interpolation scale,
`LTXConditionPipeline`'s video coordinates), one block on the reference block's own inputs, the whole
model with a padded caption mask and per-sample or per-token timesteps, the official single file, and
the streamed-offload runner.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXConditionPipeline

from vidax.translator import convert, load_spec
from vidax.zoo.ltx_video import rope
from vidax.zoo.ltx_video.config import LTXConfigError, TransformerConfig
from vidax.zoo.ltx_video.transformer import Context, LTXVideoTransformer
from vidax.zoo.weights.offload import StreamedDiT
from vidax.zoo.compute.runtime import BF16

from .references.helpers import load_params, to_np
from .references.ltx_spec_fixtures import TINY_DIT, dit_reference, diffusers_config, save, save_official_file

GRID = (3, 4, 5)  # latent frames, height, width: 60 tokens
TOKENS = 60
TEXT = 7
FPS = 24

_forward = jax.jit(lambda model, params, *inputs: model(params, *inputs), static_argnums=0)
_block = jax.jit(lambda model, params, hidden, ctx: model.block.apply({"params": params}, hidden, ctx), static_argnums=0)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    ref = dit_reference()
    root = tmp_path_factory.mktemp("ltx_dit")
    save(ref.state_dict(), root / "transformer", diffusers_config(ref, "LTXVideoTransformer3DModel"))
    cfg = TransformerConfig.from_hf_config(json.loads((root / "transformer" / "config.json").read_text()))
    model = LTXVideoTransformer(cfg)
    return ref, model, load_params("ltx_video/transformer", root, model.param_shapes()), root


def make_inputs(cfg: TransformerConfig, batch: int = 2, seed: int = 0, per_token: bool = False) -> dict:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, TEXT)
    mask[0, 4:] = 0  # a padded caption: the masked keys must not count
    timestep = torch.tensor([999.0, 321.5][:batch])
    if per_token:  # conditioning frame 0 at a lower timestep, as LTXConditionPipeline passes it
        timestep = timestep[:, None].repeat(1, TOKENS)
        timestep[:, : TOKENS // GRID[0]] = torch.tensor([0.0, 150.0][:batch])[:, None]
    return {
        "hidden_states": torch.randn(batch, TOKENS, cfg.in_channels, generator=gen),
        "encoder_hidden_states": torch.randn(batch, TEXT, cfg.caption_channels, generator=gen),
        "timestep": timestep,
        "encoder_attention_mask": mask,
    }


def reference_out(ref, inputs: dict) -> np.ndarray:
    with torch.no_grad():
        return to_np(ref(**inputs, num_frames=GRID[0], height=GRID[1], width=GRID[2],
                         rope_interpolation_scale=(8 / FPS, 32, 32), return_dict=False)[0])


def our_inputs(cfg: TransformerConfig, inputs: dict) -> tuple:
    cos, sin = rope.rope_tables(rope.grid_coords(1, *GRID, cfg, frame_rate=FPS), cfg)
    j = lambda t: jnp.asarray(to_np(t))  # noqa: E731
    return (j(inputs["hidden_states"]), j(inputs["encoder_hidden_states"]), j(inputs["encoder_attention_mask"]),
            j(inputs["timestep"]), cos, sin)


# --- config ----------------------------------------------------------------------------------

# Published transformer configs: diffusers Lightricks/LTX-Video (2B 0.9.x) and the 0.9.7 / 0.9.8 13B
# (diffusers scripts/convert_ltx_to_diffusers.py get_transformer_config), with the official header
# configs of the same models (ltx_video/utils/diffusers_config_mapping.py OURS_TRANSFORMER_CONFIG;
# 13B: 48 layers x 32 heads x 128, cross-attention 4096).
DIFFUSERS_2B = {"_class_name": "LTXVideoTransformer3DModel", "activation_fn": "gelu-approximate", "attention_bias": True,
                "attention_head_dim": 64, "attention_out_bias": True, "caption_channels": 4096,
                "cross_attention_dim": 2048, "in_channels": 128, "norm_elementwise_affine": False, "norm_eps": 1e-06,
                "num_attention_heads": 32, "num_layers": 28, "out_channels": 128, "patch_size": 1, "patch_size_t": 1,
                "qk_norm": "rms_norm_across_heads"}
DIFFUSERS_13B = {**DIFFUSERS_2B, "attention_head_dim": 128, "cross_attention_dim": 4096, "num_layers": 48}
OFFICIAL_2B = {"_class_name": "Transformer3DModel", "activation_fn": "gelu-approximate", "attention_bias": True,
               "attention_head_dim": 64, "attention_type": "default", "caption_channels": 4096,
               "cross_attention_dim": 2048, "double_self_attention": False, "dropout": 0.0, "in_channels": 128,
               "norm_elementwise_affine": False, "norm_eps": 1e-06, "norm_num_groups": 32, "num_attention_heads": 32,
               "num_embeds_ada_norm": 1000, "num_layers": 28, "num_vector_embeds": None, "only_cross_attention": False,
               "out_channels": 128, "project_to_2d_pos": True, "upcast_attention": False,
               "use_linear_projection": False, "qk_norm": "rms_norm", "standardization_norm": "rms_norm",
               "positional_embedding_type": "rope", "positional_embedding_theta": 10000.0,
               "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000}
OFFICIAL_13B = {**OFFICIAL_2B, "attention_head_dim": 128, "cross_attention_dim": 4096, "num_layers": 48,
                "causal_temporal_positioning": True}


@pytest.mark.parametrize("diffusers_json, official_json", [(DIFFUSERS_2B, OFFICIAL_2B), (DIFFUSERS_13B, OFFICIAL_13B)],
                         ids=["2b", "13b"])
def test_config_same_from_both_layouts(diffusers_json, official_json):
    from_diffusers = TransformerConfig.from_hf_config(diffusers_json)
    from_official = TransformerConfig.from_official_config({"transformer": official_json})
    assert dataclasses.replace(from_official, causal_temporal_positioning=None) == from_diffusers
    assert from_official.causal_temporal_positioning == official_json.get("causal_temporal_positioning", False)
    assert from_diffusers.inner_dim == official_json["num_attention_heads"] * official_json["attention_head_dim"]


def test_config_rejects_what_it_cannot_run():
    with pytest.raises(LTXConfigError, match="qk_norm"):
        TransformerConfig.from_hf_config({**DIFFUSERS_2B, "qk_norm": "rms_norm"})
    with pytest.raises(LTXConfigError, match="cross_attention_dim"):
        TransformerConfig.from_hf_config({**DIFFUSERS_2B, "cross_attention_dim": 4096})
    with pytest.raises(LTXConfigError, match="adaptive_norm"):
        TransformerConfig.from_official_config({**OFFICIAL_2B, "adaptive_norm": "single_scale"})
    with pytest.raises(LTXConfigError, match="timestep_scale_multiplier"):
        TransformerConfig.from_official_config({**OFFICIAL_2B, "timestep_scale_multiplier": 1})


# --- RoPE ------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads, head_dim", [(2, 16), (3, 8), (2, 24)])
def test_rope_grid_path_matches_reference(case, heads, head_dim):
    """`LTXPipeline`'s positions (rope_interpolation_scale), widths with 2, 0 and 0 unrotated channels."""
    ref = case[0]
    cfg = TransformerConfig(num_attention_heads=heads, attention_head_dim=head_dim, cross_attention_dim=heads * head_dim)
    reference = type(ref.rope)(dim=cfg.inner_dim)
    with torch.no_grad():
        cos, sin = reference(torch.zeros(2, TOKENS, 1), *GRID, (8 / FPS, 32, 32))
    coords = rope.grid_coords(2, *GRID, cfg, frame_rate=FPS)
    np.testing.assert_array_equal(coords, to_np(reference._prepare_video_coords(2, *GRID, (8 / FPS, 32, 32), "cpu")))
    ours = rope.rope_tables(coords, cfg)
    np.testing.assert_allclose(ours[0], to_np(cos), rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours[1], to_np(sin), rtol=0, atol=1e-6)


@pytest.mark.parametrize("frame_index", [0, 9])
def test_rope_video_coords_path_matches_reference(case, frame_index):
    """`LTXConditionPipeline`'s positions: causal frame fix, frame offset of a condition, 1 / fps."""
    ref = case[0]
    cfg = TransformerConfig(**{k: v for k, v in TINY_DIT.items()})
    ids = LTXConditionPipeline._prepare_video_ids(2, *GRID)
    scaled = LTXConditionPipeline._scale_video_ids(ids, 32, 8, frame_index=frame_index)
    ours_ids = rope.scale_ids(rope.latent_ids(*GRID), frame_index=frame_index)
    np.testing.assert_array_equal(ours_ids, scaled[0].numpy())
    coords = scaled.float()
    coords[:, 0] = coords[:, 0] * (1.0 / 25)
    with torch.no_grad():
        cos, sin = ref.rope(torch.zeros(2, TOKENS, 1), video_coords=coords)
    ours = rope.rope_tables(rope.video_coords(np.stack([ours_ids] * 2), cfg, frame_rate=25), cfg)
    np.testing.assert_allclose(ours[0], to_np(cos), rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours[1], to_np(sin), rtol=0, atol=1e-6)


def test_rope_frequencies_at_released_widths():
    """At 2048 / 4096 the tables agree with torch to its own fp32 angle rounding (a 1-ulp `pow` difference
    on a few frequencies moves the largest angles, ~15708 rad, by ~1e-3)."""
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

    for heads, head_dim in ((32, 64), (32, 128)):
        cfg = TransformerConfig(num_attention_heads=heads, attention_head_dim=head_dim, cross_attention_dim=heads * head_dim)
        with torch.no_grad():
            cos, _ = LTXVideoRotaryPosEmbed(dim=cfg.inner_dim)(torch.zeros(1, 88, 1), 2, 4, 11, (8 / 25, 32, 32))
        ours, _ = rope.rope_tables(rope.grid_coords(1, 2, 4, 11, cfg, frame_rate=25), cfg)
        np.testing.assert_allclose(ours, to_np(cos), rtol=0, atol=1e-3)


# --- per block -------------------------------------------------------------------------------


def _capture_block(ref, index: int, inputs: dict):
    seen = {}

    def hook(module, args, kwargs, output):
        seen["kwargs"], seen["out"] = kwargs, output

    handle = ref.transformer_blocks[index].register_forward_hook(hook, with_kwargs=True)
    try:
        reference_out(ref, inputs)
    finally:
        handle.remove()
    return seen["kwargs"], to_np(seen["out"])


@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
def test_block_matches_reference(case, per_token):
    ref, model, params, _ = case
    layer = 1  # not the first: the stacked axis must be indexed right
    inputs = make_inputs(model.cfg, per_token=per_token)
    kwargs, want = _capture_block(ref, layer, inputs)
    j = lambda t: jnp.asarray(to_np(t))  # noqa: E731
    cos, sin = kwargs["image_rotary_emb"]
    ctx = Context(modulation=j(kwargs["temb"]), embedded_timestep=jnp.zeros((2, 1, model.cfg.inner_dim)),
                  text=j(kwargs["encoder_hidden_states"]), text_mask=j(inputs["encoder_attention_mask"]).astype(bool),
                  rope_cos=j(cos), rope_sin=j(sin))
    got = _block(model, jax.tree.map(lambda a: a[layer], params["blocks"]), j(kwargs["hidden_states"]), ctx)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize("per_token", [False, True], ids=["per_sample", "per_token"])
def test_forward_matches_reference(case, per_token):
    ref, model, params, _ = case
    inputs = make_inputs(model.cfg, per_token=per_token)
    got = _forward(model, params, *our_inputs(model.cfg, inputs))
    want = reference_out(ref, inputs)
    assert got.shape == want.shape == (2, TOKENS, model.cfg.out_channels)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_caption_padding_is_masked(case):
    """Changing what sits under a zero mask changes nothing (and the test inputs do pad)."""
    _, model, params, _ = case
    inputs = make_inputs(model.cfg)
    args = list(our_inputs(model.cfg, inputs))
    base = np.asarray(_forward(model, params, *args))
    args[1] = args[1].at[0, 4:].set(5.0)
    np.testing.assert_array_equal(np.asarray(_forward(model, params, *args))[0], base[0])


def test_official_single_file_runs_the_same(case, tmp_path):
    """The official file (DiT and VAE under their prefixes, config in the header) gives the same model."""
    from .references.ltx_spec_fixtures import vae_reference
    from vidax.zoo.ltx_video.config import read_checkpoint_config

    ref, model, _, _ = case
    path = save_official_file(tmp_path / "ltxv-tiny.safetensors", dit=ref, vae=vae_reference())
    cfg = TransformerConfig.from_official_config(read_checkpoint_config(path))
    assert dataclasses.replace(cfg, causal_temporal_positioning=None) == model.cfg
    params = load_params("ltx_video/transformer", path, LTXVideoTransformer(cfg).param_shapes())
    inputs = make_inputs(model.cfg, seed=1)
    got = _forward(LTXVideoTransformer(cfg), params, *our_inputs(cfg, inputs))
    np.testing.assert_allclose(np.asarray(got), reference_out(ref, inputs), rtol=1e-5, atol=1e-5)


def test_streamed_offload_matches_reference(case):
    """The runtime's offload runner drives the same embed / block / head (chunks of one block)."""
    ref, model, params, _ = case
    params = dict(params)
    streamed = StreamedDiT(model, chunk=1)
    host = streamed.offload({"blocks": params.pop("blocks")})
    inputs = make_inputs(model.cfg, per_token=True)
    got = streamed(params, host, *our_inputs(model.cfg, inputs))
    np.testing.assert_allclose(np.asarray(got), reference_out(ref, inputs), rtol=1e-5, atol=1e-5)


def test_bf16_activations_keep_an_fp32_residual_stream(case):
    """Production dtypes: the spec's default policy (bf16 weights, fp32 tables / time embedding), bf16 activations."""
    ref, model, _, root = case
    bf16 = LTXVideoTransformer(model.cfg, dtype=jnp.bfloat16)
    tree = convert(load_spec("ltx_video/transformer"), root, bf16.param_shapes())
    assert tree["blocks/scale_shift_table"].dtype == np.float32 and tree["blocks/attn1/to_q/kernel"].dtype != np.float32
    assert tree["time_embed/linear/kernel"].dtype == np.float32
    params = jax.device_put({k: v for k, v in __import__("flax").traverse_util.unflatten_dict(dict(tree), sep="/").items()})
    inputs = make_inputs(model.cfg)
    hidden, ctx = jax.jit(bf16.embed)(params, *our_inputs(model.cfg, inputs))
    assert hidden.dtype == jnp.float32 and ctx.modulation.dtype == jnp.float32
    out = _forward(bf16, params, *our_inputs(model.cfg, inputs))
    # bf16 weights and matmuls: ~3 significant digits, far from a structural error (outputs ~1)
    np.testing.assert_allclose(np.asarray(out, np.float32), reference_out(ref, inputs), rtol=0, atol=5e-2)
    assert LTXVideoTransformer.with_precision(model.cfg, BF16) == bf16


def test_bad_inputs_are_clear_errors(case):
    _, model, params, _ = case
    tokens, text, mask, timestep, cos, sin = our_inputs(model.cfg, make_inputs(model.cfg))
    with pytest.raises(ValueError, match=r"packed tokens \[B, S, 8\]"):
        model.embed(params, tokens[..., :4], text, mask, timestep, cos, sin)
    with pytest.raises(ValueError, match=r"per token \[2, 60\]"):
        model.embed(params, tokens, text, mask, timestep[:, None].repeat(3, 1), cos, sin)
    with pytest.raises(ValueError, match="caption mask"):
        model.embed(params, tokens, text, mask[:, :3], timestep, cos, sin)
    with pytest.raises(ValueError, match="rope_tables"):
        model.embed(params, tokens, text, mask, timestep, cos[:, :10], sin)


def test_precision_budget(case):
    """Under the runtime's default precision only proj_in, the timestep embedding and proj_out run at
    "highest" (the module docstring's measured places); every block matmul and attention stays default."""
    import re

    _, model, params, _ = case
    with jax.default_matmul_precision("default"):
        text = jax.jit(lambda p, *i: model(p, *i)).lower(params, *our_inputs(model.cfg, make_inputs(model.cfg))).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    kernels = [re.search(r", tensor<(\d+)x(\d+)xf32>\) ->", line) for line in dots if "HIGHEST" in line]
    highest = sorted(f"{k.group(1)}>{k.group(2)}" for k in kernels)  # the [in, out] weight of each such dot
    d, c = model.cfg.inner_dim, model.cfg
    assert highest == sorted([f"{c.in_channels}>{d}", f"256>{d}", f"{d}>{d}", f"{d}>{6 * d}", f"{d}>{c.out_channels}"])
    assert sum("DEFAULT" in line for line in dots) >= 2 * 8  # per block: q, k, v, out x 2, ff x 2, QK^T, PV
