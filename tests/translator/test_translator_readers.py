"""Readers: safetensors (every dtype, metadata, every malformed-header fault) and PyTorch zip files."""

from __future__ import annotations

import builtins
import json
import os
import struct
import zipfile

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as np_save_file
from safetensors.torch import save_file

from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.errors import FormatError
from vidax.translator.formats.safetensors_io import SafetensorsFile
from vidax.translator.formats.torch_zip import TorchZipFile

TORCH_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
                torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
                torch.uint16, torch.uint32, torch.uint64]


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    names = {torch.bfloat16: ml_dtypes.bfloat16, torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
             torch.float8_e5m2: ml_dtypes.float8_e5m2, torch.uint16: np.uint16, torch.uint32: np.uint32,
             torch.uint64: np.uint64}
    if t.dtype in names:  # numpy cannot take these from torch directly: reinterpret the bytes
        raw = t.contiguous().view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
        return raw.view(names[t.dtype]).reshape(tuple(t.shape))
    return t.numpy()


def _random(dtype, shape=(3, 5)):
    gen = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(0, 100, shape, generator=gen).to(dtype)


def test_safetensors_every_dtype_zero_copy(tmp_path):
    tensors = {str(d): _random(d) for d in TORCH_DTYPES}
    tensors["empty"] = torch.zeros(0, 4)
    tensors["scalar"] = torch.tensor(2.5)
    path = tmp_path / "all.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "hi"})
    reader = SafetensorsFile(path)
    assert reader.metadata == {"format": "pt", "note": "hi"}
    for name, tensor in tensors.items():
        array = reader.array(name)
        np.testing.assert_array_equal(array, _as_numpy(tensor))
        assert array.shape == tuple(tensor.shape)
        if array.size:
            assert not array.flags.writeable and not array.flags.owndata  # a view of the mmap


def _write_raw(path, header: bytes | dict, data: bytes = b"", length: int | None = None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def _entry(dtype, shape, start, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


MALFORMED = {
    "truncated": (lambda p: p.write_bytes(b"\x01\x00"), "truncated file"),
    "header beyond file": (lambda p: _write_raw(p, b"{}", length=1000), "runs past the end"),
    "header above cap": (lambda p: _write_raw(p, b"{}", length=1 << 40), "above the"),
    "invalid json": (lambda p: _write_raw(p, b"{not json"), "not valid JSON"),
    "out of bounds": (lambda p: _write_raw(p, {"w": _entry("F32", [4], 0, 16)}, b"\0" * 8), "out of bounds"),
    "overlap": (lambda p: _write_raw(p, {"a": _entry("F32", [2], 0, 8), "b": _entry("F32", [2], 4, 12)}, b"\0" * 12), "overlap"),
    "gap": (lambda p: _write_raw(p, {"a": _entry("F32", [1], 0, 4), "b": _entry("F32", [1], 8, 12)}, b"\0" * 12), "gap"),
    "uncovered tail": (lambda p: _write_raw(p, {"a": _entry("F32", [1], 0, 4)}, b"\0" * 12), "belong to no tensor"),
    "size mismatch": (lambda p: _write_raw(p, {"w": _entry("F32", [3], 0, 8)}, b"\0" * 8), "is 12 bytes but"),
    "unknown dtype": (lambda p: _write_raw(p, {"w": _entry("F128", [1], 0, 16)}, b"\0" * 16), "unknown dtype 'F128'"),
}


@pytest.mark.parametrize("fault", MALFORMED)
def test_safetensors_malformed_is_one_clear_error(tmp_path, fault):
    make, message = MALFORMED[fault]
    path = tmp_path / "bad.safetensors"
    make(path)
    with pytest.raises(FormatError, match=message) as err:
        SafetensorsFile(path)
    text = str(err.value)
    assert str(path) in text and "\n" not in text
    if fault in ("out of bounds", "size mismatch", "unknown dtype"):
        assert "tensor 'w'" in text


def test_truncated_data_section_names_tensor(tmp_path):
    path = tmp_path / "cut.safetensors"
    np_save_file({"w": np.arange(16, dtype=np.float32)}, path)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(FormatError, match="tensor 'w'.*out of bounds"):
        SafetensorsFile(path)


def test_sharded_index_and_missing_shard(tmp_path):
    np_save_file({"a": np.ones(2, np.float32)}, tmp_path / "m-1.safetensors")
    np_save_file({"b": np.zeros(3, np.float32)}, tmp_path / "m-2.safetensors")
    index = tmp_path / "m.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}))
    assert sorted(Checkpoint([index]).keys()) == ["a", "b"]
    index.write_text(json.dumps({"weight_map": {"a": "m-1.safetensors", "c": "m-3.safetensors"}}))
    with pytest.raises(FormatError, match="shard 'm-3.safetensors' of tensor 'c' is missing"):
        Checkpoint([index])


# ----------------------------------------------------------------------------- PyTorch zip


@pytest.mark.parametrize("wrapper", [None, "state_dict", "module", "model"])
def test_torch_zip_state_dict_and_wrappers(tmp_path, wrapper):
    base = torch.randn(4, 6)
    state = {"lin.weight": torch.nn.Parameter(torch.randn(3, 2)), "t": base.t(), "slice": base[1:3, 2:5],
             "bf": torch.randn(5).to(torch.bfloat16), "half": torch.randn(2, 2).half(), "idx": torch.arange(4),
             "flag": torch.tensor([True, False]), "nested.deep": torch.ones(1)}
    obj = state if wrapper is None else {wrapper: state, "epoch": 3}
    path = tmp_path / "m.pth"
    torch.save(obj, path)
    reader = TorchZipFile(path)
    assert sorted(reader.tensors) == sorted(state)
    for name, tensor in state.items():
        np.testing.assert_array_equal(reader.array(name), _as_numpy(tensor.detach().contiguous()))
    assert not reader.array("t").flags.owndata  # strided view of the mapped file, no copy


def test_torch_zip_compressed_entries(tmp_path):
    src = tmp_path / "m.pth"
    torch.save({"w": torch.randn(8, 3)}, src)
    dst = tmp_path / "deflated.pth"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            zout.writestr(item.filename, zin.read(item))
    np.testing.assert_array_equal(TorchZipFile(dst).array("w"), torch.load(src)["w"].numpy())


def test_torch_zip_truncated_and_not_zip(tmp_path):
    path = tmp_path / "m.pth"
    torch.save({"w": torch.randn(64, 64)}, path)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(FormatError, match=str(path)):
        TorchZipFile(path)
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(FormatError, match="not a PyTorch zip checkpoint"):
        TorchZipFile(legacy)


class _System:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _OpenForWrite:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (builtins.open, (str(self.marker), "w"))


class _Exec:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


@pytest.mark.parametrize("payload", [_System, _OpenForWrite, _Exec])
def test_malicious_pickle_refused_without_executing(tmp_path, payload):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"w": torch.ones(2), "evil": payload(marker)}, path)
    with pytest.raises(FormatError, match="not allowed in a checkpoint") as err:
        TorchZipFile(path)
    assert str(path) in str(err.value)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the payload is real: an unrestricted load runs it
    assert marker.exists()


def test_folder_skips_globs_that_find_another_components_files(tmp_path):
    from vidax.translator import convert
    from vidax.translator.spec import parse_spec

    spec = parse_spec(r"""
[dtype]
default = "keep"
[layouts.diffusers]
files = ["vae/*.safetensors", "*.safetensors"]
signature = ['conv_in\.weight']
[[layouts.diffusers.rules]]
match = 'conv_in\.weight'
target = "conv_in/kernel"
op = "conv"
[layouts.official]
files = ["vae.pth"]
signature = ['conv1\.weight']
[[layouts.official.rules]]
match = 'conv1\.weight'
target = "conv_in/kernel"
op = "conv"
""", "t")
    np_save_file({"blocks.0.other": np.zeros(2, np.float32)}, tmp_path / "dit.safetensors")  # not this component
    weight = torch.randn(4, 3, 3, 3)
    torch.save({"conv1.weight": weight}, tmp_path / "vae.pth")
    tree = convert(spec, tmp_path)
    np.testing.assert_array_equal(tree["conv_in/kernel"], weight.numpy().transpose(2, 3, 1, 0))
