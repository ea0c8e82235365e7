"""Seeded fuzzing of both checkpoint readers: every mutant of a small real `torch.save` or safetensors file
either opens (and its arrays read) or ends in the translator's FormatError, one line naming the file,
within a per-case time limit and a bounded peak memory.

The mutants are made here (the seeds need torch); a fresh subprocess without torch reads them all, so its
peak resident memory is the readers' own, and an address-space limit keeps a regression from taking the
machine's memory with it.
"""

from __future__ import annotations

import io
import json
import pickletools
import random
import struct
import subprocess
import sys
import zipfile

import pytest
import torch
from safetensors.torch import save_file

SEED = 27
PTH_MUTANTS = 300
SAFETENSORS_MUTANTS = 300
CASE_SECONDS = 1.0
PEAK_RSS_MB = 200  # the worker's whole peak: interpreter, numpy, ml_dtypes and the readers
ADDRESS_LIMIT = 2 << 30  # a regression fails with MemoryError instead of exhausting the host

# Reads every file named in argv[1] (one per line) and prints one JSON line per case.
WORKER = r"""
import json, resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from vidax.translator.formats.checkpoint import open_file
from vidax.translator.errors import FormatError

class CaseTimeout(BaseException):  # not an Exception: no reader may turn it into its own error
    pass

def on_alarm(signum, frame):
    raise CaseTimeout()

signal.signal(signal.SIGALRM, on_alarm)
from pathlib import Path
for line in open(sys.argv[1]).read().splitlines():
    path = Path(line)
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, float(sys.argv[3]) * 5)
    outcome, message = "ok", ""
    try:
        reader = open_file(path)
        for name in reader.tensors:
            reader.array(name).sum()
    except FormatError as err:
        outcome, message = "FormatError", str(err)
    except CaseTimeout:
        outcome = "timeout"
    except BaseException as err:
        outcome, message = type(err).__name__, str(err)[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - start
    # VmHWM: this process's own peak (ru_maxrss would carry over the forking parent's across exec)
    rss = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
    print(json.dumps({"path": line, "outcome": outcome, "message": message, "seconds": seconds, "rss_mb": rss}), flush=True)
"""


# ----------------------------------------------------------------------------- seeds


def _pth_seeds(folder) -> list[bytes]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tied = torch.nn.Parameter(torch.randn(3, 2))
    states = [
        {"w": torch.randn(2, 3), "b": torch.randn(3).to(torch.bfloat16), "i": torch.arange(4), "m": torch.tensor([True, False]),
         "h": torch.randn(2, 2).half()},
        {"state_dict": {"t": base.t(), "slice": base[1:3, 2:5], "tied.a": tied, "tied.b": tied}, "epoch": 3},
        {"e4": torch.randn(4).to(torch.float8_e4m3fn), "e5": torch.randn(2, 2).to(torch.float8_e5m2),
         "u16": torch.arange(3).to(torch.uint16), "u32": torch.arange(2).to(torch.uint32),
         "u64": torch.arange(2).to(torch.uint64)},
        {"model": {"enc": {"conv": {"weight": torch.randn(2, 1, 3), "bias": torch.zeros(2)}}, "scalar": torch.tensor(1.5)}},
    ]
    seeds = []
    for n, state in enumerate(states):
        path = folder / f"seed{n}.pth"
        torch.save(state, path)
        seeds.append(path.read_bytes())
    return seeds


def _safetensors_seeds(folder) -> list[bytes]:
    states = [
        ({"w": torch.randn(2, 3), "b": torch.randn(3).to(torch.bfloat16), "i": torch.arange(4)}, {"format": "pt"}),
        ({"e4": torch.randn(4).to(torch.float8_e4m3fn), "u16": torch.arange(3).to(torch.uint16),
          "s": torch.tensor(2.0), "empty": torch.zeros(0, 3)}, None),
    ]
    seeds = []
    for n, (state, metadata) in enumerate(states):
        path = folder / f"seed{n}.safetensors"
        save_file(state, path, metadata=metadata)
        seeds.append(path.read_bytes())
    return seeds


# ----------------------------------------------------------------------------- generic mutations

INTERESTING_INTS = [0, 1, -1, 2, 7, 255, 65535, 2**31 - 1, 2**32, 2**28, 2**63, 10**20]


def _flip_bytes(rng: random.Random, data: bytes, lo: int = 0, hi: int | None = None) -> bytes:
    buf = bytearray(data)
    hi = len(buf) if hi is None else hi
    for _ in range(rng.randint(1, 4)):
        if hi > lo:
            buf[rng.randrange(lo, hi)] = rng.randrange(256)
    return bytes(buf)


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


# ----------------------------------------------------------------------------- .pth mutations


def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info, archive.read(info)) for info in archive.infolist()]


def _zip(members, compression: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for info, payload in members:
            archive.writestr(info.filename, payload, compress_type=compression)
    return out.getvalue()


def _with_pickle(data: bytes, edit) -> bytes:
    members = _members(data)
    return _zip([(info, edit(payload) if info.filename.endswith("data.pkl") else payload) for info, payload in members])


GLOBAL_SWAPS = [b"torch Float8_e5m2Storage", b"torch HalfStorage", b"torch LongStorage", b"torch._utils _rebuild_tensor_v3",
                b"torch uint16", b"torch float8_e5m2", b"torch complex64", b"collections OrderedDict", b"builtins list",
                b"torch.storage UntypedStorage", b"torch._utils _rebuild_parameter"]


def _pickle_edit(rng: random.Random, pkl: bytes) -> bytes:
    ops = list(pickletools.genops(pkl))
    bounds = [(pos, ops[i + 1][2] if i + 1 < len(ops) else len(pkl)) for i, (_, _, pos) in enumerate(ops)]
    i = rng.randrange(len(ops))
    op, arg, pos = ops[i]
    start, end = bounds[i]
    kind = rng.randrange(7)
    if kind == 0:  # delete one opcode
        return pkl[:start] + pkl[end:]
    if kind == 1:  # duplicate one opcode
        return pkl[:end] + pkl[start:end] + pkl[end:]
    if kind == 2:  # another opcode byte in its place
        return pkl[:start] + bytes([rng.choice(b"()}]qhjrKMJNtu.RbQ\x85\x86\x87\x88\x89\x94")]) + pkl[start + 1:]
    if kind == 3:  # a global swapped for another allowed (or refused) one
        s, e = rng.choice([bounds[j] for j, (o, _, _) in enumerate(ops) if o.name == "GLOBAL"])
        return pkl[:s] + b"c" + rng.choice(GLOBAL_SWAPS) + b"\n" + pkl[e:]
    if kind == 4:  # an integer argument replaced by an interesting one (BININT keeps its width)
        ints = [j for j, (o, _, _) in enumerate(ops) if o.name in ("BININT1", "BININT", "BINPUT", "LONG_BINPUT", "BINGET")]
        j = rng.choice(ints)
        s, e = bounds[j]
        value = rng.choice(INTERESTING_INTS)
        replacement = {0: b"J" + struct.pack("<i", max(min(value, 2**31 - 1), -(2**31))),
                       1: b"r" + struct.pack("<I", value % 2**32),  # LONG_BINPUT: memo index
                       2: b"j" + struct.pack("<I", value % 2**32),  # LONG_BINGET
                       3: b"G" + struct.pack(">d", value + 0.5),  # a float where an int was
                       4: b"L" + str(value).encode() + b"L\n"}[rng.randrange(5)]
        return pkl[:s] + replacement + pkl[e:]
    if kind == 5:  # bytes flipped inside the pickle
        return _flip_bytes(rng, pkl)
    return pkl[: rng.randrange(len(pkl))]  # truncated pickle


ZIP_CENTRAL = b"PK\x01\x02"
ZIP_LOCAL = b"PK\x03\x04"


def _zip_tweak(rng: random.Random, data: bytes) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # recompressed (deflate, bzip2, lzma), then its bytes damaged
        packed = _zip(_members(data), rng.choice([zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]))
        return _flip_bytes(rng, packed, 0, len(packed) // 2) if rng.random() < 0.8 else packed
    if kind == 1:  # a member dropped or renamed
        members = _members(data)
        victim = rng.randrange(len(members))
        if rng.random() < 0.5:
            return _zip(members[:victim] + members[victim + 1:])
        info, payload = members[victim]
        info.filename = info.filename + rng.choice(["x", "/", ""]) if rng.random() < 0.5 else "other/data.pkl"
        return _zip(members[:victim] + [(info, payload)] + members[victim + 1:])
    buf = bytearray(data)
    sig = rng.choice([ZIP_CENTRAL, ZIP_LOCAL])
    spots = [i for i in range(len(buf)) if buf.startswith(sig, i)]
    at = rng.choice(spots)
    central = sig == ZIP_CENTRAL
    fields = {  # field name -> (offset, struct format) in a central / local header
        "version": (6 if central else 4, "<H"), "flags": (8 if central else 6, "<H"),
        "method": (10 if central else 8, "<H"), "crc": (16 if central else 14, "<I"),
        "csize": (20 if central else 18, "<I"), "usize": (24 if central else 22, "<I"),
        "namelen": (28 if central else 26, "<H"), "extralen": (30 if central else 28, "<H")}
    if central:
        fields["offset"] = (42, "<I")
    name = rng.choice(list(fields))
    offset, fmt = fields[name]
    value = {"version": rng.choice([20, 45, 63, 64, 99]), "flags": rng.choice([0x800, 0x1, 0x20, 0x40, 0x8]),
             "method": rng.choice([1, 6, 8, 9, 12, 14, 93, 99]), "crc": rng.randrange(2**32),
             "csize": rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(4096)]),
             "usize": rng.choice([0, 1, 2**31, 3 << 30, 2**32 - 1, rng.randrange(4096)]),
             "namelen": rng.randrange(64), "extralen": rng.randrange(64),
             "offset": rng.choice([0, 1, 2**31, rng.randrange(len(buf))])}[name]
    if name == "flags":
        value |= struct.unpack_from("<H", buf, at + offset)[0]
        if value & 0x800 and central:  # a UTF-8 flag over a name that is not UTF-8
            name_at = at + 46
            buf[name_at] = 0xFF
    if fmt == "<H":
        value %= 2**16
    struct.pack_into(fmt, buf, at + offset, value % 2**32)
    return bytes(buf)


def _pth_mutant(rng: random.Random, seed: bytes) -> bytes:
    kind = rng.randrange(10)
    if kind < 2:
        return _flip_bytes(rng, seed)
    if kind == 2:
        return _truncate(rng, seed)
    if kind < 6:
        return _with_pickle(seed, lambda pkl: _pickle_edit(rng, pkl))
    return _zip_tweak(rng, seed)


# ----------------------------------------------------------------------------- safetensors mutations


def _split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8: 8 + n]), data[8 + n:]


def _join(header_text: bytes, body: bytes, length: int | None = None) -> bytes:
    header_text += b" " * (-len(header_text) % 8)
    return struct.pack("<Q", len(header_text) if length is None else length) + header_text + body


FIELD_VALUES = {
    "dtype": ["F32", "BF16", "F8_E5M2", "U64", "X", "", ["F32"], 1, None, {"a": 1}],
    "shape": [[-1], [1.5], [2**64], [True], "3", [[2]], [], [0], [10**30, 0], [1] * 40, None],
    "data_offsets": [[0], [0, 2**70], [-4, 0], [0, "8"], [8, 0], [0, 0], [0, 1.5], None, [0, 4, 8]],
}


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _header_edit(rng: random.Random, data: bytes) -> bytes:
    header, body = _split(data)
    names = [k for k in header if k != "__metadata__"]
    kind = rng.randrange(7)
    if kind == 0:  # one field of one entry set to a wrong value
        entry = header[rng.choice(names)]
        field = rng.choice(list(FIELD_VALUES))
        entry[field] = rng.choice(FIELD_VALUES[field])
    elif kind == 1:  # an entry's field dropped, or the entry replaced by a non-object
        name = rng.choice(names)
        if rng.random() < 0.5:
            del header[name][rng.choice(list(header[name]))]
        else:
            header[name] = rng.choice([[], 3, "x", None])
    elif kind == 2:  # metadata of the wrong shape
        header["__metadata__"] = rng.choice([{"a": 1}, ["x"], "x", {"a": {"b": "c"}}, 0])
    elif kind == 3:  # a very long integer or deep nesting in place of a value
        text = json.dumps(header).encode()
        hole = rng.choice([b"9" * 4400, _deep(rng.choice([2000, 100_000])), b"-" + b"1" * 5000])
        target = json.dumps(rng.choice(names)).encode() + b": "
        at = text.index(target) + len(target)
        return _join(text[:at] + b"{\"dtype\": " + hole + b"}" + text[text.index(b"}", at) + 1:], body)
    elif kind == 4:  # the header is not an object
        return _join(rng.choice([b"[]", b"3", b"\"x\"", b"null", _deep(5000), b"\xff\xfe{}"]), body)
    elif kind == 5:  # header length field off
        text = json.dumps(header).encode()
        return _join(text, body, rng.choice([0, 1, len(text) - 1, len(text) + 7, len(data), 2**63, 2**64 - 1]))
    else:  # a duplicated tensor name (JSON keeps the last)
        text = json.dumps(header).encode()
        name = json.dumps(rng.choice(names)).encode()
        return _join(text[:1] + name + b": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, " + text[1:], body)
    return _join(json.dumps(header).encode(), body)


def _safetensors_mutant(rng: random.Random, seed: bytes) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return _flip_bytes(rng, seed)
    if kind == 1:
        (n,) = struct.unpack("<Q", seed[:8])
        return _flip_bytes(rng, seed, 0, 8 + n)  # inside the length or the JSON header
    if kind == 2:
        return _truncate(rng, seed)
    return _header_edit(rng, seed)


# ----------------------------------------------------------------------------- the test


def read_in_worker(paths, folder, case_seconds: float = CASE_SECONDS) -> list[dict]:
    """Open each file and read its arrays in one fresh subprocess: one row per file (outcome, message,
    seconds, peak RSS so far). A case running past 5x its limit is cut short and reported as a timeout."""
    listing = folder / "cases.txt"
    listing.write_text("\n".join(map(str, paths)))
    proc = subprocess.run([sys.executable, "-c", WORKER, str(listing), str(ADDRESS_LIMIT), str(case_seconds)],
                          capture_output=True, text=True, timeout=60 + 10 * case_seconds * len(paths))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == len(paths), proc.stderr[-3000:]
    return rows


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    rng = random.Random(SEED)
    paths = []
    for suffix, seeds, make, count in ((".pth", _pth_seeds(folder), _pth_mutant, PTH_MUTANTS),
                                       (".safetensors", _safetensors_seeds(folder), _safetensors_mutant, SAFETENSORS_MUTANTS)):
        paths += [folder / f"seed{n}{suffix}" for n in range(len(seeds))]
        for n in range(count):
            path = folder / f"mutant{n:03d}{suffix}"
            path.write_bytes(make(rng, rng.choice(seeds)))
            paths.append(path)
    return read_in_worker(paths, folder)


def test_seeds_read_whole(results):
    seeds = [r for r in results if "/seed" in r["path"]]
    assert len(seeds) == 6 and all(r["outcome"] == "ok" for r in seeds), seeds


def test_every_mutant_opens_or_raises_one_format_error_line(results):
    escaped = [f"{r['path'].rsplit('/', 1)[1]}: {r['outcome']}: {r['message'][:160]}" for r in results
               if r["outcome"] not in ("ok", "FormatError")]
    assert escaped == [], f"{len(escaped)} mutants escaped:\n" + "\n".join(escaped[:40])
    unclear = [r for r in results if r["outcome"] == "FormatError" and (r["path"] not in r["message"] or "\n" in r["message"])]
    assert unclear == [], unclear[:5]
    # the mutations reach past the first check: many mutants fail, some still read
    outcomes = [r["outcome"] for r in results if "/mutant" in r["path"]]
    assert outcomes.count("FormatError") > 300 and outcomes.count("ok") > 20


def test_every_case_is_fast(results):
    slow = [(r["path"].rsplit("/", 1)[1], round(r["seconds"], 2)) for r in results if r["seconds"] > CASE_SECONDS]
    assert slow == []


def test_peak_memory_is_bounded(results):
    assert max(r["rss_mb"] for r in results) < PEAK_RSS_MB, max(results, key=lambda r: r["rss_mb"])
