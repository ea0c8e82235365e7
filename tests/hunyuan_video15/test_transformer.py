"""HunyuanVideo-1.5 DiT against diffusers `HunyuanVideo15Transformer3DModel`, through the real spec.

One tiny perturbed reference (meanflow on, so `timestep_embedder_r` is exercised too), saved in the
diffusers folder layout and converted with `conversion_specs/hunyuan_video15/transformer.toml`.
Compared per stage (embed, block 0, end to end) for T2V (zero image embeds) and I2V, in fp32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import AccountingError, convert, load_spec
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig
from vidax.zoo.hunyuan_video15.transformer import Context, DualStream

from tests.oracle import recorded, save_diffusers, spec_without_rule, to_np, unflatten

from .hunyuan_spec_fixtures import dit_reference
ATOL = 2e-5  # fp32 through ~10 matmul layers and two softmaxes; observed max error ~5e-7


@pytest.fixture(scope="module")
def reference():
    return dit_reference()


@pytest.fixture(scope="module")
def checkpoint(reference, tmp_path_factory):
    return save_diffusers(reference, tmp_path_factory.mktemp("hv15_diffusers") / "transformer").parent


@pytest.fixture(scope="module")
def model(reference):
    return HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(reference.config)))


@pytest.fixture(scope="module")
def params(model, checkpoint):
    tree = convert(load_spec("hunyuan_video15/transformer"), checkpoint, model.param_shapes())
    return unflatten(tree)


def make_inputs(image: bool, seed: int = 1):
    """Batch of 2 with padded Qwen and ByT5 masks (different per sample)."""
    g = torch.Generator().manual_seed(seed)
    b = 2
    return dict(
        hidden_states=torch.randn(b, 5, 3, 4, 6, generator=g),
        timestep=torch.tensor([500.0, 20.0]),
        encoder_hidden_states=torch.randn(b, 7, 24, generator=g),
        encoder_attention_mask=torch.tensor([[1] * 5 + [0] * 2, [1] * 7]),
        encoder_hidden_states_2=torch.randn(b, 5, 20, generator=g),
        encoder_attention_mask_2=torch.tensor([[1] * 2 + [0] * 3, [1] * 4 + [0]]),
        image_embeds=torch.randn(b, 3, 12, generator=g) if image else torch.zeros(b, 3, 12),
    )


def our_inputs(inputs: dict, timestep_r=None):
    j = lambda t: jnp.asarray(to_np(t))  # noqa: E731
    return (
        j(inputs["hidden_states"]), j(inputs["timestep"]), j(inputs["encoder_hidden_states"]),
        j(inputs["encoder_attention_mask"]).astype(bool), j(inputs["encoder_hidden_states_2"]),
        j(inputs["encoder_attention_mask_2"]).astype(bool), j(inputs["image_embeds"]),
        None if timestep_r is None else j(timestep_r),
    )


def run_reference(reference, inputs: dict, timestep_r=None):
    """Output, and what block 0 received and returned (captured by hooks)."""
    with recorded(reference.transformer_blocks[0]) as seen, torch.no_grad():
        out = reference(**inputs, timestep_r=timestep_r).sample
    return to_np(out), seen


CASES = {"t2v": (False, None), "i2v": (True, None), "t2v_meanflow": (False, torch.tensor([300.0, 10.0]))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_end_to_end_and_embed(case, reference, model, params):
    image, timestep_r = CASES[case]
    inputs = make_inputs(image)
    expected, seen = run_reference(reference, inputs, timestep_r)
    ours_in = our_inputs(inputs, timestep_r)

    # Embed: the tokens, joint text, mask and temb that diffusers hands block 0.
    hidden, ctx = model.embed(params, *ours_in)
    video, text = hidden.video, hidden.text
    ref_video, ref_text, ref_temb, ref_mask, _ = seen["args"]
    mask = to_np(ref_mask).astype(bool)
    np.testing.assert_array_equal(np.asarray(ctx.text_mask), mask)
    np.testing.assert_allclose(np.asarray(video), to_np(ref_video), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ctx.temb), to_np(ref_temb), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(text)[mask], to_np(ref_text)[mask], atol=ATOL, rtol=1e-5)

    out = np.asarray(model(params, *ours_in))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, atol=ATOL, rtol=1e-5)


def test_block_zero(reference, model, params):
    """One dual-stream block on diffusers' own block-0 inputs (I2V, padded text)."""
    _, seen = run_reference(reference, make_inputs(image=True))
    video, text, temb, mask = (to_np(a) for a in seen["args"][:4])
    cos, sin = seen["args"][4]
    ctx = Context(jnp.asarray(temb), jnp.asarray(mask.astype(bool)), jnp.asarray(to_np(cos)), jnp.asarray(to_np(sin)))
    block_params = jax.tree.map(lambda a: a[0], params["blocks"])
    out = model.block.apply({"params": block_params}, DualStream(jnp.asarray(video), jnp.asarray(text)), ctx)
    out_video, out_text = out.video, out.text
    ref_video, ref_text = (to_np(a) for a in seen["out"])
    valid = mask.astype(bool)  # padded text rows attend to nothing in diffusers; they never reach the output
    np.testing.assert_allclose(np.asarray(out_video), ref_video, atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out_text)[valid], ref_text[valid], atol=ATOL, rtol=1e-5)


def test_broken_spec_fails_loudly(checkpoint, model, tmp_path):
    """Dropping the q/k-norm rule leaves keys unclaimed and leaves unproduced: one clear error."""
    broken = spec_without_rule("hunyuan_video15/transformer", "[[layouts.diffusers.rules]]\n# Per-head RMS norms", tmp_path)
    with pytest.raises(AccountingError, match="norm_added_q"):
        convert(load_spec(broken), checkpoint, model.param_shapes())
