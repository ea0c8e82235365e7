"""city96-style GGUF DiTs of the other families GGUF files are published for (HunyuanVideo `hyvid`, LTX-Video
`ltxv`, Cosmos-Predict2 `cosmos`): original keys with the prefix city96's converter strips (`net.`,
`model.diffusion_model.`) and the keys it drops (`_extra_state`, `accum_`) gone, matrices quantized (Q8_0,
and Q4_K / Q6_K flattened with `comfy.gguf.orig_shape`), vectors F32, the rest F16. Read through each
family's own spec, a file's tree equals the tree of the same dequantized weights saved as safetensors
(the official layout's parity with diffusers is each family's own test)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from safetensors.numpy import save_file

import tests.cosmos.cosmos_spec_fixtures as cosmos
import tests.hunyuan_video.hunyuan_video_spec_fixtures as hunyuan
import tests.ltx_video.references.ltx_spec_fixtures as ltx
from tests.quantized.gguf_files import dequantized, encode, write_gguf
from vidax.translator import convert

CITY96_DROPPED = ("_extra_state", "accum_")


@functools.cache
def _hunyuan():
    return hunyuan.official_dit_state(hunyuan.dit_reference().state_dict())


@functools.cache
def _cosmos():
    return cosmos.official_state_dict(cosmos.dit_reference().state_dict())


@functools.cache
def _ltx():
    return ltx.official_dit_state(ltx.dit_reference().state_dict())


FAMILIES = {"hunyuan_video/transformer": ("hyvid", _hunyuan), "ltx_video/transformer": ("ltxv", _ltx),
            "cosmos/transformer": ("cosmos", _cosmos)}


def _city96_keys(state: dict) -> dict[str, np.ndarray]:
    for prefix in ("model.diffusion_model.", "net."):
        if any(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            break
    return {k: v.float().numpy().copy() for k, v in state.items() if not any(d in k for d in CITY96_DROPPED)}


def _kind(index: int, data: np.ndarray) -> tuple[str, bool]:
    """(ggml type, flattened): matrices cycle through Q8_0, Q4_K and Q6_K; the rest F32 / F16."""
    if data.ndim >= 2 and data.size % 256 == 0:
        kind = ("Q8_0", "Q4_K", "Q6_K")[index % 3]
        return kind, kind != "Q8_0" or data.shape[-1] % 32 != 0 or data.ndim > 4
    return ("F32", False) if data.ndim <= 1 or data.ndim > 4 else ("F16", False)


@pytest.mark.parametrize("spec", list(FAMILIES))
def test_city96_gguf_reads_as_its_dequantized_weights(spec, tmp_path):
    arch, state_of_family = FAMILIES[spec]
    state = _city96_keys(state_of_family())
    tensors, flatten, plain = [], [], {}
    for index, (key, data) in enumerate(sorted(state.items())):
        kind, flat = _kind(index, data)
        tensors.append((key, data, kind))
        flatten += [key] if flat else []
        plain[key] = dequantized(encode(data.reshape(-1, 256) if flat else data, kind), kind, data.shape)
    assert {k for _, _, k in tensors} >= {"Q8_0", "Q4_K", "Q6_K"} and flatten
    gguf_path = write_gguf(tmp_path / f"{arch}.gguf", arch, tensors, flatten=tuple(flatten))
    save_file({k: np.ascontiguousarray(v) for k, v in plain.items()}, tmp_path / "plain.safetensors")
    expected = convert(spec, tmp_path / "plain.safetensors", dtype="float32")
    got = convert(spec, gguf_path, dtype="float32")
    assert set(got) == set(expected)
    for leaf in expected:
        np.testing.assert_array_equal(got[leaf], expected[leaf], err_msg=leaf)


HOOK_MODELS = {"hunyuan_video/transformer": "hunyuanvideo", "ltx_video/transformer": "ltx-video-13b",
               "cosmos/transformer": "cosmos-predict2.5-2b"}


@pytest.mark.parametrize("spec", list(HOOK_MODELS))
def test_each_family_loads_its_dit_from_transformer_file(spec, tmp_path):
    """`--transformer FILE` reaches every family's loader (LTX-Video has its own `load_tree`); no --weights
    is read for it."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    arch, state_of_family = FAMILIES[spec]
    state = _city96_keys(state_of_family())
    path = write_gguf(tmp_path / "dit.gguf", arch, [(k, v, "F32") for k, v in sorted(state.items())])
    options = GenerateOptions(model=HOOK_MODELS[spec], prompt="x", weights=str(tmp_path / "nowhere"), transformer=path)
    tree = make_pipeline(options.model, options).load_tree("transformer", spec, dtype="float32")
    expected = convert(spec, path, dtype="float32")
    assert set(tree) == set(expected)
    for leaf in expected:
        np.testing.assert_array_equal(tree[leaf], expected[leaf], err_msg=leaf)
