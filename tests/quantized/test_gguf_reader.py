"""GGUF reading: every supported ggml type dequantized bit for bit as `gguf.quants.dequantize` does (float32),
ComfyUI-GGUF's conventions (prefix, `comfy.gguf.orig_shape`), and one line for each bad file."""

from __future__ import annotations

import numpy as np
import pytest

from tests.quantized.gguf_files import dequantized, encode, random_blocks, write_gguf
from vidax.translator import FormatError, SourceError, convert
from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.formats.gguf_io import SUPPORTED, GGUFFile

QUANTIZED_ROWS = {"Q8_0": 64, "Q5_0": 64, "Q4_0": 64, "Q6_K": 512, "Q5_K": 512, "Q4_K": 512}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.fixture(scope="module")
def every_type(tmp_path_factory):
    """One file with a tensor of each supported type: (path, {name: (reference fp32 values, kind)})."""
    rng = np.random.default_rng(0)
    raw, reference = {}, {}
    for kind, row in QUANTIZED_ROWS.items():  # arbitrary valid blocks: every bit pattern of quants and scales
        blocks = random_blocks(kind, 3, row, rng)
        raw[f"random.{kind}"] = (blocks, kind)
        reference[f"random.{kind}"] = (dequantized(blocks, kind, (3, row)), kind)
    tensors = []
    for kind in ("Q8_0", "Q5_0", "Q4_0", "BF16", "F16", "F32"):  # gguf's own encoder, a real weight's values
        data = rng.normal(0, 0.02, (2, 3, 64)).astype(np.float32)
        tensors.append((f"encoded.{kind}", data, kind))
        reference[f"encoded.{kind}"] = (dequantized(encode(data, kind), kind, data.shape), kind)
    path = write_gguf(tmp_path_factory.mktemp("gguf") / "types.gguf", "wan", tensors, raw=raw)
    return path, reference


def test_every_supported_type_is_gguf_dequantize_bit_for_bit(every_type):
    path, reference = every_type
    reader = GGUFFile(path)
    assert {kind for _, kind in reference.values()} == set(SUPPORTED)
    assert set(reader.tensors) == set(reference)
    for name, (expected, kind) in reference.items():
        got = reader.array(name)
        assert got.shape == expected.shape == reader.tensors[name].shape, name
        np.testing.assert_array_equal(_bits(got), _bits(expected), err_msg=f"{name} ({kind})")


def test_plain_types_are_views_of_the_mapping(every_type):
    reader = GGUFFile(every_type[0])
    for kind in ("BF16", "F16", "F32"):
        view = reader.array(f"encoded.{kind}")
        assert view.dtype == reader.tensors[f"encoded.{kind}"].dtype and not view.flags.owndata, kind
    for name in reader.tensors:  # pages dropped after a tensor is read: it still reads the same after
        before = reader.array(name).copy()
        reader.release(name)
        np.testing.assert_array_equal(reader.array(name), before)


def test_comfy_prefix_and_orig_shape(tmp_path):
    """ComfyUI's `model.diffusion_model.` prefix is dropped; a flattened 5-D conv weight gets its shape back."""
    rng = np.random.default_rng(1)
    conv = rng.normal(0, 0.02, (32, 16, 1, 2, 2)).astype(np.float32)
    whole = rng.normal(0, 0.02, (4, 2, 1, 2, 2)).astype(np.float32)
    path = write_gguf(tmp_path / "m.gguf", "wan", [("model.diffusion_model.patch_embedding.weight", conv, "Q8_0"),
                                                    ("model.diffusion_model.whole.weight", whole, "F32")],
                      flatten=("model.diffusion_model.patch_embedding.weight",))
    ckpt = Checkpoint([path])
    assert sorted(ckpt.keys()) == ["patch_embedding.weight", "whole.weight"]
    assert ckpt.info("patch_embedding.weight").shape == conv.shape
    expected = dequantized(encode(conv.reshape(-1, 256), "Q8_0"), "Q8_0", conv.shape)
    np.testing.assert_array_equal(_bits(ckpt.array("patch_embedding.weight")), _bits(expected))
    np.testing.assert_array_equal(ckpt.array("whole.weight"), whole)
    assert ckpt.metadata["general.architecture"] == "wan"


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_unsupported_type_is_one_line_listing_tensors(tmp_path):
    data = np.zeros((2, 64), np.float32)
    path = write_gguf(tmp_path / "q41.gguf", "wan", [("a.weight", data, "Q4_1"), ("b.weight", data, "Q8_0")])
    with pytest.raises(FormatError) as err:
        GGUFFile(path)
    text = _one_line(err)
    assert "a.weight (Q4_1)" in text and "b.weight" not in text and "Q4_K" in text


def test_orig_shape_that_does_not_fit_is_refused(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(tmp_path / "bad.gguf", "wan")
    writer.add_array("comfy.gguf.orig_shape.w", [3, 100])
    writer.add_tensor("w", encode(np.zeros((1, 256), np.float32), "Q8_0"), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    with pytest.raises(FormatError) as err:
        GGUFFile(tmp_path / "bad.gguf")
    assert "[3, 100]" in _one_line(err)


def test_not_a_gguf_file(tmp_path):
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + bytes(range(40)))
    with pytest.raises(FormatError) as err:
        GGUFFile(tmp_path / "junk.gguf")
    assert "not a readable GGUF file" in _one_line(err)


def test_other_architecture_is_refused_before_planning(tmp_path):
    path = write_gguf(tmp_path / "hv.gguf", "hyvid", [("img_in.proj.weight", np.zeros((4, 32), np.float32), "F32")])
    with pytest.raises(SourceError) as err:
        convert("wan/transformer", path)
    assert "'hyvid'" in _one_line(err) and "wan/transformer" in str(err.value)
    with pytest.raises(SourceError):  # a family no GGUF DiT exists for
        convert("cogvideox/transformer", path)


def test_a_gguf_naming_no_architecture_is_refused(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(tmp_path / "anon.gguf", "wan")
    del writer.kv_data[0][gguf.Keys.General.ARCHITECTURE]  # as stable-diffusion.cpp's files: no architecture
    writer.add_tensor("patch_embedding.weight", np.zeros((4, 32), np.float32))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    assert GGUFFile(tmp_path / "anon.gguf").architecture is None
    with pytest.raises(SourceError) as err:
        convert("wan/transformer", tmp_path / "anon.gguf")
    assert "no general.architecture" in _one_line(err)
