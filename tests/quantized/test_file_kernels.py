"""`--weights-dtype int8|fp8` on an 8-bit `--transformer` file: the block kernels are placed as the file stores
them (the same 8-bit values, the file's own per-tensor or per-output-channel scales), not dequantized and
requantized. A tiny Wan DiT is written with original Wan keys: every block matrix int8 with per-row scales
(lightx2v's `.weight_scale` `[out, 1]`, ComfyUI's `.comfy_quant`; amax / 120, not a fresh quantization's 127) in one file, fp8 e4m3 with one scale per
tensor (ComfyUI's legacy `scaled_fp8`) in another. Which file weight a placed kernel came from is found by
its dequantized values (independent of the mechanism under test); the placed bytes must be that weight's
bytes, transposed, and the placed scales its scales."""

from __future__ import annotations

import json

import diffusers
import jax
import ml_dtypes
import numpy as np
import pytest
import torch
from flax import traverse_util
from safetensors.torch import save_file

from tests.oracle import perturb, state_of
from tests.translator.wan_transformer_spec_fixtures import official_key
from vidax.translator import convert
from vidax.zoo.weights.quantize import device_weights, file_kernels

SPEC, GROUPS = "wan/transformer", ("blocks",)


def _dit():
    torch.manual_seed(0)
    return perturb(diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_max_seq_len=64).eval(), 5)


def _int8_per_row(name, w, out):
    layer = name[:-len(".weight")]
    scale = w.abs().amax(1, keepdim=True) / 120  # not amax / 127: a fresh quantization gives other bytes
    cq = torch.tensor(list(json.dumps({"format": "int8_tensorwise", "per_row": True}).encode()), dtype=torch.uint8)
    out |= {name: torch.round(w / scale).clamp(-127, 127).to(torch.int8), f"{layer}.weight_scale": scale,
            f"{layer}.comfy_quant": cq}


def _fp8_per_tensor(name, w, out):
    layer = name[:-len(".weight")]
    scale = (w.abs().max() / 448).reshape(())
    out |= {name: (w / scale).to(torch.float8_e4m3fn), f"{layer}.scale_weight": scale,
            f"{layer}.scale_input": torch.tensor(1.0)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("file_kernels")
    state = state_of(_dit())
    written = {}
    for choice, store in (("int8", _int8_per_row), ("fp8", _fp8_per_tensor)):
        out = {}
        for key, value in state.items():
            name = official_key(key)
            if name.startswith("blocks.") and value.ndim == 2:
                store(name, value.float(), out)
            else:
                out[name] = value.float().contiguous()
        out["scaled_fp8"] = torch.zeros(0, dtype=torch.float8_e4m3fn) if choice == "fp8" else None
        out = {k: v for k, v in out.items() if v is not None}
        save_file(out, folder / f"dit-{choice}.safetensors")
        written[choice] = (folder / f"dit-{choice}.safetensors", out)
    return written


def _file_weight(kernel_layer: np.ndarray, file: dict, dequantized: dict) -> str:
    """The file weight whose dequantized transpose is this placed layer's kernel."""
    hits = [k for k, v in dequantized.items() if v.shape == kernel_layer.shape[::-1] and np.array_equal(v.T, kernel_layer)]
    assert len(hits) == 1, hits
    return hits[0]


@pytest.mark.parametrize("choice", ["int8", "fp8"])
def test_placed_8bit_values_are_the_files_bits(files, choice):
    path, file = files[choice]
    tree = convert(SPEC, path, dtype="float32")
    stored = file_kernels(path, SPEC, tree, GROUPS, choice)
    kernels = [p for p in tree if p.startswith("blocks/") and p.endswith("/kernel")]
    assert len(kernels) == 10 and set(stored) == set(kernels)
    placed = jax.device_put(device_weights(tree, GROUPS, choice, stored))
    weights = {k: v for k, v in file.items() if k.startswith("blocks.") and k.endswith(".weight") and v.ndim == 2}
    dequantized = {}
    for key, w in weights.items():
        layer = key[:-len(".weight")]
        scale = file.get(f"{layer}.weight_scale", file.get(f"{layer}.scale_weight"))
        dequantized[key] = (w.float() * scale).numpy()
    for kernel in kernels:
        values, scales = np.asarray(placed[kernel]), np.asarray(placed[kernel[:-len("kernel")] + "kernel_scale"])
        assert values.dtype == (np.int8 if choice == "int8" else ml_dtypes.float8_e4m3fn)
        for i in range(values.shape[0]):
            key = _file_weight(tree[kernel][i], file, dequantized)
            want = weights[key].view(torch.uint8).numpy().T if choice == "fp8" else weights[key].numpy().T
            np.testing.assert_array_equal(values[i].view(np.uint8) if choice == "fp8" else values[i], want, err_msg=key)
            layer = key[:-len(".weight")]
            scale = file.get(f"{layer}.weight_scale", file.get(f"{layer}.scale_weight")).numpy().reshape(-1)
            np.testing.assert_array_equal(scales[i], np.broadcast_to(scale, scales[i].shape), err_msg=key)


def test_a_file_in_another_format_is_requantized(files):
    """int8 values asked as fp8 (and fp8 values asked as int8) do not fit: those kernels are quantized afresh."""
    for choice, other in (("int8", "fp8"), ("fp8", "int8")):
        path, _ = files[choice]
        tree = convert(SPEC, path, dtype="float32")
        assert file_kernels(path, SPEC, tree, GROUPS, other) == {}
    path, _ = files["int8"]
    assert file_kernels(path, SPEC, convert(SPEC, path, dtype="float32"), GROUPS, "bf16") == {}


@pytest.mark.parametrize("choice", ["int8", "fp8"])
def test_requantizing_instead_gives_other_bytes(files, choice):
    """The bit test can fail: quantizing the dequantized weights afresh (what --weights-dtype did with every
    file) gives other 8-bit values and scales than the file's."""
    path, _ = files[choice]
    tree = convert(SPEC, path, dtype="float32")
    stored = file_kernels(path, SPEC, tree, GROUPS, choice)
    fresh = device_weights(tree, GROUPS, choice)
    assert all(not np.array_equal(fresh[k].view(np.uint8), stored[k][0].view(np.uint8)) for k in stored)
