"""The op vocabulary and its accounting on a synthetic checkpoint (split, fuse, reshape, squeeze, ...)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from vidax.translator import AccountingError, convert
from vidax.translator.spec import parse_spec

SPEC = r"""
[dtype]
default = "keep"
rules = [{ match = 'blk/.*/bias', dtype = "float32" }]

[rename.proj]
q = "query"
k = "key"
v = "value"

[layouts.t]
files = ["*.safetensors"]
signature = ['blk\.0\.q\.weight']
ignore = ['.*\.freqs']

[[layouts.t.rules]]
match = 'blk\.(?P<i>\d+)\.(?P<p>q|k|v)\.weight'
target = "blk/qkv/kernel"
op = "linear"
stack = "i"
fuse = { group = "p", order = ["q", "k", "v"], axis = 1 }

[[layouts.t.rules]]
match = 'blk\.(?P<i>\d+)\.(?P<p>q|k|v)\.bias'
target = "blk/{p:proj}/bias"
stack = "i"

[[layouts.t.rules]]
match = 'qkv\.weight'
target = "attn/{part}/kernel"
op = "linear"
split = { axis = 1, parts = ["q", "k", "v"], sizes = [2, 2, 4] }

[[layouts.t.rules]]
match = 'heads\.weight'
target = "heads/kernel"
op = "reshape"
shape = [2, -1, 3]

[[layouts.t.rules]]
match = 'conv\.bias'
target = "conv/bias"
op = "squeeze"
axis = 0

[[layouts.t.rules]]
match = 'gain'
target = "gain"
op = "expand"
axis = -1

[[layouts.t.rules]]
match = 'perm\.weight'
target = "perm/kernel"
op = "transpose"
perm = [2, 0, 1]

[[layouts.t.rules]]
match = 'extra\.weight'
target = "extra/kernel"
optional = true
"""

rng = np.random.default_rng(0)


def _state(layers=2):
    state = {}
    for i in range(layers):
        for p in "qkv":
            state[f"blk.{i}.{p}.weight"] = rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
            state[f"blk.{i}.{p}.bias"] = rng.standard_normal(3).astype(np.float16)
    state["qkv.weight"] = rng.standard_normal((8, 5)).astype(np.float32)
    state["heads.weight"] = rng.standard_normal((6, 4)).astype(np.float32)
    state["conv.bias"] = rng.standard_normal((1, 7)).astype(np.float32)
    state["gain"] = rng.standard_normal(4).astype(np.float32)
    state["perm.weight"] = rng.standard_normal((2, 3, 4)).astype(np.float32)
    state["rope.freqs"] = np.ones(3, np.float32)
    return state


def _save(tmp_path, state):
    (tmp_path / "m").mkdir(exist_ok=True)
    save_file(state, tmp_path / "m" / "model.safetensors")
    return tmp_path / "m"


@pytest.fixture
def spec():
    return parse_spec(SPEC, "ops-test")


def test_every_op(tmp_path, spec):
    state = _state()
    tree = convert(spec, _save(tmp_path, state))
    qkv = tree["blk/qkv/kernel"]
    assert qkv.shape == (2, 5, 9) and qkv.dtype == ml_dtypes.bfloat16  # "keep"
    for i in range(2):
        want = np.concatenate([state[f"blk.{i}.{p}.weight"].T for p in "qkv"], axis=1)
        np.testing.assert_array_equal(qkv[i], want)
    bias = tree["blk/key/bias"]
    assert bias.dtype == np.float32  # path rule overrides "keep"
    np.testing.assert_array_equal(bias, np.stack([state[f"blk.{i}.k.bias"] for i in range(2)]).astype(np.float32))
    w = state["qkv.weight"].T
    np.testing.assert_array_equal(tree["attn/q/kernel"], w[:, :2])
    np.testing.assert_array_equal(tree["attn/v/kernel"], w[:, 4:])
    np.testing.assert_array_equal(tree["heads/kernel"], state["heads.weight"].reshape(2, 4, 3))
    np.testing.assert_array_equal(tree["conv/bias"], state["conv.bias"][0])
    np.testing.assert_array_equal(tree["gain"], state["gain"][:, None])
    np.testing.assert_array_equal(tree["perm/kernel"], state["perm.weight"].transpose(2, 0, 1))
    assert "rope.freqs" not in tree and len(tree) == 11


def test_dtype_override(tmp_path, spec):
    tree = convert(spec, _save(tmp_path, _state()), dtype="float16")
    assert tree["blk/qkv/kernel"].dtype == np.float16 and tree["blk/q/bias".replace("q", "query")].dtype == np.float32


def test_violations_reported_together(tmp_path, spec):
    state = _state(layers=3)
    del state["blk.1.k.weight"]  # fuse part missing in one layer
    del state["blk.2.q.bias"], state["blk.2.k.bias"], state["blk.2.v.bias"]
    state["blk.3.q.bias"] = state["blk.0.q.bias"]  # layers 0,1,3: a gap
    state["blk.3.k.bias"] = state["blk.0.k.bias"]
    state["blk.3.v.bias"] = state["blk.0.v.bias"]
    state["heads.weight"] = rng.standard_normal((5, 4)).astype(np.float32)  # 20 is not 2 x ? x 3
    state["conv.bias"] = rng.standard_normal((2, 7)).astype(np.float32)  # cannot squeeze
    state["stray"] = np.zeros(1, np.float32)
    with pytest.raises(AccountingError) as err:
        convert(spec, _save(tmp_path, state))
    text = " | ".join(err.value.problems)
    assert "fuse needs each of ['q', 'k', 'v'] once" in text
    assert "stacked layers [0, 1, 3] are not 0..2" in text
    assert "cannot reshape [5, 4] to [2, -1, 3]" in text
    assert "cannot squeeze axis 0 of shape [2, 7]" in text
    assert "'stray' matched by no rule" in text
    assert len(err.value.problems) >= 5


def test_rename_table_is_a_whitelist(tmp_path):
    text = SPEC.replace('k = "key"\n', "")
    with pytest.raises(AccountingError, match="rename table 'proj' has no entry for 'k'"):
        convert(parse_spec(text, "t"), _save(tmp_path, _state()))


@pytest.mark.parametrize("source_dtype", [ml_dtypes.bfloat16, np.float32, np.float16])
@pytest.mark.parametrize("target", ["keep", "float32", "bfloat16", "float16"])
def test_large_transposes_and_casts_are_exact(tmp_path, source_dtype, target):
    # big enough for the tiled path, with edges that are not tile multiples
    weight = rng.standard_normal((300, 700)).astype(source_dtype)
    text = SPEC.split("[[layouts.t.rules]]")[0] + "[[layouts.t.rules]]\nmatch = 'blk\\.0\\.q\\.weight'\ntarget = 'w'\nop = 'linear'\n"
    (tmp_path / "m").mkdir()
    save_file({"blk.0.q.weight": weight}, tmp_path / "m" / "model.safetensors")
    tree = convert(parse_spec(text, "t"), tmp_path / "m", dtype=target)
    want = weight.T.astype(weight.dtype if target == "keep" else np.dtype(getattr(ml_dtypes, target, None) or target))
    assert tree["w"].dtype == want.dtype
    np.testing.assert_array_equal(tree["w"], want)


def test_expected_from_spec_shapes_and_nested_trees(tmp_path):
    source = _save(tmp_path, _state())
    shapes = {p: list(a.shape) for p, a in convert(parse_spec(SPEC, "t"), source).items()}
    declared = SPEC + "\n[shapes]\n" + "".join(f'"{p}" = {s}\n' for p, s in shapes.items())
    convert(parse_spec(declared, "t"), source)
    with pytest.raises(AccountingError, match="'gain' has shape"):
        convert(parse_spec(declared.replace('"gain" = [4, 1]', '"gain" = [4, 2]'), "t"), source)
    with pytest.raises(AccountingError, match="'blk/qkv/kernel' produced but not expected"):
        convert(parse_spec(SPEC + '\n[shapes]\n"gain" = [4, 1]\n', "t"), source)

    class Struct:  # what jax.eval_shape returns, without importing jax here
        def __init__(self, shape):
            self.shape = shape

    tree = convert(parse_spec(SPEC, "t"), source)
    nested: dict = {}
    for path, array in tree.items():
        node = nested
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = Struct(array.shape)
    convert(parse_spec(SPEC, "t"), source, nested)
    nested["gain"] = Struct((5,))
    with pytest.raises(AccountingError, match="'gain' has shape"):
        convert(parse_spec(SPEC, "t"), source, nested)


def test_leaves_above_the_large_threshold(tmp_path):
    # 4.4 MB: allocated from an anonymous mapping rather than np.empty; must behave the same
    weight = rng.standard_normal((1100, 1000)).astype(np.float32)
    text = SPEC.split("[[layouts.t.rules]]")[0] + "[[layouts.t.rules]]\nmatch = 'blk\\.0\\.q\\.weight'\ntarget = 'w'\nop = 'linear'\n"
    (tmp_path / "m").mkdir()
    save_file({"blk.0.q.weight": weight}, tmp_path / "m" / "model.safetensors")
    tree = convert(parse_spec(text, "t"), tmp_path / "m", dtype="bfloat16")
    assert tree["w"].flags.writeable and tree["w"].flags.c_contiguous
    np.testing.assert_array_equal(tree["w"], weight.T.astype(ml_dtypes.bfloat16))


FP8_SPEC = r"""
[dtype]
default = "bfloat16"

[layouts.t]
files = ["*.safetensors"]
signature = ['w']

[[layouts.t.rules]]
match = 'w'
target = "w/kernel"
op = "linear"
"""


def test_fp8_weights_without_their_scales_are_refused(tmp_path):
    """A float8 checkpoint cast to bf16 without its per-tensor scales would load wrong weights silently:
    HunyuanVideo's fp8 `.pt` keeps them in a separate `*_fp8_map.pt`. (A safetensors file with fp8 weights
    and no scales is a plain cast, as Kijai's are, and reads as such: tests/quantized.)"""
    import torch

    torch.save({"w": torch.ones(4, 2).to(torch.float8_e4m3fn)}, tmp_path / "model.pt")
    for dtype in (None, "keep"):  # cast, or kept as float8: either way the scales are missing
        with pytest.raises(AccountingError, match="model.pt is float8.*need their scales"):
            convert(parse_spec(FP8_SPEC, "fp8"), tmp_path / "model.pt", dtype=dtype)


def test_metadata_and_a_components_own_files(tmp_path):
    """`read_metadata` reads a single file's header config; `files` picks one release among several."""
    from vidax.translator import read_metadata

    for name, value in (("release-a", 1.0), ("release-b", 2.0)):
        save_file({"w": np.full((4, 2), value, np.float32)}, tmp_path / f"{name}.safetensors",
                  metadata={"config": f'{{"release": "{name}"}}'})
    spec = parse_spec(FP8_SPEC, "two-releases")
    with pytest.raises(Exception, match="also appears"):  # both files at the root: duplicate keys
        convert(spec, tmp_path)
    picked = convert(spec, tmp_path, files=("release-b.safetensors",), dtype="float32")
    assert float(picked["w/kernel"][0, 0]) == 2.0
    assert read_metadata(spec, tmp_path, files=("release-a.safetensors",)) == {"config": '{"release": "release-a"}'}
