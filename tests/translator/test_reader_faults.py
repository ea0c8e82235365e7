"""Hostile and damaged checkpoints, one fault each: every one ends in the translator's FormatError (one
line naming the file), quickly and in bounded memory, and none changes what later loads read.

Faults that hang, crash or exhaust memory in a reader without these guards run in a subprocess
(`read_in_worker`, with a per-case timer and an address-space limit); the rest run here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from test_reader_fuzz import PEAK_RSS_MB, read_in_worker

from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.errors import FormatError
from vidax.translator.formats.safetensors_io import SafetensorsFile
from vidax.translator.formats.torch_zip import TorchZipFile


def _read_whole(path) -> None:
    reader = TorchZipFile(path)
    for name in reader.tensors:
        reader.array(name)


def _one_line_error(read, path, match: str | None = None) -> str:
    with pytest.raises(FormatError, match=match) as err:
        read(path)
    text = str(err.value)
    assert str(path) in text and "\n" not in text and len(text) < 600, text
    return text


def _saved(tmp_path, obj, name="m.pth") -> bytes:
    path = tmp_path / name
    torch.save(obj, path)
    return path.read_bytes()


# ----------------------------------------------------------------------------- a tiny pickle writer
# For files torch.save cannot write (it would refuse or recurse): the opcodes torch's own pickles use.


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def _ints(values) -> bytes:
    return b"(" + b"".join(_int(v) for v in values) + b"t"


def _tensor(key: str, numel: int, size, stride, offset: int = 0, storage: str = "FloatStorage",
            size_ops: bytes | None = None) -> bytes:
    persistent = b"((" + _text("storage") + b"ctorch\n" + storage.encode() + b"\n" + _text(key) + _text("cpu") + \
        (b"\x8a\x08" + struct.pack("<q", numel)) + b"tQ"
    hooks = b"ccollections\nOrderedDict\n)R"
    return (b"ctorch._utils\n_rebuild_tensor_v2\n" + persistent + _int(offset) + (size_ops or _ints(size)) + _ints(stride)
            + b"\x89" + hooks + b"tR")


def _state(tensors: dict[str, bytes], prefix: bytes = b"") -> bytes:
    return b"\x80\x02" + prefix + b"}(" + b"".join(_text(k) + v for k, v in tensors.items()) + b"u."


def _archive(path, pickle_bytes: bytes, storages: dict[str, bytes] | None = None, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        archive.writestr("archive/byteorder", "little")
        for key, data in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", data, compress_type=compression)
    return path


# ----------------------------------------------------------------------------- zip damage


def _find_central(data: bytes, member: str) -> int:
    at = data.index(b"PK\x01\x02")
    while True:
        (name_len,) = struct.unpack_from("<H", data, at + 28)
        if data[at + 46: at + 46 + name_len] == member.encode():
            return at
        extra, comment = struct.unpack_from("<HH", data, at + 30)
        at += 46 + name_len + extra + comment


def _patched(data: bytes, member: str, field_offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, _find_central(data, member) + field_offset, value)
    return bytes(buf)


def _recompressed(data: bytes, method: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=method)
    return out.getvalue()


def _damage_member(data: bytes, member: str) -> bytes:
    """Overwrite the middle of `member`'s compressed bytes."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(member)
    (name_len, extra_len) = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    buf = bytearray(data)
    for i in range(start + info.compress_size // 3, start + 2 * info.compress_size // 3):
        buf[i] ^= 0x5A
    return bytes(buf)


STORAGE = "m/data/0"  # the member a reader inflates itself (data.pkl's faults end as a corrupt pickle)


def _bad_crc(data):
    return _patched(_recompressed(data, zipfile.ZIP_DEFLATED), STORAGE, 16, "<I", 0x12345678)


def _bad_utf8_name(data):
    at = _find_central(data, STORAGE)
    buf = bytearray(_patched(data, STORAGE, 8, "<H", struct.unpack_from("<H", data, at + 8)[0] | 0x800))
    buf[at + 46] = 0xFF  # a UTF-8-flagged name that is not UTF-8
    return bytes(buf)


ZIP_FAULTS = {  # what the damaged file raised before the reader guarded it
    "BadZipFile (bad CRC)": _bad_crc,
    "zlib.error": lambda d: _damage_member(_recompressed(d, zipfile.ZIP_DEFLATED), STORAGE),
    "bz2 OSError": lambda d: _damage_member(_recompressed(d, zipfile.ZIP_BZIP2), STORAGE),
    "LZMAError": lambda d: _damage_member(_recompressed(d, zipfile.ZIP_LZMA), STORAGE),
    "NotImplementedError (compression 99)": lambda d: _patched(_recompressed(d, zipfile.ZIP_DEFLATED), STORAGE, 10, "<H", 99),
    "NotImplementedError (zip file version)": lambda d: _patched(_recompressed(d, zipfile.ZIP_DEFLATED), STORAGE, 6, "<H", 95),
    "UnicodeDecodeError (member name)": _bad_utf8_name,
}


@pytest.mark.parametrize("fault", ZIP_FAULTS)
def test_damaged_zip_is_one_format_error(tmp_path, fault):
    good = _saved(tmp_path, {"w": torch.randn(64, 64)})
    path = tmp_path / "bad.pth"
    path.write_bytes(ZIP_FAULTS[fault](good))
    _one_line_error(_read_whole, path)


def test_deflated_storages_still_read(tmp_path):
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    path = tmp_path / "deflated.pth"
    path.write_bytes(_recompressed(_saved(tmp_path, {"t": base.t(), "tail": base[3:, 5:]}), zipfile.ZIP_DEFLATED))
    reader = TorchZipFile(path)
    np.testing.assert_array_equal(reader.array("t"), base.t().numpy())
    np.testing.assert_array_equal(reader.array("tail"), base[3:, 5:].numpy())


# ----------------------------------------------------------------------------- pickle structure


def test_deeply_nested_dicts(tmp_path):
    nested = {"w": torch.ones(1)}
    for _ in range(1000):
        nested = {"a": nested}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)  # torch.save's pickler recurses once per level
    try:
        torch.save(nested, tmp_path / "deep.pth")
    finally:
        sys.setrecursionlimit(limit)
    _one_line_error(TorchZipFile, tmp_path / "deep.pth", "nested more than")


def test_two_tensors_on_one_key(tmp_path):
    torch.save({"a.b": torch.zeros(2), "a": {"b": torch.ones(2)}}, tmp_path / "clash.pth")
    _one_line_error(TorchZipFile, tmp_path / "clash.pth", "two tensors flatten to the key 'a.b'")


def test_tied_tensors_and_nested_dicts_still_read(tmp_path):
    tied = torch.randn(3)
    torch.save({"model": {"enc": {"w": tied}, "dec.w": tied}}, tmp_path / "tied.pth")
    reader = TorchZipFile(tmp_path / "tied.pth")
    assert list(reader.tensors) == ["enc.w", "dec.w"]
    np.testing.assert_array_equal(reader.array("dec.w"), tied.numpy())


def test_broadcast_view_needs_more_than_its_storage(tmp_path):
    torch.save({"w": torch.ones(1).expand(65536, 65536)}, tmp_path / "expand.pth")  # 4 bytes viewed as 16 GiB
    _one_line_error(TorchZipFile, tmp_path / "expand.pth", "needs more than its storage's 1 elements")


def test_non_integer_size(tmp_path):
    size = b"(G" + struct.pack(">d", 4.0) + b"t"  # (4.0,): arithmetic accepts it, numpy does not
    path = _archive(tmp_path / "size.pth", _state({"w": _tensor("0", 4, None, [1], size_ops=size)}), {"0": bytes(16)})
    _one_line_error(TorchZipFile, path, "invalid size")


def test_storage_type_torch_never_wrote(tmp_path):
    path = _archive(tmp_path / "f8.pth", _state({"w": _tensor("0", 4, [4], [1], storage="Float8_e5m2Storage")}), {"0": bytes(4)})
    _one_line_error(TorchZipFile, path, "torch.Float8_e5m2Storage")


def test_storage_size_must_match_the_pickle(tmp_path):
    path = _archive(tmp_path / "short.pth", _state({"w": _tensor("0", 8, [4], [1])}), {"0": bytes(16)})
    _one_line_error(TorchZipFile, path, "holds 16 bytes but the pickle declares 32")


def test_build_cannot_change_a_storage_stand_in(tmp_path):
    # persistent_load's (key, dtype) pair becomes {"dtype": float16} via OrderedDict([pair]); BUILD then
    # sets it on torch.FloatStorage: a stand-in shared between loads would read every later float32 as float16
    pair = b"(" + _text("storage") + b"ctorch\nHalfStorage\n" + _text("dtype") + _text("cpu") + b"K\x02tQ"
    evil = b"\x80\x02ctorch\nFloatStorage\nccollections\nOrderedDict\n" + pair + b"\x85\x85R" + b"b."
    _archive(tmp_path / "evil.pth", evil, {"dtype": bytes(4)})
    with contextlib.suppress(FormatError):  # whether it is refused or not, it must change nothing
        TorchZipFile(tmp_path / "evil.pth")
    torch.save({"w": torch.tensor([1.5, -2, 3.25, 4])}, tmp_path / "good.pth")
    np.testing.assert_array_equal(TorchZipFile(tmp_path / "good.pth").array("w"), np.array([1.5, -2, 3.25, 4], np.float32))


# ----------------------------------------------------------------------------- dtypes torch 2.x writes through _rebuild_tensor_v3

V3_DTYPES = {torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.float8_e5m2: ml_dtypes.float8_e5m2,
             torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64}


def test_fp8_and_unsigned_tensors_read(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {str(d): (torch.randn(4, 6, generator=gen) * 3 if d.is_floating_point else torch.randint(0, 60000, (4, 6), generator=gen)).to(d)
               for d in V3_DTYPES}
    tensors["e4m3_t"] = tensors["torch.float8_e4m3fn"].t()  # a strided view of the same storage
    torch.save(tensors, tmp_path / "v3.pth")
    assert b"_rebuild_tensor_v3" in (tmp_path / "v3.pth").read_bytes()
    reader = TorchZipFile(tmp_path / "v3.pth")
    for name, tensor in tensors.items():
        expected = tensor.contiguous().view(torch.uint8).numpy().view(V3_DTYPES[tensor.dtype]).reshape(tensor.shape)
        got = reader.array(name)
        assert got.dtype == np.dtype(V3_DTYPES[tensor.dtype]) and got.shape == tuple(tensor.shape)
        np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))  # bit for bit


def test_unsupported_dtype_is_named(tmp_path):
    torch.save({"z": torch.ones(2, dtype=torch.complex64), "w": torch.ones(2)}, tmp_path / "complex.pth")
    _one_line_error(TorchZipFile, tmp_path / "complex.pth", r"ComplexFloatStorage is not supported \(readable dtypes")
    torch.save({"q": torch.ones(2).to(torch.float8_e4m3fnuz)}, tmp_path / "fnuz.pth")
    _one_line_error(TorchZipFile, tmp_path / "fnuz.pth", "dtype torch.float8_e4m3fnuz is not supported")


# ----------------------------------------------------------------------------- hangs, crashes and memory: in a subprocess


def _memo_bomb(tmp_path):  # one LONG_BINPUT of index 2^28: CPython's unpickler grows its memo to 2^29 slots
    return _archive(tmp_path / "memo.pth", _state({"w": _tensor("0", 4, [4], [1])}, prefix=b"N" + b"r" + struct.pack("<I", 1 << 28) + b"0"),
                    {"0": bytes(16)})


def _self_wrapping(tmp_path):
    state = {"w": torch.ones(2)}
    state["state_dict"] = state
    torch.save(state, tmp_path / "cycle.pth")
    return tmp_path / "cycle.pth"


def _dag(tmp_path):  # 40 levels of {"a": x, "b": x}: 2^40 paths to one tensor
    level = {"w": torch.ones(2)}
    for _ in range(40):
        level = {"a": level, "b": level}
    torch.save(level, tmp_path / "dag.pth")
    return tmp_path / "dag.pth"


def _deep_tuple_key(tmp_path):  # hashing a tuple nested 10^6 deep overflows the C stack (a crash, not an error)
    nested_key = _int(0) + b"\x85" * 1_000_000
    return _archive(tmp_path / "tuple.pth", b"\x80\x02}" + nested_key + _int(1) + b"s.")


def _inflation_bomb(tmp_path):  # 256 MiB of zeros deflated to 250 kB, of which the one tensor uses 16 elements
    numel = 64 << 20
    path = tmp_path / "bomb.pth"
    with zipfile.ZipFile(path, "w", compresslevel=1) as archive:
        archive.writestr("archive/data.pkl", _state({"w": _tensor("0", numel, [16], [1], offset=1000)}))
        info = zipfile.ZipInfo("archive/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            chunk = bytes(16 << 20)
            for _ in range(numel * 4 // len(chunk)):
                member.write(chunk)
    return path


def _pickle_bomb(tmp_path):  # 8 MB of pickle deflated to 8 kB: scanning it would take seconds per kB of file
    path = tmp_path / "pickle_bomb.pth"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02]" + b"Na" * (4 << 20) + b".")
    return path


WORKER_FAULTS = {"deflated pickle inflating 1000-fold": _pickle_bomb, "memo index 2^28": _memo_bomb, "state_dict wrapper containing itself": _self_wrapping,
                 "memo DAG 40 levels deep": _dag, "tuple key nested 10^6 deep": _deep_tuple_key}




@pytest.fixture(scope="module")
def worker_rows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    cases = {**WORKER_FAULTS, "deflated storage": _inflation_bomb}
    paths = [make(folder) for make in cases.values()]
    return dict(zip(cases, read_in_worker(paths, folder)))


@pytest.mark.parametrize("fault", WORKER_FAULTS)
def test_hostile_structure_is_refused_fast_and_small(worker_rows, fault):
    row = worker_rows[fault]
    assert row["outcome"] == "FormatError", row
    assert row["path"] in row["message"] and "\n" not in row["message"]
    assert row["seconds"] < 1.0 and row["rss_mb"] < PEAK_RSS_MB, row


def test_deflated_storage_inflates_only_what_its_tensors_use(worker_rows):
    row = worker_rows["deflated storage"]
    assert row["outcome"] == "ok", row
    assert row["seconds"] < 1.0 and row["rss_mb"] < PEAK_RSS_MB, row  # inflated whole it is 256 MiB


def test_vidax_convert_refuses_the_cycle_without_hanging(tmp_path):
    path = _self_wrapping(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="300")
    proc = subprocess.run([sys.executable, "-m", "vidax.cli.convert", "wan2.1-t2v-1.3b", "--components", "vae",
                           "--source", str(path), "--out", str(out)], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and "wrappers contain themselves" in lines[0] and str(path) in lines[0], lines
    assert not (out / "vae").exists()


# ----------------------------------------------------------------------------- safetensors and index files


def _safetensors(path, header: bytes, data: bytes = b"") -> object:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


SAFETENSORS_FAULTS = {  # what the header raised before the reader guarded it
    "TypeError (dtype as a list)": (b'{"w": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}', "unknown dtype"),
    "ValueError (4,400-digit integer)": (b'{"w": {"dtype": "F32", "shape": [' + b"9" * 4400 + b'], "data_offsets": [0, 4]}}',
                                         "not valid JSON"),
    "RecursionError (nested JSON)": (b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not valid JSON"),
    "silent loss (a name twice)": (b'{"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, '
                                   b'"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', "appears twice"),
    "ValueError (a 5,400-digit byte count)": (b'{"w": {"dtype": "F32", "shape": [' + b", ".join([b"1" + b"0" * 18] * 300)
                                              + b'], "data_offsets": [0, 4]}}', "invalid shape"),
}


@pytest.mark.parametrize("fault", SAFETENSORS_FAULTS)
def test_malformed_safetensors_header(tmp_path, fault):
    header, match = SAFETENSORS_FAULTS[fault]
    _one_line_error(SafetensorsFile, _safetensors(tmp_path / "bad.safetensors", header, bytes(4)), match)


@pytest.mark.parametrize("shard", [3, ["a.safetensors"], "../outside.safetensors", "/etc/hostname"])
def test_index_shard_must_be_a_file_name_in_its_folder(tmp_path, shard):
    save_file({"w": torch.ones(1)}, tmp_path / "a.safetensors")
    (tmp_path / "outside.safetensors").write_bytes((tmp_path / "a.safetensors").read_bytes())
    folder = tmp_path / "model"
    folder.mkdir()
    index = folder / "m.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": shard}}))
    _one_line_error(lambda p: Checkpoint([p]), index, "is not a file name in its folder")
