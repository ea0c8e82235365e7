"""The shipped Wan transformer spec on tiny random WanTransformer3DModel checkpoints, both layouts."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from safetensors.torch import save_file

import wan_transformer_spec_fixtures as wan
from vidax.translator import AccountingError, SourceError, convert, load_spec
from vidax.translator.testing import mismatches


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return {c.name: c for c in wan.wan_transformer_cases(tmp_path_factory.mktemp("wan"))}


@pytest.fixture(scope="module")
def spec():
    return load_spec("wan/transformer")


@pytest.mark.parametrize("name", ["diffusers-t2v", "official-t2v", "diffusers-i2v", "official-i2v",
                                  "diffusers-flf2v", "official-flf2v"])
def test_converts_to_independent_targets(cases, spec, name):
    case = cases[name]
    assert mismatches(convert(spec, case.source, dtype="float32"), case.expected) == []


@pytest.mark.parametrize("variant", ["t2v", "i2v"])
def test_official_layout_is_diffusers_converter_inverse(variant):
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    state = wan.reference_state_dict(variant)
    official = {wan.official_key(k): v for k, v in state.items()}
    back = convert_wan_transformer_to_diffusers(dict(official))
    assert back.keys() == state.keys()
    assert all(back[k] is state[k] for k in state)


def test_layout_detected_from_signature(cases, spec):
    from vidax.translator.fetch import sources

    assert sources.resolve(spec, cases["official-i2v"].source).layout.name == "official"
    assert sources.resolve(spec, cases["diffusers-i2v"].source).layout.name == "diffusers"
    # the component folder itself and a single file also work
    assert sources.resolve(spec, cases["diffusers-t2v"].source / "transformer").layout.name == "diffusers"
    single = cases["official-t2v"].source / "diffusion_pytorch_model.safetensors"
    assert sources.resolve(spec, single).layout.name == "official"


def test_default_dtype_policy(cases, spec):
    tree = convert(spec, cases["diffusers-i2v"].source)
    fp32 = {p for p, a in tree.items() if a.dtype == np.float32}
    assert fp32 == {"scale_shift_table", "blocks/scale_shift_table", "blocks/norm2/scale", "blocks/norm2/bias",
                    "condition_embedder/time_embedder/linear_1/kernel", "condition_embedder/time_embedder/linear_1/bias",
                    "condition_embedder/time_embedder/linear_2/kernel", "condition_embedder/time_embedder/linear_2/bias",
                    "condition_embedder/image_embedder/norm1/scale", "condition_embedder/image_embedder/norm1/bias",
                    "condition_embedder/image_embedder/norm2/scale", "condition_embedder/image_embedder/norm2/bias"}
    expected = cases["diffusers-i2v"].expected
    for path, array in tree.items():
        assert array.dtype in (np.float32, ml_dtypes.bfloat16)
        np.testing.assert_array_equal(array, expected[path].astype(array.dtype))


def test_identity_leaves_are_zero_copy_views(cases, spec):
    tree = convert(spec, cases["official-t2v"].source, dtype="float32")
    bias = tree["proj_out/bias"]  # identity, fp32 -> fp32: the mmap itself
    assert not bias.flags.writeable and not bias.flags.owndata
    kernel = tree["proj_out/kernel"]  # transposed: one fresh C-contiguous buffer
    assert kernel.flags.owndata and kernel.flags.c_contiguous


def test_expected_shapes_checked_all_at_once(cases, spec):
    case = cases["diffusers-t2v"]
    shapes = {p: a.shape for p, a in case.expected.items()}
    convert(spec, case.source, shapes, dtype="float32")
    wrong = dict(shapes, **{"proj_out/kernel": (1, 2), "extra/leaf": (3,)})
    del wrong["patch_embedding/bias"]
    with pytest.raises(AccountingError) as err:
        convert(spec, case.source, wrong)
    assert len(err.value.problems) == 3
    text = str(err.value)
    assert "'extra/leaf' not produced" in text and "'patch_embedding/bias' produced but not expected" in text
    assert "'proj_out/kernel' has shape" in text


def test_unclaimed_and_missing_keys_reported_together(tmp_path, spec):
    state = wan.reference_state_dict("t2v")
    state["blocks.0.attn1.rotary.freqs"] = state["proj_out.bias"].clone()  # not in any rule
    del state["blocks.1.attn1.to_q.weight"]  # layer 1 missing -> shape disagreement
    del state["proj_out.weight"]  # a non-optional rule fires zero times
    root = tmp_path / "m"
    root.mkdir()
    save_file(state, root / "diffusion_pytorch_model.safetensors")
    with pytest.raises(AccountingError) as err:
        convert(spec, root, layout="diffusers")
    problems = err.value.problems
    assert any("'blocks.0.attn1.rotary.freqs' matched by no rule" in p for p in problems)
    assert any("have 2 layers but blocks/attn1/to_q/kernel has 1" in p for p in problems)
    assert any("proj_out\\\\.weight" in p and "matched no source key" in p for p in problems)
    assert len(problems) == 3


def test_no_matching_layout_is_a_source_error(tmp_path, spec):
    root = tmp_path / "m"
    root.mkdir()
    save_file({"foo.weight": wan.reference_state_dict("t2v")["proj_out.bias"]}, root / "diffusion_pytorch_model.safetensors")
    with pytest.raises(SourceError, match="no layout of spec wan/transformer"):
        convert(spec, root)
