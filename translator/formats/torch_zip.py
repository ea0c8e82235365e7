"""PyTorch zip checkpoints (`torch.save` since 1.6: .pth/.pt/.bin) read without torch.

A checkpoint is untrusted input. Reading one can run no code, cannot change the process, and ends
either in tensors or in one FormatError line, quickly and in memory proportional to the file:

- the pickle is scanned opcode by opcode before it is unpickled: memo indices beyond its opcode count
  (CPython's unpickler would size its memo by them) and nesting deeper than MAX_NESTING (hashing a
  deep tuple overflows the C stack) are refused;
- the restricted unpickler hands out harmless stand-ins for the few globals a state dict needs (tensor
  and parameter rebuilders, storage types, tensor dtypes, OrderedDict), new for every load and
  immutable, and refuses every other global *before* the pickle can call it;
- the unpickled tree is walked once, each container visited at most once (a cycle or a shared
  subtree is refused, never followed), and two tensors flattening onto one key are refused;
- every view is checked against its storage's size from the zip directory before any data is read:
  it must fit, and cannot need more elements than the storage holds (no broadcast views).

Storages are zero-copy views of the memory-mapped file when stored uncompressed (as torch writes
them); deflated ones are inflated lazily, only the span their tensors use.

A TorchScript archive (`torch.jit.save`: OpenAI's CLIP `.pt` files, StyleGAN-V's I3D) is the same zip
with `code/` beside it; its `data.pkl` builds the module tree from `__torch__.*` classes. Those names
resolve to an inert record of the module's attributes (no code in `code/` is read or run), so its
parameters and tensor buffers read as a state dict under their module paths (`visual.conv1.weight`).
"""

from __future__ import annotations

import collections
import contextlib
import io
import lzma
import math
import mmap
import pickle
import pickletools
import struct
import zipfile
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.translator.errors import FormatError, brief, clip, describe
from vidax.translator.formats.safetensors_io import TensorInfo

# torch's typed storage classes (`_rebuild_tensor_v2`) and tensor dtypes (`_rebuild_tensor_v3`, which
# torch 2.x uses for fp8 and unsigned tensors over an untyped byte storage).
STORAGE_DTYPES = {
    "DoubleStorage": np.dtype("<f8"), "FloatStorage": np.dtype("<f4"), "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype(ml_dtypes.bfloat16), "LongStorage": np.dtype("<i8"), "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"), "CharStorage": np.dtype("i1"), "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}
TENSOR_DTYPES = {
    "float64": np.dtype("<f8"), "float32": np.dtype("<f4"), "float16": np.dtype("<f2"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16), "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2), "int64": np.dtype("<i8"), "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"), "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"), "uint64": np.dtype("<u8"), "bool": np.dtype("?"),
}
# torch names a pickle may use that vidax recognises but cannot read: refused as unsupported dtypes.
UNSUPPORTED_STORAGES = ("ComplexDoubleStorage", "ComplexFloatStorage", "QInt32Storage", "QInt8Storage",
                        "QUInt2x4Storage", "QUInt4x2Storage", "QUInt8Storage")
UNSUPPORTED_DTYPES = ("complex32", "complex64", "complex128", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
                      "float4_e2m1fn_x2", "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "bits1x8", "bits2x4",
                      "bits4x2", "bits8", "bits16", *(f"int{n}" for n in range(1, 8)), *(f"uint{n}" for n in range(1, 8)))
SUPPORTED_NAMES = ", ".join(TENSOR_DTYPES)

WRAPPER_KEYS = ("state_dict", "module", "model")
PICKLE_CAP = 64 << 20  # data.pkl bytes: a state dict of 100k tensors pickles to ~10 MB
INFLATE_RATIO = 32  # a deflated data.pkl may not inflate more (reading a pickle takes time per byte)
MAX_NESTING = 200  # containers within containers, in the pickle and in the state dict
MAX_STACK = 1 << 22  # objects on the unpickler's stack at once (8 bytes each in CPython); torch's use a few
MAX_DIM = 1 << 62  # a size, stride or offset above this is corrupt (and would overflow numpy)
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # zip local file header, 30 bytes
_READABLE = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}  # torch writes stored members
_INFLATE_CHUNK = 16 << 20
# what a damaged archive raises from zipfile, zlib and friends (bz2's errors are OSErrors)
_ARCHIVE_ERRORS = (OSError, EOFError, RuntimeError, ValueError, LookupError, OverflowError, struct.error,
                   zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, lzma.LZMAError)


# ----------------------------------------------------------------------------- stand-ins handed to the pickle


class _Frozen:
    """A stand-in no pickle opcode can change: no __dict__ (BUILD finds none), setattr refused."""

    __slots__ = ()

    def __init__(self, **fields):
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    __delattr__ = __setattr__


class _StorageKind(_Frozen):
    """`torch.FloatStorage` & co. (element dtype), `torch.UntypedStorage` (bytes), or one vidax cannot read."""

    __slots__ = ("name", "dtype", "element_bytes")


class _DType(_Frozen):
    """`torch.float8_e4m3fn` & co., as `_rebuild_tensor_v3` receives them; `dtype` None: unsupported."""

    __slots__ = ("name", "dtype")


class _StorageRef(_Frozen):
    """What a persistent id resolves to: the archive's `data/<key>` member and the bytes the pickle declares."""

    __slots__ = ("key", "kind", "nbytes")


class _Tensor(_Frozen):
    """A tensor as the pickle describes it; validated against its storage only after the load."""

    __slots__ = ("storage", "offset", "size", "stride", "dtype")


class _Call(_Frozen):
    """A callable global: `function(*args)`; a new one per load, so no load sees another's."""

    __slots__ = ("function",)

    def __call__(self, *args):
        return self.function(*args)


def _tensor_v2(storage, storage_offset, size, stride, *_ignored):
    return _Tensor(storage=storage, offset=storage_offset, size=size, stride=stride, dtype=None)


def _tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, *_ignored):
    return _Tensor(storage=storage, offset=storage_offset, size=size, stride=stride, dtype=dtype)


def _parameter(data, *_ignored):
    return data


def _ordered_dict(*args):
    return collections.OrderedDict(*args)


class _ScriptModule:
    """A TorchScript module as its pickle describes it: the class name and the attribute dict BUILD gives it
    once. Only a plain dict is accepted as its state; nothing of the class is looked up or called."""

    __slots__ = ("script_class", "state")

    def __setstate__(self, state):
        if not isinstance(state, dict) or getattr(self, "state", None) is not None:
            raise ValueError(f"a TorchScript object of class {clip(self.script_class, 80)} with a custom state "
                             f"({type(state).__name__}), not a module's attributes")
        self.state = state


def _script_class(module: str, name: str) -> type:
    """A fresh subclass of `_ScriptModule` for one `__torch__.*` global (NEWOBJ needs a class)."""
    cls = type("ScriptModule", (_ScriptModule,), {"__slots__": ()})
    cls.__new__ = staticmethod(lambda klass, *args: _new_script_object(klass, f"{module}.{name}", args))
    return cls


def _new_script_object(klass: type, qualified: str, args: tuple) -> _ScriptModule:
    if args:
        raise ValueError(f"TorchScript class {clip(qualified, 80)} built with arguments")
    obj = object.__new__(klass)
    object.__setattr__(obj, "script_class", qualified)
    object.__setattr__(obj, "state", None)
    return obj


def _fresh_globals() -> dict[tuple[str, str], object]:
    """Every global a checkpoint may name, as new stand-ins (one table per load)."""
    table: dict[tuple[str, str], object] = {
        ("collections", "OrderedDict"): _Call(function=_ordered_dict),
        ("torch._utils", "_rebuild_tensor"): _Call(function=_tensor_v2),
        ("torch._utils", "_rebuild_tensor_v2"): _Call(function=_tensor_v2),
        ("torch._utils", "_rebuild_tensor_v3"): _Call(function=_tensor_v3),
        ("torch._utils", "_rebuild_parameter"): _Call(function=_parameter),
        ("torch._utils", "_rebuild_parameter_with_state"): _Call(function=_parameter),
    }
    for name, dtype in STORAGE_DTYPES.items():
        table["torch", name] = _StorageKind(name=name, dtype=dtype, element_bytes=dtype.itemsize)
    for name in UNSUPPORTED_STORAGES:
        table["torch", name] = _StorageKind(name=name, dtype=None, element_bytes=None)
    untyped = _StorageKind(name="UntypedStorage", dtype=np.dtype("u1"), element_bytes=1)
    table["torch", "UntypedStorage"] = table["torch.storage", "UntypedStorage"] = untyped
    for name, dtype in TENSOR_DTYPES.items():
        table["torch", name] = _DType(name=name, dtype=dtype)
    for name in UNSUPPORTED_DTYPES:
        table["torch", name] = _DType(name=name, dtype=None)
    return table


# ----------------------------------------------------------------------------- pickle scan and load

_MUTATORS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}  # change the object below them


def _stack_plan(op: pickletools.OpcodeInfo) -> tuple[str, int, int]:
    """(role, items taken, items made) for one opcode; a `mark` role's count is what it takes below its MARK."""
    if op.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
        return "put", 0, 0
    if op.name in ("GET", "BINGET", "LONG_BINGET"):
        return "get", 0, 1
    if op.name in ("MARK", "POP", "DUP"):
        return op.name.lower(), 1, 1
    role = "mutate" if op.name in _MUTATORS else "make"
    if pickletools.markobject in op.stack_before:
        return role + "@mark", op.stack_before.index(pickletools.markobject), len(op.stack_after)
    return role, len(op.stack_before), len(op.stack_after)


_PLANS = {op.code: _stack_plan(op) for op in pickletools.opcodes}


def _scan_pickle(data: bytes) -> None:
    """Simulate the unpickler's stack with each object's nesting depth; raise ValueError on what could
    exhaust memory (a memo index past the opcodes read so far: CPython sizes its memo by the largest
    index) or the C stack (nesting past MAX_NESTING: hashing a deep tuple recurses in C). Depths fit a
    byte, so the simulation costs a byte per stack or memo slot."""
    stack = bytearray()  # nesting depth of each object on the unpickler's stack
    marks = [0]  # stack heights at each MARK (the bottom one: the empty stack), as the unpickler keeps them
    memo, unset = bytearray(), 255
    memo_len = 0  # MEMOIZE's next index: how many slots are set, as CPython counts them
    for count, (op, arg, _) in enumerate(pickletools.genops(data), 1):
        role, taken, made = _PLANS[op.code]
        if role == "put" or role == "get":
            index = memo_len if arg is None else arg
            if not 0 <= index <= count:
                raise ValueError(f"memo index {brief(index)} beyond the {count} opcodes read so far")
            if role == "get":
                if index >= len(memo) or memo[index] == unset:
                    raise ValueError(f"memo index {index} read before it is written")
                stack.append(memo[index])
                continue
            if len(stack) <= marks[-1]:
                raise ValueError(f"{op.name} with nothing to store")
            memo.extend(b"\xff" * (index + 1 - len(memo)))
            memo_len += memo[index] == unset
            memo[index] = stack[-1]
        elif role == "mark":
            if len(marks) > MAX_NESTING:
                raise ValueError(f"MARKs nested more than {MAX_NESTING} deep")
            marks.append(len(stack))
        elif role == "pop" and len(stack) == marks[-1] and len(marks) > 1:
            marks.pop()  # POP right after a MARK drops the mark
        else:
            _stack_effect(op, role, taken, made, stack, marks)


def _stack_effect(op, role: str, taken: int, made: int, stack: bytearray, marks: list[int]) -> None:
    """Pop what `op` consumes and push what it makes, one nesting level above its deepest input."""
    if role.endswith("@mark"):
        if len(marks) == 1:
            raise ValueError(f"{op.name} without a MARK")
        start = marks.pop() - taken  # APPENDS & co. also take the object below the MARK
    else:
        start = len(stack) - taken
    if start < marks[-1]:
        raise ValueError(f"{op.name} on a short stack")
    popped = stack[start:]
    del stack[start:]
    if role == "dup":
        stack += popped * 2
    elif role.startswith("mutate"):  # the container keeps its place; what it now holds may be deeper
        stack.append(max(popped[0], 1 + max(popped[1:], default=0)))
    elif made:
        stack += bytes([1 + max(popped, default=-1)]) * made
    if stack and stack[-1] > MAX_NESTING:
        raise ValueError(f"objects nested more than {MAX_NESTING} deep")
    if len(stack) > MAX_STACK:
        raise ValueError(f"more than {MAX_STACK} objects on the unpickler's stack")


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, path: Path):
        super().__init__(io.BytesIO(data))
        self.path = path
        self.allowed = _fresh_globals()

    def find_class(self, module: str, name: str):
        if isinstance(module, str) and (module == "__torch__" or module.startswith("__torch__.")):
            return self.allowed.setdefault((module, name), _script_class(module, name))
        try:
            return self.allowed[(module, name)]
        except (KeyError, TypeError):
            raise FormatError(f"{self.path}: pickle refers to {clip(module, 80)}.{clip(name, 80)}, which is not allowed in a "
                              "checkpoint (refused without executing it)") from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageKind)
                and isinstance(pid[2], str) and type(pid[4]) is int and 0 <= pid[4] < MAX_DIM):
            raise FormatError(f"{self.path}: unsupported persistent id {brief(pid)}")
        kind = pid[1]
        nbytes = pid[4] * kind.element_bytes if kind.element_bytes else None
        return _StorageRef(key=pid[2], kind=kind, nbytes=nbytes)


def _load_pickle(data: bytes, path: Path, member: str):
    try:
        _scan_pickle(data)
        return _RestrictedUnpickler(data, path).load()
    except FormatError:
        raise
    except Exception as err:  # a truncated, corrupt or hostile stream: whatever the unpickler raised
        raise FormatError(f"{path}: corrupt pickle in {brief(member)} ({describe(err)})") from None


# ----------------------------------------------------------------------------- from the pickled tree to tensors


def _key(key, prefix: str, path: Path) -> str:
    if isinstance(key, str):
        return key
    if type(key) is int and abs(key) < MAX_DIM:  # optimizer states key parameters by index
        return str(key)
    raise FormatError(f"{path}: a key of type {type(key).__name__} under {brief(prefix[:-1] or '<root>')} (not a state dict)")


def _unwrap(obj, path: Path):
    """Real checkpoints nest the state dict under `state_dict`, `module` or `model`."""
    seen: set[int] = set()
    while isinstance(obj, dict):
        if id(obj) in seen:
            raise FormatError(f"{path}: its {'/'.join(WRAPPER_KEYS)} wrappers contain themselves (a cycle)")
        seen.add(id(obj))
        inner = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), dict)), None)
        if inner is None:
            return obj
        obj = inner
    return obj


def _flatten(root, path: Path) -> tuple[dict[str, _Tensor], dict[str, object]]:
    """Dotted key -> tensor (and -> any other value), visiting each container once, in insertion order."""
    tensors: dict[str, _Tensor] = {}
    extras: dict[str, object] = {}
    seen: set[int] = set()
    pending = [(root, "", 0)]
    while pending:
        obj, prefix, depth = pending.pop()
        if isinstance(obj, _ScriptModule):  # a TorchScript module: its attributes, as a dict
            if obj.state is None:
                raise FormatError(f"{path}: the TorchScript module at {brief(prefix[:-1] or '<root>')} has no attributes")
            obj = obj.state
        if isinstance(obj, dict):
            if id(obj) in seen:
                raise FormatError(f"{path}: the dict at {brief(prefix[:-1] or '<root>')} is reached twice (a cycle or "
                                  "shared subtree, not a state dict)")
            if depth >= MAX_NESTING:
                raise FormatError(f"{path}: dicts nested more than {MAX_NESTING} deep (not a state dict)")
            seen.add(id(obj))
            pending += [(value, f"{prefix}{_key(key, prefix, path)}.", depth + 1) for key, value in reversed(obj.items())]
        elif isinstance(obj, _Tensor):
            if prefix[:-1] in tensors:
                raise FormatError(f"{path}: two tensors flatten to the key {brief(prefix[:-1])} (e.g. 'a.b' and 'a' -> 'b')")
            tensors[prefix[:-1]] = obj
        else:
            extras[prefix[:-1]] = obj
    return tensors, extras


# ----------------------------------------------------------------------------- the reader


class _View:
    """A validated tensor: dtype, shape, strides (elements), offset, and the byte span it reads."""

    __slots__ = ("storage", "dtype", "shape", "stride", "offset", "begin", "end")

    def __init__(self, storage: str, dtype: np.dtype, shape, stride, offset: int):
        self.storage, self.dtype, self.shape, self.stride, self.offset = storage, dtype, shape, stride, offset
        last = offset + sum((d - 1) * s for d, s in zip(shape, stride)) if math.prod(shape) else offset - 1
        self.begin, self.end = offset * dtype.itemsize, max(last + 1, offset) * dtype.itemsize


class TorchZipFile:
    """A torch.save zip archive; `tensors` describes every tensor, `array(name)` is a strided view."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.metadata: dict[str, str] = {}
        with self._archive_errors("not a PyTorch zip checkpoint; legacy (pre-1.6) torch.save files are not supported"):
            self._zip = zipfile.ZipFile(self.path)
            with open(self.path, "rb") as fh:
                self._mmap = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        pkl = [n for n in self._zip.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise FormatError(f"{self.path}: expected one <archive>/data.pkl, found {len(pkl)} (legacy torch.save files "
                              "are not supported)")
        self._prefix = pkl[0][: -len("data.pkl")]
        self._check_byteorder()
        root = _load_pickle(self._read_member(pkl[0], PICKLE_CAP), self.path, pkl[0])
        self._raw, self.extras = _flatten(_unwrap(root, self.path), self.path)
        self._views = {name: self._view(name, t) for name, t in self._raw.items()}
        self._inflated: dict[str, tuple[int, bytes]] = {}
        self.tensors = {name: self._info(name, view) for name, view in self._views.items()}

    @contextlib.contextmanager
    def _archive_errors(self, what: str):
        try:
            yield
        except FormatError:
            raise
        except _ARCHIVE_ERRORS as err:
            raise FormatError(f"{self.path}: {what} ({describe(err)})") from None

    def _member(self, name: str, tensor: str | None = None) -> zipfile.ZipInfo:
        where = f"{self.path}" + (f", tensor {brief(tensor)}" if tensor is not None else "")
        try:
            info = self._zip.getinfo(name)
        except KeyError:
            raise FormatError(f"{where}: {brief(name)} missing from the archive") from None
        if info.compress_type not in _READABLE:
            raise FormatError(f"{where}: {brief(name)} uses zip compression method {info.compress_type} "
                              f"(readable: {', '.join(_READABLE.values())})")
        return info

    def _read_member(self, name: str, cap: int) -> bytes:
        info = self._member(name)
        if info.file_size > cap:
            raise FormatError(f"{self.path}: {brief(name)} declares {info.file_size} bytes, above the {cap}-byte cap")
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > max(1 << 20, INFLATE_RATIO * info.compress_size):
            raise FormatError(f"{self.path}: {brief(name)} inflates {info.compress_size} bytes to {info.file_size}, more "
                              f"than {INFLATE_RATIO}-fold (a pickle compresses 4-5-fold)")
        with self._archive_errors(f"cannot read {brief(name)}"), self._zip.open(info) as member:
            data = member.read(info.file_size)
        if len(data) != info.file_size:
            raise FormatError(f"{self.path}: {brief(name)} holds {len(data)} of its {info.file_size} bytes (truncated?)")
        return data

    def _check_byteorder(self) -> None:
        name = f"{self._prefix}byteorder"
        if name in self._zip.NameToInfo and self._read_member(name, 16) != b"little":
            raise FormatError(f"{self.path}: a big-endian checkpoint (only little-endian ones are read)")

    def _view(self, name: str, t: _Tensor) -> _View:
        where = f"{self.path}, tensor {brief(name)}"
        if not isinstance(t.storage, _StorageRef):
            raise FormatError(f"{where}: its storage is {brief(t.storage)}, not a storage reference")
        dtype = self._dtype(where, t)
        shape, stride, offset = t.size, t.stride, t.offset
        if not (_is_dims(shape) and _is_dims(stride) and len(shape) == len(stride) and type(offset) is int
                and 0 <= offset < MAX_DIM):
            raise FormatError(f"{where}: invalid size {brief(shape)} / stride {brief(stride)} / offset {brief(offset)}")
        view = _View(t.storage.key, dtype, tuple(shape), tuple(stride), offset)
        info = self._member(f"{self._prefix}data/{t.storage.key}", name)
        if t.storage.nbytes != info.file_size:
            raise FormatError(f"{where}: storage {brief(t.storage.key)} holds {info.file_size} bytes but the pickle "
                              f"declares {t.storage.nbytes}")
        elements = info.file_size // dtype.itemsize
        if view.end > elements * dtype.itemsize or math.prod(view.shape) > elements:
            raise FormatError(f"{where}: size {list(view.shape)} / stride {list(view.stride)} at offset {offset} needs "
                              f"more than its storage's {elements} elements")
        return view

    @staticmethod
    def _dtype(where: str, t: _Tensor) -> np.dtype:
        kind = t.storage.kind
        if t.dtype is not None and not isinstance(t.dtype, _DType):
            raise FormatError(f"{where}: its dtype is {brief(t.dtype)}, not a torch dtype")
        if kind.dtype is None:
            raise FormatError(f"{where}: torch.{kind.name} is not supported (readable dtypes: {SUPPORTED_NAMES})")
        if t.dtype is None:
            return kind.dtype
        if t.dtype.dtype is None:
            raise FormatError(f"{where}: dtype torch.{t.dtype.name} is not supported (readable: {SUPPORTED_NAMES})")
        return t.dtype.dtype

    def _info(self, name: str, view: _View) -> TensorInfo:
        info = self._zip.getinfo(f"{self._prefix}data/{view.storage}")
        start = self._stored_start(info, name) if info.compress_type == zipfile.ZIP_STORED else 0
        return TensorInfo(name, self.path, view.dtype, view.shape, start + view.begin, start + view.end)

    def _stored_start(self, info: zipfile.ZipInfo, tensor: str) -> int:
        """Where a stored member's bytes begin in the file (after its local header)."""
        where = f"{self.path}, tensor {brief(tensor)}"
        header = self._mmap[info.header_offset: info.header_offset + _LOCAL_HEADER.size]
        if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04" or info.compress_size != info.file_size:
            raise FormatError(f"{where}: bad zip local header for {brief(info.filename)}")
        fields = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        if start + info.file_size > len(self._mmap):
            raise FormatError(f"{where}: storage {brief(info.filename)} runs past the end of the file (truncated?)")
        return start

    def _buffer(self, name: str) -> tuple[object, int]:
        """The buffer `name`'s first element lies in (the mapped file, or its storage's inflated span) and its offset there."""
        view, info = self._views[name], self.tensors[name]
        if self._zip.getinfo(f"{self._prefix}data/{view.storage}").compress_type == zipfile.ZIP_STORED:
            return self._mmap, info.start
        if view.storage not in self._inflated:
            spans = [(v.begin, v.end) for v in self._views.values() if v.storage == view.storage]
            member = self._zip.getinfo(f"{self._prefix}data/{view.storage}")
            self._inflated[view.storage] = self._inflate(member, min(b for b, _ in spans), max(e for _, e in spans), name)
        lo, data = self._inflated[view.storage]
        return data, view.begin - lo

    def _inflate(self, member: zipfile.ZipInfo, lo: int, hi: int, tensor: str) -> tuple[int, bytes]:
        """Bytes [lo, hi) of a deflated member, inflating no more than `hi` bytes and keeping only the span."""
        with self._archive_errors(f"tensor {brief(tensor)}: cannot inflate {brief(member.filename)}"), \
                self._zip.open(member) as stream:
            skip = lo
            while skip and (chunk := stream.read(min(skip, _INFLATE_CHUNK))):
                skip -= len(chunk)
            data = stream.read(hi - lo)
        if skip or len(data) != hi - lo:
            raise FormatError(f"{self.path}, tensor {brief(tensor)}: {brief(member.filename)} inflates to fewer bytes "
                              "than its zip header declares")
        return lo, data

    def array(self, name: str) -> np.ndarray:
        view = self._views[name]
        if math.prod(view.shape) == 0:
            return np.empty(view.shape, view.dtype)
        buffer, offset = self._buffer(name)
        strides = tuple(s * view.dtype.itemsize for s in view.stride)
        # np.ndarray over the buffer keeps ml_dtypes' dtypes (as_strided would lose them) and is read-only
        return np.ndarray(view.shape, view.dtype, buffer, offset, strides)

    def release(self, name: str) -> None:
        info = self.tensors[name]
        start = info.start - info.start % mmap.PAGESIZE
        stored = self._zip.getinfo(f"{self._prefix}data/{self._views[name].storage}").compress_type == zipfile.ZIP_STORED
        if hasattr(mmap, "MADV_DONTNEED") and info.end > start and stored:
            self._mmap.madvise(mmap.MADV_DONTNEED, start, info.end - start)


def _is_dims(values) -> bool:
    return (isinstance(values, (tuple, list)) and len(values) <= MAX_NESTING
            and all(type(v) is int and 0 <= v < MAX_DIM for v in values))
