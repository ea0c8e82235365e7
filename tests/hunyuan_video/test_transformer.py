"""HunyuanVideo 1.0 DiT against diffusers `HunyuanVideoTransformer3DModel`, through the real spec.

Tiny perturbed references (T2V, and the I2V token_replace model) saved in the diffusers folder layout
and as the official DeepSpeed `.pt`, converted with `conversion_specs/hunyuan_video/transformer.toml`,
compared in fp32 per stage (embed, dual block 0, single block 0) and end to end, with padded text of
different lengths per sample and different timesteps and guidance per sample.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import AccountingError, convert, load_spec
from vidax.translator.testing import mismatches
from vidax.zoo.hunyuan_video.config import TransformerConfig
from vidax.zoo.hunyuan_video.family import trim_text_padding
from vidax.zoo.hunyuan_video.transformer import Context, DualStream, HunyuanVideoTransformer

from tests.oracle import recorded, save_state, spec_without_rule, to_np, unflatten

from .hunyuan_video_spec_fixtures import dit_reference, save_official_dit

ATOL = 2e-5  # fp32 through ~14 matmul layers and three softmaxes; observed max error ~5e-6 on outputs ~1.6
KINDS = {"t2v": {}, "i2v": {"image_condition_type": "token_replace"}}


@pytest.fixture(scope="module", params=sorted(KINDS))
def setup(request, tmp_path_factory):
    """(kind, reference, model, params from the diffusers folder, the official file's tree)."""
    ref = dit_reference(**KINDS[request.param])
    state = ref.state_dict()
    root = tmp_path_factory.mktemp(f"hv_{request.param}")
    save_state(state, root / "diffusers" / "transformer", dict(ref.config))
    save_official_dit(state, root / "official")
    model = HunyuanVideoTransformer(TransformerConfig.from_hf_config(dict(ref.config)))
    spec = load_spec("hunyuan_video/transformer")
    tree = convert(spec, root / "diffusers", model.param_shapes(), dtype="float32")
    official = convert(spec, root / "official", model.param_shapes(), dtype="float32")
    return request.param, ref, model, unflatten(tree), (tree, official)


def make_inputs(seed: int = 1):
    """Batch of 2: padded text masks (different lengths), timesteps and guidance per sample."""
    g = torch.Generator().manual_seed(seed)
    return dict(
        hidden_states=torch.randn(2, 4, 3, 4, 6, generator=g),
        timestep=torch.tensor([500.0, 20.0]),
        encoder_hidden_states=torch.randn(2, 7, 24, generator=g),
        encoder_attention_mask=torch.tensor([[1] * 5 + [0] * 2, [1] * 7]),
        pooled_projections=torch.randn(2, 12, generator=g),
        guidance=torch.tensor([6000.0, 3500.0]),
    )


def our_inputs(inputs: dict):
    j = lambda t: jnp.asarray(to_np(t))  # noqa: E731
    return (j(inputs["hidden_states"]), j(inputs["timestep"]), j(inputs["encoder_hidden_states"]),
            j(inputs["encoder_attention_mask"]).astype(bool), j(inputs["pooled_projections"]), j(inputs["guidance"]))


def run_reference(reference, inputs: dict):
    """Output, and what dual block 0 and single block 0 received and returned (captured by hooks)."""
    with recorded(reference.transformer_blocks[0]) as dual, recorded(reference.single_transformer_blocks[0]) as single:
        with torch.no_grad():
            out = reference(**inputs).sample
    return to_np(out), {"dual_in": dual["args"], "dual_out": dual["out"],
                        "single_in": single["args"], "single_out": single["out"]}


def block_context(args, grid) -> Context:
    """Our block context from the arguments diffusers passes a block."""
    video, text, temb, mask, (cos, sin), token_replace, _ = args
    text_mask = to_np(mask)[:, 0, 0, video.shape[1]:].astype(bool)  # the key mask's text part
    tr = None if token_replace is None else jnp.asarray(to_np(token_replace))
    return Context(jnp.asarray(to_np(temb)), jnp.asarray(text_mask), jnp.asarray(to_np(cos)),
                   jnp.asarray(to_np(sin)), tr, grid)


def test_official_layout_converts_to_the_diffusers_tree(setup):
    _, _, _, _, (tree, official) = setup
    assert mismatches(official, tree) == []


def test_embed_and_end_to_end(setup):
    kind, ref, model, params, _ = setup
    inputs = make_inputs()
    expected, seen = run_reference(ref, inputs)
    ours_in = our_inputs(inputs)

    # Embed: the tokens, refined text, mask, temb (and token-replace embedding) diffusers hands block 0.
    hidden, ctx = model.embed(params, *ours_in)
    ref_video, ref_text, ref_temb, ref_mask, _, ref_tr, n_first = seen["dual_in"]
    mask = to_np(ref_mask)[:, 0, 0, ref_video.shape[1]:].astype(bool)
    np.testing.assert_array_equal(np.asarray(ctx.text_mask), mask)
    np.testing.assert_allclose(np.asarray(hidden.video), to_np(ref_video), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ctx.temb), to_np(ref_temb), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(hidden.text)[mask], to_np(ref_text)[mask], atol=ATOL, rtol=1e-5)
    if kind == "i2v":
        assert ctx.first_frame_tokens == n_first == 2 * 3
        np.testing.assert_allclose(np.asarray(ctx.token_replace_emb), to_np(ref_tr), atol=ATOL, rtol=1e-5)
    else:
        assert ctx.token_replace_emb is None and ref_tr is None

    out = np.asarray(jax.jit(model.__call__)(params, *ours_in))
    assert out.shape == expected.shape == (2, 4, 3, 4, 6)
    np.testing.assert_allclose(out, expected, atol=ATOL, rtol=1e-5)


def test_trailing_text_padding_is_dropped_exactly(setup):
    """The pipeline drops the text tokens after the last one any row attends to (`trim_text_padding`):
    our DiT on the trimmed text equals diffusers on all of it; cutting one attended token does not."""
    _, ref, model, params, _ = setup
    inputs = make_inputs()
    g = torch.Generator().manual_seed(3)
    inputs["encoder_hidden_states"] = torch.randn(2, 20, 24, generator=g)
    inputs["encoder_attention_mask"] = (torch.arange(20)[None] < torch.tensor([[5], [9]])).long()
    expected, _ = run_reference(ref, inputs)
    video, t, text, mask, pooled, guidance = our_inputs(inputs)
    trimmed, trimmed_mask = trim_text_padding(text, mask, multiple=4)
    assert trimmed.shape[1] == trimmed_mask.shape[1] == 12
    forward = jax.jit(model.__call__)
    out = np.asarray(forward(params, video, t, trimmed, trimmed_mask, pooled, guidance))
    np.testing.assert_allclose(out, expected, atol=ATOL, rtol=1e-5)
    cut = np.asarray(forward(params, video, t, text[:, :8], mask[:, :8], pooled, guidance))
    assert np.abs(cut[1] - expected[1]).max() > 1e-3  # row 2 attends to token 9


@pytest.mark.parametrize("group", ["dual", "single"])
def test_block_zero(setup, group):
    """One block of each kind on diffusers' own inputs to it (padded text rows excluded: they never
    reach the output, and diffusers lets them attend differently)."""
    _, ref, model, params, _ = setup
    _, seen = run_reference(ref, make_inputs(seed=2))
    args = seen[f"{group}_in"]
    ctx = block_context(args, grid=(3, 2, 3))
    block = dict((g.name, g.block) for g in model.block_groups)["blocks" if group == "dual" else "single_blocks"]
    stacked = params["blocks" if group == "dual" else "single_blocks"]
    hidden = DualStream(jnp.asarray(to_np(args[0])), jnp.asarray(to_np(args[1])))
    out = block.apply({"params": jax.tree.map(lambda a: a[0], stacked)}, hidden, ctx)
    ref_video, ref_text = (to_np(a) for a in seen[f"{group}_out"])
    valid = np.asarray(ctx.text_mask)
    np.testing.assert_allclose(np.asarray(out.video), ref_video, atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out.text)[valid], ref_text[valid], atol=ATOL, rtol=1e-5)


def test_guidance_is_required(setup):
    _, _, model, params, _ = setup
    inputs = our_inputs(make_inputs())[:-1]
    with pytest.raises(ValueError, match="guidance"):
        model.embed(params, *inputs)


def test_from_param_shapes_reads_the_sizes(setup):
    kind, ref, model, _, _ = setup
    fixed = {"rope_axes_dim": (4, 6, 6)} | ({"image_condition_type": "token_replace"} if kind == "i2v" else {})
    assert TransformerConfig.from_param_shapes(model.param_shapes(), **fixed) == model.cfg


def test_broken_spec_fails_loudly(tmp_path):
    """Dropping the single blocks' q/k-norm rule leaves keys unclaimed and leaves unproduced: one clear error."""
    broken = spec_without_rule("hunyuan_video/transformer",
                               "[[layouts.diffusers.rules]]\nmatch = 'single_transformer_blocks\\.(?P<i>\\d+)\\.attn\\.(?P<norm>", tmp_path)
    ref = dit_reference()
    save_state(ref.state_dict(), tmp_path / "ckpt" / "transformer")
    model = HunyuanVideoTransformer(TransformerConfig.from_hf_config(dict(ref.config)))
    with pytest.raises(AccountingError, match="norm_q"):
        convert(load_spec(broken), tmp_path / "ckpt", model.param_shapes())
