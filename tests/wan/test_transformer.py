"""Wan DiT parity with diffusers `WanTransformer3DModel`, through the real spec `wan/transformer`.

Tiny perturbed references are saved in the real folder layouts (conftest.py), converted with
`vidax.translator.convert`, and compared in fp32 at highest matmul precision: one block on the
reference block's own inputs, and the whole model, for T2V, I2V (512 text tokens + CLIP tokens),
FLF2V, TI2V-5B (48 channels, per-token timesteps), both layouts, the A14B two-expert folders, the
streamed-offload runner, and sharded runs (dp/tp/sp on 8 fake CPU devices) against one device.
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
from vidax.translator import convert, load_spec
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.weights.offload import StreamedDiT
from vidax.zoo.compute.runtime import BF16, use_mesh
from vidax.zoo.compute.sharding import place_model
from vidax.zoo.wan.config import WanConfigError, WanTransformerConfig
from vidax.zoo.wan.rope import rope_tables
from vidax.zoo.wan.sharding import DIT_RULES
from vidax.zoo.wan.transformer import Context, WanTransformer

LATENT = (3, 4, 6)  # latent frames, height, width -> 3 x 2 x 3 = 18 tokens after the (1, 2, 2) patch
TOKENS = 18


_forward = jax.jit(lambda model, params, *inputs: model(params, *inputs), static_argnums=0)
_block = jax.jit(lambda model, params, hidden, ctx: model.block.apply({"params": params}, hidden, ctx),
                 static_argnums=0)


@pytest.fixture(scope="module")
def spec():
    return load_spec("wan/transformer")


def make_inputs(config: dict, variant: str, batch: int = 1, seed: int = 0) -> dict[str, torch.Tensor]:
    """Reference-forward inputs; I2V feeds 512 text tokens because the reference splits on 512."""
    gen = torch.Generator().manual_seed(seed)
    text_len = 512 if config.get("image_dim") else 9
    inputs = {
        "hidden_states": torch.randn(batch, config["in_channels"], *LATENT, generator=gen),
        "timestep": torch.tensor([999.0, 321.5][:batch]),
        "encoder_hidden_states": torch.randn(batch, text_len, config["text_dim"], generator=gen),
        "encoder_hidden_states_image": None,
    }
    if variant == "i2v":
        inputs["encoder_hidden_states_image"] = torch.randn(batch, 257, config["image_dim"], generator=gen)
    if variant == "flf2v":  # first- and last-frame tokens, folded by the reference into one row
        inputs["encoder_hidden_states_image"] = torch.randn(2 * batch, config["pos_embed_seq_len"] // 2,
                                                            config["image_dim"], generator=gen)
    if variant == "ti2v":  # expand_timesteps: the first latent frame's tokens at t = 0
        per_token = inputs["timestep"][:, None].repeat(1, TOKENS)
        per_token[:, : TOKENS // LATENT[0]] = 0.0
        inputs["timestep"] = per_token
    return inputs


def as_jax(inputs: dict) -> tuple:
    names = ("hidden_states", "timestep", "encoder_hidden_states", "encoder_hidden_states_image")
    return tuple(None if inputs[n] is None else jnp.asarray(inputs[n].numpy()) for n in names)


def load_params(spec, root, model: WanTransformer, **kwargs) -> dict:
    tree = convert(spec, root, model.param_shapes(), dtype="float32", **kwargs)
    return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))


@dataclasses.dataclass
class Case:
    ref: torch.nn.Module
    model: WanTransformer
    params: dict
    inputs: dict
    want: np.ndarray
    root: object


@pytest.fixture(scope="module")
def cases(tmp_path_factory, spec, wan_dit):
    """Per variant (built on first use): reference, converted params (diffusers layout), expected output."""
    built = {}

    def get(variant: str) -> Case:
        if variant not in built:
            config = wan_dit.tiny_config(variant)
            ref = wan_dit.build_reference(config)
            root = wan_dit.save_reference(ref, tmp_path_factory.mktemp(variant), "diffusers")
            cfg = WanTransformerConfig.from_hf_config(json.loads((root / "transformer" / "config.json").read_text()))
            model = WanTransformer(cfg)
            inputs = make_inputs(config, variant, batch=2)
            with torch.no_grad():
                want = ref(**inputs, return_dict=False)[0].numpy()
            built[variant] = Case(ref, model, load_params(spec, root, model), inputs, want, root)
        return built[variant]

    return get


# --- config ----------------------------------------------------------------------------------

# Published configs (Hub config.json files) of the same model in both layouts.
PUBLISHED = {
    "wan2.1-t2v-1.3b": (
        {"_class_name": "WanTransformer3DModel", "added_kv_proj_dim": None, "attention_head_dim": 128,
         "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 8960, "freq_dim": 256, "image_dim": None, "in_channels": 16,
         "num_attention_heads": 12, "num_layers": 30, "out_channels": 16, "patch_size": [1, 2, 2],
         "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096},
        {"_class_name": "WanModel", "dim": 1536, "eps": 1e-06, "ffn_dim": 8960, "freq_dim": 256, "in_dim": 16,
         "model_type": "t2v", "num_heads": 12, "num_layers": 30, "out_dim": 16, "text_len": 512},
    ),
    "wan2.1-i2v-14b": (
        {"_class_name": "WanTransformer3DModel", "added_kv_proj_dim": 5120, "attention_head_dim": 128,
         "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 13824, "freq_dim": 256, "image_dim": 1280,
         "in_channels": 36, "num_attention_heads": 40, "num_layers": 40, "out_channels": 16, "patch_size": [1, 2, 2],
         "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096},
        {"_class_name": "WanModel", "dim": 5120, "eps": 1e-06, "ffn_dim": 13824, "freq_dim": 256, "in_dim": 36,
         "model_type": "i2v", "num_heads": 40, "num_layers": 40, "out_dim": 16, "text_len": 512},
    ),
    "wan2.2-ti2v-5b": (
        {"_class_name": "WanTransformer3DModel", "added_kv_proj_dim": None, "attention_head_dim": 128,
         "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 14336, "freq_dim": 256, "image_dim": None, "in_channels": 48,
         "num_attention_heads": 24, "num_layers": 30, "out_channels": 48, "patch_size": [1, 2, 2],
         "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096},
        {"_class_name": "WanModel", "dim": 3072, "eps": 1e-06, "ffn_dim": 14336, "freq_dim": 256, "in_dim": 48,
         "model_type": "ti2v", "num_heads": 24, "num_layers": 30, "out_dim": 48, "text_len": 512},
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_same_from_both_layouts(name):
    diffusers_json, official_json = PUBLISHED[name]
    from_diffusers = WanTransformerConfig.from_hf_config(diffusers_json)
    from_official = WanTransformerConfig.from_hf_config(official_json)
    assert dataclasses.replace(from_official, model_type=None) == from_diffusers
    assert from_diffusers.inner_dim == official_json["dim"]


def test_config_image_branch_read_from_shapes():
    # Wan2.2 I2V-A14B's official config says "i2v" like Wan2.1 I2V, but its weights have no image branch
    official = dict(PUBLISHED["wan2.1-i2v-14b"][1])
    assert WanTransformerConfig.from_hf_config(official).has_image
    assert not WanTransformerConfig.from_hf_config(official, param_shapes={"proj_out/kernel": (5120, 64)}).has_image


def test_config_rejects_what_it_cannot_run():
    with pytest.raises(WanConfigError, match="qk_norm"):
        WanTransformerConfig.from_hf_config({"qk_norm": "rms_norm"})
    with pytest.raises(WanConfigError, match="together"):
        WanTransformerConfig.from_hf_config({"image_dim": 1280})
    with pytest.raises(WanConfigError, match="added_kv_proj_dim 1280"):
        WanTransformerConfig.from_hf_config({"image_dim": 1280, "added_kv_proj_dim": 1280})


def test_rope_tables_match_reference(cases):
    case = cases("t2v")
    with torch.no_grad():
        cos, sin = case.ref.rope(case.inputs["hidden_states"])
    grid = tuple(n // p for n, p in zip(LATENT, case.model.cfg.patch_size))
    ours = rope_tables(case.model.cfg.rope_dims, grid)
    np.testing.assert_array_equal(ours[0], cos[0, :, 0].numpy())
    np.testing.assert_array_equal(ours[1], sin[0, :, 0].numpy())


# --- per block -------------------------------------------------------------------------------


def _capture_block(ref, index: int, inputs: dict):
    """The reference block's positional inputs and output during a full forward pass."""
    seen = {}

    def hook(module, args, output):
        seen["args"], seen["out"] = args, output

    handle = ref.blocks[index].register_forward_hook(hook)
    try:
        with torch.no_grad():
            ref(**inputs, return_dict=False)
    finally:
        handle.remove()
    return seen["args"], seen["out"].numpy()


@pytest.mark.parametrize("variant", ["t2v", "i2v", "ti2v"])
def test_block_matches_reference(cases, variant):
    case = cases(variant)
    layer = 1  # not the first: the stacked axis must be indexed right
    (hidden, context, temb, rope), want = _capture_block(case.ref, layer, case.inputs)
    cfg = case.model.cfg
    b, d = hidden.shape[0], cfg.inner_dim
    image, text = None, context
    if cfg.has_image:  # the reference's own split: the last 512 tokens are text
        image, text = context[:, :-512], context[:, -512:]
    j = lambda t: jnp.asarray(t.numpy())  # noqa: E731
    ctx = Context(
        modulation=j(temb).reshape(b, -1, 6, d),
        temb=jnp.zeros((b, 1, d)),
        text=j(text),
        image=None if image is None else j(image),
        rope_cos=j(rope[0][0, :, 0]),
        rope_sin=j(rope[1][0, :, 0]),
    )
    params = jax.tree.map(lambda a: a[layer], case.params["blocks"])
    got = _block(case.model, params, j(hidden), ctx)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["t2v", "i2v", "flf2v", "ti2v"])
def test_forward_matches_reference(cases, variant):
    case = cases(variant)
    got = _forward(case.model, case.params, *as_jax(case.inputs))
    assert got.shape == case.want.shape
    np.testing.assert_allclose(np.asarray(got), case.want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["t2v", "i2v"])
def test_official_layout_runs_the_same(cases, spec, wan_dit, tmp_path, variant):
    case = cases(variant)
    root = wan_dit.save_reference(case.ref, tmp_path / "official", "official", model_type=variant)
    hf = json.loads((root / "config.json").read_text())
    tree = convert(spec, root, dtype="float32")
    cfg = WanTransformerConfig.from_hf_config(hf, param_shapes={p: a.shape for p, a in tree.items()})
    assert dataclasses.replace(cfg, model_type=None) == case.model.cfg
    got = _forward(WanTransformer(cfg), load_params(spec, root, case.model), *as_jax(case.inputs))
    np.testing.assert_allclose(np.asarray(got), case.want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout, folders", [("diffusers", ("transformer", "transformer_2")),
                                             ("official", ("high_noise_model", "low_noise_model"))])
def test_two_experts_load_with_the_same_code(cases, spec, wan_dit, tmp_path, layout, folders):
    """Wan2.2 A14B: two transformers of one config; the switch between them is the sampler's."""
    case = cases("t2v")
    low_noise = wan_dit.build_reference(wan_dit.tiny_config("t2v"), seed=1)
    for ref, folder in zip((case.ref, low_noise), folders):
        wan_dit.save_reference(ref, tmp_path, layout, subfolder=folder)
    outputs = []
    for ref, folder in zip((case.ref, low_noise), folders):
        subfolder = None if folder == "transformer" else folder
        params = load_params(spec, tmp_path, case.model, subfolder=subfolder)
        with torch.no_grad():
            want = ref(**case.inputs, return_dict=False)[0].numpy()
        got = np.asarray(_forward(case.model, params, *as_jax(case.inputs)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        outputs.append(got)
    assert np.abs(outputs[0] - outputs[1]).max() > 1e-2  # two different experts were loaded


def test_streamed_offload_matches_reference(cases):
    """The runtime's offload runner drives the same embed / block / head (chunks of one block)."""
    case = cases("ti2v")  # per-token modulation: the richest context the blocks receive
    params = dict(case.params)
    streamed = StreamedDiT(case.model, chunk=1)
    host = streamed.offload({"blocks": params.pop("blocks")})
    got = streamed(params, host, *as_jax(case.inputs))
    np.testing.assert_allclose(np.asarray(got), case.want, rtol=1e-5, atol=1e-5)


def test_bf16_activations_keep_an_fp32_residual_stream(cases, spec):
    """Production dtypes: the spec's default policy (bf16 weights, fp32 tables/norms), bf16 activations."""
    case = cases("t2v")
    model = WanTransformer(case.model.cfg, dtype=jnp.bfloat16)
    tree = convert(spec, case.root, model.param_shapes())
    params = jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))
    hidden, ctx = jax.jit(model.embed)(params, *as_jax(case.inputs))
    assert hidden.dtype == jnp.float32 and ctx.modulation.dtype == jnp.float32
    out = _forward(model, params, *as_jax(case.inputs))
    # bf16 weights and matmuls: ~3 significant digits, far from a structural error (outputs ~1)
    np.testing.assert_allclose(np.asarray(out, np.float32), case.want, rtol=0, atol=5e-2)
    assert WanTransformer.with_precision(case.model.cfg, BF16) == model  # runtime default: bf16 + fp32 residual
    bf16_stream = WanTransformer(case.model.cfg, dtype=jnp.bfloat16, residual_dtype=jnp.bfloat16)
    assert jax.jit(bf16_stream.embed)(params, *as_jax(case.inputs))[0].dtype == jnp.bfloat16


def test_bad_inputs_are_clear_errors(cases):
    case = cases("i2v")
    latents, timestep, text, image = as_jax(case.inputs)
    with pytest.raises(ValueError, match="CLIP image embeddings"):
        case.model.embed(case.params, latents, timestep, text, None)
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        case.model.embed(case.params, latents[..., :3], timestep, text, image)
    with pytest.raises(ValueError, match=r"per token \[2, 18\]"):
        case.model.embed(case.params, latents, timestep[:, None], text, image)
    with pytest.raises(ValueError, match=r"latents \[B, 9, F, H, W\]"):
        case.model.embed(case.params, latents[:, :4], timestep, text, image)


# --- sharded ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded_case(tmp_path_factory, spec, wan_dit):
    """8 heads (tp x sp up to 8), I2V image attention, per-token timesteps, batch 2 for dp."""
    config = wan_dit.tiny_config("i2v", num_attention_heads=8, attention_head_dim=8, added_kv_proj_dim=64)
    ref = wan_dit.build_reference(config, seed=3)
    root = wan_dit.save_reference(ref, tmp_path_factory.mktemp("sharded"), "diffusers")
    model = WanTransformer(WanTransformerConfig.from_hf_config(config))
    tree = convert(spec, root, model.param_shapes(), dtype="float32")
    inputs = as_jax(make_inputs(config, "i2v", batch=2, seed=3))
    per_token = jnp.broadcast_to(jnp.linspace(0.0, 999.0, TOKENS), (2, TOKENS))
    inputs = (inputs[0], per_token, inputs[2][:, :16], inputs[3])  # 16 text tokens is plenty here
    one_device = _forward(model, jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/")), *inputs)
    return model, tree, inputs, np.asarray(one_device)


@pytest.mark.parametrize("dp, tp, sp", [(2, 2, 2), (1, 2, 4), (1, 8, 1)])
def test_sharded_equals_one_device(sharded_case, dp, tp, sp):
    model, tree, inputs, want = sharded_case
    mesh = make_mesh(dp=dp, tp=tp, sp=sp)
    params = place_model(model, tree, DIT_RULES, mesh)
    assert params["blocks"]["attn1"]["to_q"]["kernel"].sharding.spec[-1] == "tensor"
    with use_mesh(mesh, DIT_RULES):
        got = _forward(model, params, *inputs)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
