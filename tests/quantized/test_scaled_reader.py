"""8-bit safetensors with scales read dequantized: float(w) x scale, bit for bit as torch computes it in fp32,
for each layout people publish; block formats and malformed scales refused in one line."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vidax.translator import FormatError
from vidax.translator.formats.checkpoint import Checkpoint

OUT, IN = 6, 8


def _weight(seed: int) -> torch.Tensor:
    return torch.randn(OUT, IN, generator=torch.Generator().manual_seed(seed)) * 0.05


def _fp8(w: torch.Tensor, scale: torch.Tensor, dtype=torch.float8_e4m3fn) -> torch.Tensor:
    return (w / scale).to(dtype)


def _int8(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8)


def _comfy_quant(fmt: str, **extra) -> torch.Tensor:
    return torch.tensor(list(json.dumps({"format": fmt, **extra}).encode()), dtype=torch.uint8)


def _layouts() -> dict[str, tuple[dict, dict | None, dict[str, torch.Tensor]]]:
    """name -> (tensors, header metadata, expected fp32 weights computed by torch)."""
    w = _weight(0)
    tensor_scale = (w.abs().max() / 448).reshape(())
    row_scale = w.abs().amax(1, keepdim=True) / 127
    e5m2_scale = (w.abs().max() / 57344).reshape(1)
    bias = torch.linspace(-1, 1, OUT)
    legacy = _fp8(w, tensor_scale)
    current = _fp8(w, tensor_scale)
    e5m2 = _fp8(w, e5m2_scale, torch.float8_e5m2)
    int8_rows = _int8(w, row_scale)
    kijai = w.to(torch.float8_e4m3fn)
    return {
        "comfyui legacy scaled_fp8": (
            {"scaled_fp8": torch.empty(0, dtype=torch.float8_e4m3fn), "a.weight": legacy, "a.scale_weight": tensor_scale,
             "a.scale_input": torch.tensor(1.0), "a.bias": bias},
            None, {"a.weight": legacy.float() * tensor_scale, "a.bias": bias}),
        "comfyui current float8_e4m3fn (.comfy_quant)": (
            {"a.weight": current, "a.weight_scale": tensor_scale, "a.input_scale": torch.tensor(0.5),
             "a.comfy_quant": _comfy_quant("float8_e4m3fn")},
            None, {"a.weight": current.float() * tensor_scale}),
        "comfyui current float8_e5m2 (header metadata)": (
            {"a.weight": e5m2, "a.weight_scale": e5m2_scale},
            {"_quantization_metadata": json.dumps({"format_version": "1.0", "layers": {"a": {"format": "float8_e5m2"}}})},
            {"a.weight": e5m2.float() * e5m2_scale}),
        "comfyui int8_tensorwise per row": (
            {"a.weight": int8_rows, "a.weight_scale": row_scale, "a.comfy_quant": _comfy_quant("int8_tensorwise", per_row=True)},
            None, {"a.weight": int8_rows.float() * row_scale}),
        "comfyui fp8 in a uint8 container": (
            {"a.weight": current.view(torch.uint8), "a.weight_scale": tensor_scale, "a.comfy_quant": _comfy_quant("float8_e4m3fn")},
            None, {"a.weight": current.float() * tensor_scale}),
        "lightx2v per-channel int8": (
            {"a.weight": int8_rows, "a.weight_scale": row_scale.reshape(OUT)}, None,
            {"a.weight": int8_rows.float() * row_scale}),
        "ltx-2 fp8": (
            {"a.weight": current, "a.weight_scale": tensor_scale, "a.input_scale": torch.tensor(0.25), "a.bias": bias},
            None, {"a.weight": current.float() * tensor_scale, "a.bias": bias}),
        "kijai plain fp8_e4m3fn": ({"a.weight": kijai, "a.bias": bias.to(torch.bfloat16)}, None,
                                   {"a.weight": kijai.float(), "a.bias": bias.to(torch.bfloat16).float()}),
    }


@pytest.mark.parametrize("name", list(_layouts()))
def test_dequantized_is_float_w_times_scale_exactly(name, tmp_path):
    tensors, metadata, expected = _layouts()[name]
    save_file(tensors, tmp_path / "dit.safetensors", metadata=metadata)
    ckpt = Checkpoint([tmp_path / "dit.safetensors"])
    assert set(ckpt.keys()) == set(expected)  # scales, input scales, markers consumed
    for key, want in expected.items():
        got = np.asarray(ckpt.array(key), dtype=np.float32)
        assert ckpt.info(key).shape == tuple(want.shape)
        np.testing.assert_array_equal(got.view(np.uint32), want.numpy().view(np.uint32), err_msg=f"{name}: {key}")


def _refused(tensors: dict, tmp_path, metadata=None) -> str:
    save_file(tensors, tmp_path / "bad.safetensors", metadata=metadata)
    with pytest.raises(FormatError) as err:
        Checkpoint([tmp_path / "bad.safetensors"])
    text = str(err.value)
    assert "\n" not in text
    return text


def test_block_formats_are_refused_listing_layers(tmp_path):
    packed = torch.zeros(OUT, IN // 2, dtype=torch.uint8)
    tensors = {f"b{i}.weight": packed.clone() for i in range(2)}
    for i in range(2):
        tensors |= {f"b{i}.weight_scale": torch.ones(OUT, IN // 16 or 1).to(torch.float8_e4m3fn),
                    f"b{i}.weight_scale_2": torch.tensor(1.0), f"b{i}.comfy_quant": _comfy_quant("nvfp4")}
    tensors |= {"c.weight": _int8(_weight(1), torch.tensor(0.01)), "c.weight_scale": torch.tensor(0.01),
                "c.comfy_quant": _comfy_quant("int8_tensorwise", convrot=True)}
    text = _refused(tensors, tmp_path)
    assert "b0 (nvfp4)" in text and "b1 (nvfp4)" in text and "c (int8_tensorwise, rotated)" in text
    assert "float8_e4m3fn" in text  # what is supported


def test_scales_of_the_wrong_shape_are_refused(tmp_path):
    w = _weight(2)
    text = _refused({"a.weight": _fp8(w, torch.tensor(0.01)), "a.weight_scale": torch.ones(IN)}, tmp_path)
    assert "a.weight_scale has shape [8]" in text


def test_int8_without_its_scale_and_orphan_scales_are_refused(tmp_path):
    assert "has no weight scale" in _refused({"a.weight": _int8(_weight(3), torch.tensor(0.01))}, tmp_path)
    text = _refused({"a.weight": _weight(3), "a.weight_scale": torch.tensor(0.01)}, tmp_path)
    assert "a.weight is float32, yet has a scale" in text


def test_plain_checkpoints_are_read_as_before(tmp_path):
    from vidax.translator.formats.safetensors_io import SafetensorsFile

    save_file({"a.weight": _weight(4).to(torch.bfloat16)}, tmp_path / "plain.safetensors")
    ckpt = Checkpoint([tmp_path / "plain.safetensors"])
    assert isinstance(ckpt._owner["a.weight"], SafetensorsFile)
    assert ckpt.array("a.weight").dtype == ml_dtypes.bfloat16


def test_ltx2_fp8_checkpoint_reads_through_its_spec_as_its_dequantized_weights(tmp_path):
    """LTX-2's official fp8 single file: `model.diffusion_model.` keys, block matrices F8 E4M3 with a
    per-tensor `weight_scale` and an `input_scale`, the rest bf16. Through the real spec, the tree equals the
    tree of the same weights dequantized by torch and saved plain."""
    import tests.ltx2.references.ltx2_spec_fixtures as ltx2
    from vidax.translator import convert

    state = ltx2.official_dit_state({k: v.detach().clone() for k, v in ltx2.dit_reference().state_dict().items()})
    stored, plain = {}, {}
    for key, value in state.items():
        if ".transformer_blocks." in key and key.endswith(".weight") and value.ndim == 2:
            layer = key[:-len(".weight")]
            scale = (value.abs().max() / 448).reshape(())
            q = (value / scale).to(torch.float8_e4m3fn)
            stored |= {key: q, f"{layer}.weight_scale": scale, f"{layer}.input_scale": torch.tensor(0.5)}
            plain[key] = q.float() * scale
        else:
            stored[key] = value.to(torch.bfloat16)
            plain[key] = stored[key].float()
    assert sum(v.dtype == torch.float8_e4m3fn for v in stored.values()) >= 8
    save_file(stored, tmp_path / "ltx-2-fp8.safetensors")
    save_file(plain, tmp_path / "plain.safetensors")
    expected = convert("ltx2/transformer", tmp_path / "plain.safetensors", dtype="float32")
    got = convert("ltx2/transformer", tmp_path / "ltx-2-fp8.safetensors", dtype="float32")
    assert set(got) == set(expected)
    for leaf in expected:
        np.testing.assert_array_equal(got[leaf], expected[leaf], err_msg=leaf)
