"""CogVideoX DiT parity with diffusers `CogVideoXTransformer3DModel`, through the real specs.

Tiny perturbed references of every variant (2B sincos, 5B RoPE, 5B-I2V learned table, 1.5 with
`patch_size_t` 2, 1.5 I2V with ofs) are saved in the diffusers folder layout, converted with
`vidax.translator.convert`, and compared in fp32 at highest matmul precision: the embedding, one
block on the reference block's own inputs, and the whole model (RoPE from the pipeline's own
`_prepare_rotary_positional_embeddings`). Also: the SAT layout of 1.5 runs the same, the learned
table's frame-count quirk, the bf16 production dtypes, configs and input errors (the released
sizes are checked against diffusers in test_registry.py).
"""

from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline
from flax import traverse_util
from vidax.translator import AccountingError, convert, load_spec
from vidax.zoo.cogvideox.config import CogVideoXConfigError, CogVideoXTransformerConfig
from vidax.zoo.cogvideox.rope import rotary_tables, sincos_table
from vidax.zoo.cogvideox.transformer import (
    LEARNED,
    SINCOS,
    CogVideoXTransformer,
    Context,
    JointStream,
    position_mode,
)
from vidax.zoo.compute.runtime import BF16

from tests.oracle import recorded, save_diffusers, spec_without_rule, state_of

from . import cogvideox_spec_fixtures as fx

ATOL = 1e-5  # fp32; observed max error ~7e-7 on outputs of magnitude ~2
SIZES = {"2b": (3, 6, 8), "5b": (3, 6, 8), "5b_i2v": (3, 6, 8), "15": (4, 6, 8), "15_i2v": (4, 8, 6)}

_forward = jax.jit(lambda model, params, *inputs: model(params, *inputs), static_argnums=0)


def pipeline_rope(ref, frames: int, height: int, width: int):
    """The pipeline's own RoPE tables for latents of this size (its method on a stand-in `self`)."""
    stand_in = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=ref)
    return CogVideoXPipeline._prepare_rotary_positional_embeddings(stand_in, height * 8, width * 8, frames, "cpu")


@dataclasses.dataclass
class Case:
    ref: torch.nn.Module
    model: CogVideoXTransformer
    params: dict
    root: object
    inputs: dict  # the reference forward's keyword inputs
    ours: tuple  # the same inputs for our model (vidax latent layout)
    want: np.ndarray  # [B, F, C, H, W]


def make_inputs(ref, size, seed: int = 0):
    f, h, w = size
    cfg = ref.config
    gen = torch.Generator().manual_seed(seed)
    inputs = dict(
        hidden_states=torch.randn(2, f, cfg.in_channels, h, w, generator=gen),
        encoder_hidden_states=torch.randn(2, fx.TEXT_LEN, fx.TEXT_DIM, generator=gen) * 3,
        timestep=torch.tensor([999, 321]),
    )
    if cfg.use_rotary_positional_embeddings:
        inputs["image_rotary_emb"] = pipeline_rope(ref, f, h, w)
    if cfg.ofs_embed_dim:
        inputs["ofs"] = torch.full((1,), 2.0)  # as the I2V pipeline passes it: one value for the batch
    ours = (
        jnp.asarray(inputs["hidden_states"].numpy().transpose(0, 2, 1, 3, 4)),
        jnp.asarray(inputs["timestep"].numpy().astype(np.float32)),
        jnp.asarray(inputs["encoder_hidden_states"].numpy()),
        jnp.asarray([2.0]) if cfg.ofs_embed_dim else None,
    )
    return inputs, ours


def load_params(spec, root, model, **kwargs) -> dict:
    tree = convert(load_spec(spec), root, model.param_shapes(), dtype="float32", **kwargs)
    return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    built = {}

    def get(variant: str) -> Case:
        if variant not in built:
            ref = fx.dit_reference(variant)
            root = tmp_path_factory.mktemp(variant)
            save_diffusers(ref, root / "transformer")
            model = CogVideoXTransformer(CogVideoXTransformerConfig.from_hf_config(fx.config_json(ref)))
            params = load_params(fx.SPEC_OF[variant], root, model)
            inputs, ours = make_inputs(ref, SIZES[variant])
            with torch.no_grad():
                want = ref(**inputs, return_dict=False)[0].numpy()
            built[variant] = Case(ref, model, params, root, inputs, ours, want)
        return built[variant]

    return get


def to_reference_layout(out) -> np.ndarray:
    return np.asarray(out).transpose(0, 2, 1, 3, 4)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(SIZES))
def test_forward_matches_reference(cases, variant):
    case = cases(variant)
    got = to_reference_layout(_forward(case.model, case.params, *case.ours))
    assert got.shape == case.want.shape
    np.testing.assert_allclose(got, case.want, rtol=1e-5, atol=ATOL)


def _capture(ref, inputs: dict, layer: int):
    """What block `layer` received and returned during a full reference forward pass."""
    with recorded(ref.transformer_blocks[layer]) as seen, torch.no_grad():
        ref(**inputs, return_dict=False)
    return seen["kwargs"], seen["out"]


@pytest.mark.parametrize("variant", ["2b", "5b_i2v", "15_i2v"])
def test_embed_and_block_match_reference(cases, variant):
    """Embed: the tokens and time embedding diffusers hands block 0; one block (the second) on the
    reference block's own inputs."""
    case = cases(variant)
    seen, _ = _capture(case.ref, case.inputs, 0)
    hidden, ctx = jax.jit(case.model.embed)(case.params, *case.ours)
    np.testing.assert_allclose(np.asarray(hidden.video), seen["hidden_states"].numpy(), rtol=1e-5, atol=ATOL)
    np.testing.assert_allclose(np.asarray(hidden.text), seen["encoder_hidden_states"].numpy(), rtol=1e-5, atol=ATOL)
    np.testing.assert_allclose(np.asarray(ctx.temb), seen["temb"].numpy(), rtol=1e-5, atol=ATOL)

    layer = 1  # not the first: the stacked axis must be indexed right
    seen, (want_video, want_text) = _capture(case.ref, case.inputs, layer)
    rope = seen["image_rotary_emb"]
    j = lambda t: jnp.asarray(t.numpy())  # noqa: E731
    ctx = Context(j(seen["temb"]), None if rope is None else j(rope[0]), None if rope is None else j(rope[1]))
    params = jax.tree.map(lambda a: a[layer], case.params["blocks"])
    out = jax.jit(case.model.block.apply)({"params": params}, JointStream(j(seen["hidden_states"]),
                                                                        j(seen["encoder_hidden_states"])), ctx)
    np.testing.assert_allclose(np.asarray(out.video), want_video.numpy(), rtol=1e-5, atol=ATOL)
    np.testing.assert_allclose(np.asarray(out.text), want_text.numpy(), rtol=1e-5, atol=ATOL)


def test_sat_layout_runs_the_same(cases, tmp_path):
    """1.5's SAT checkpoint (THUDM/CogVideoX1.5-5B-SAT layout) converts to the same model."""
    case = cases("15_i2v")
    root = fx.save_sat(state_of(case.ref), tmp_path, "i2v")
    params = load_params("cogvideox/transformer15", root, case.model)
    got = to_reference_layout(_forward(case.model, params, *case.ours))
    np.testing.assert_allclose(got, case.want, rtol=1e-5, atol=ATOL)


def test_learned_table_becomes_sincos_off_its_frame_count(cases):
    """5B-I2V: diffusers uses the learned table only at the sample size; another frame count gets
    the sincos table (the reference's quirk, kept), another height or width is refused."""
    case = cases("5b_i2v")
    cfg = case.model.cfg
    assert position_mode(cfg, 3, 6, 8) == LEARNED
    assert position_mode(cfg, 2, 6, 8) == SINCOS
    inputs, ours = make_inputs(case.ref, (2, 6, 8), seed=1)
    with torch.no_grad():
        want = case.ref(**inputs, return_dict=False)[0].numpy()
    np.testing.assert_allclose(to_reference_layout(_forward(case.model, case.params, *ours)), want, rtol=1e-5,
                               atol=ATOL)
    with pytest.raises(CogVideoXConfigError, match="learned position table covers 6 x 8"):
        case.model.embed(case.params, ours[0][..., :6], *ours[1:])


def test_position_tables_match_the_pipeline(cases):
    case = cases("5b")
    for size in [(3, 6, 8), (2, 4, 10), (5, 8, 6)]:  # off the sample size: fractional 1.0 positions
        cos, sin = pipeline_rope(case.ref, *size)
        ours = rotary_tables(case.model.cfg, *size)
        np.testing.assert_allclose(ours[0], cos.numpy(), rtol=0, atol=2e-7)  # float32 cos, 1 ulp
        np.testing.assert_allclose(ours[1], sin.numpy(), rtol=0, atol=2e-7)
    ref2b = cases("2b").ref
    table = ref2b.patch_embed._get_positional_embeddings(4, 10, 9)  # pixel frames, latent height/width
    np.testing.assert_array_equal(sincos_table(cases("2b").model.cfg, 3, 4, 10),
                                  table[0, fx.TEXT_LEN:].float().numpy())


def test_bf16_keeps_fp32_text_and_residual_streams(cases):
    """Production dtypes: the spec's policy (bf16 weights, fp32 norms/embeddings/text projection)."""
    case = cases("5b")
    model = CogVideoXTransformer.with_precision(case.model.cfg, BF16)
    tree = convert(load_spec("cogvideox/transformer"), case.root, model.param_shapes())
    assert tree["patch_embed/text_proj/kernel"].dtype == np.float32
    assert tree["blocks/attn1/to_q/kernel"].dtype.name == "bfloat16"
    params = jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))
    hidden, ctx = jax.eval_shape(model.embed, params, *case.ours)  # dtypes without a compile
    assert hidden.video.dtype == hidden.text.dtype == ctx.temb.dtype == jnp.float32
    after = jax.eval_shape(model.block.apply, {"params": jax.tree.map(lambda a: a[0], params["blocks"])}, hidden, ctx)
    assert after.text.dtype == jnp.float32 and after.video.dtype == jnp.float32
    out = to_reference_layout(_forward(model, params, *case.ours))
    # bf16 weights and matmuls: ~3 significant digits, far from a structural error (outputs ~2)
    np.testing.assert_allclose(out.astype(np.float32), case.want, rtol=0, atol=5e-2)


def test_broken_spec_fails_loudly(cases, tmp_path):
    """Dropping the AdaLN split rule leaves keys unclaimed and leaves unproduced: one clear error."""
    case = cases("5b")
    broken = spec_without_rule("cogvideox/transformer", "[[layouts.diffusers.rules]]\n# CogVideoXLayerNormZero.linear", tmp_path)
    with pytest.raises(AccountingError, match="norm1.linear.weight"):
        convert(load_spec(broken), case.root, case.model.param_shapes())


# --- config and inputs -----------------------------------------------------------------------

def test_config_rejects_what_it_cannot_run():
    with pytest.raises(CogVideoXConfigError, match="learned positional embeddings without RoPE"):
        CogVideoXTransformerConfig(use_learned_positional_embeddings=True)
    with pytest.raises(CogVideoXConfigError, match="activation_fn"):
        CogVideoXTransformerConfig(activation_fn="gelu")
    with pytest.raises(CogVideoXConfigError, match="ofs_embed_dim 256"):
        CogVideoXTransformerConfig(ofs_embed_dim=256)
    cfg = CogVideoXTransformerConfig.from_hf_config({"_class_name": "CogVideoXTransformer3DModel", "dropout": 0.0,
                                                     "out_channels": None, "patch_size_t": 2})
    assert cfg.out_channels == 16 and cfg.patch == (2, 2, 2)


def test_bad_inputs_are_clear_errors(cases):
    case = cases("15_i2v")
    latents, timestep, text, ofs = case.ours
    with pytest.raises(ValueError, match=r"latents \[B, 8, F, H, W\]"):
        case.model.embed(case.params, latents[:, :4], timestep, text, ofs)
    with pytest.raises(ValueError, match="not a multiple of the patch"):
        case.model.embed(case.params, latents[:, :, :3], timestep, text, ofs)
    with pytest.raises(ValueError, match=r"ofs \[1\] or \[2\]"):
        case.model.embed(case.params, latents, timestep, text, None)
    two_b = cases("2b")
    latents, timestep, text, _ = two_b.ours
    with pytest.raises(ValueError, match="exactly 7 text tokens"):
        two_b.model.embed(two_b.params, latents, timestep, text[:, :5])
