"""Writing a converted tree as safetensors shards + manifest.json, atomically, and mapping it back.

A finished output is a folder whose manifest.json lists every shard. It is built in a hidden
sibling temp folder and renamed into place only when complete, so an interrupted run never
leaves a folder that looks finished; the next run clears stale temp folders and starts over.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import shutil
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from vidax.translator.errors import OutputError
from vidax.translator.executor import host_empty
from vidax.translator.safetensors_io import SafetensorsFile, header_bytes, write_chunks

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
DEFAULT_SHARD_BYTES = 4 << 30
_DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("vidax")
    except Exception:  # an uninstalled checkout still converts
        return "unknown"


def _leaf_info(tree: Mapping) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    if hasattr(tree, "leaves"):
        return {p: (leaf.shape, leaf.dtype) for p, leaf in tree.leaves.items()}
    return {p: (tuple(np.shape(a)), np.asarray(a).dtype) for p, a in tree.items()}


def _shards(info: dict, shard_bytes: int) -> list[list[str]]:
    shards, current, size = [], [], 0
    for path, (shape, dtype) in info.items():
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(path)
        size += nbytes
    return shards + [current] if current or not shards else shards


def _inputs_digest(manifest: dict, info: dict) -> str:
    leaves = {p: [list(s), str(d)] for p, (s, d) in info.items()}
    blob = json.dumps({"manifest": manifest, "leaves": leaves, "format": FORMAT_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_complete(out_dir: Path, digest: str | None = None) -> bool:
    """Whether `out_dir` holds a finished output (for `digest`'s inputs, when given)."""
    try:
        manifest = json.loads((out_dir / MANIFEST).read_text())
        shards_ok = all((out_dir / s["file"]).stat().st_size == s["bytes"] for s in manifest["shards"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return shards_ok and (digest is None or manifest.get("inputs_digest") == digest)


class _BackgroundWriter:
    """Writes buffers to a file on a second thread so that converting the next chunk overlaps the
    write (the write is usually disk-bound). At most `depth` chunks wait; a write error is raised
    in the caller on its next call or on close. Buffers made by `alloc` are recycled once written,
    which spares a page fault per 4 KiB of every fresh buffer."""

    def __init__(self, fh, depth: int = 3):
        self.fh, self.error = fh, None
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.free: dict[tuple, list[np.ndarray]] = {}
        self.owned: set[int] = set()
        self.thread = threading.Thread(target=self._run, name="vidax-writer", daemon=True)
        self.thread.start()

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        pool = self.free.get((tuple(shape), np.dtype(dtype)))
        if pool:
            return pool.pop()
        array = host_empty(shape, dtype)
        self.owned.add(id(array))
        return array

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is None:
                try:
                    write_chunks(self.fh, iter([item]))
                except BaseException as err:  # handed to the caller thread
                    self.error = err
            if id(item) in self.owned:
                self.free.setdefault((item.shape, item.dtype), []).append(item)

    def write(self, data) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put(data)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _write_shard(path: Path, tree: Mapping, names: list[str], info: dict, progress: Callable[[int], None] | None) -> int:
    streaming = hasattr(tree, "chunks")
    with open(path, "wb") as fh:
        fh.write(header_bytes(((n, info[n][1], info[n][0]) for n in names), {"format": "pt"}))
        writer = _BackgroundWriter(fh)
        try:
            for name in names:
                for chunk in tree.chunks(name, writer.alloc) if streaming else iter([np.asarray(tree[name])]):
                    writer.write(chunk)
                    if progress:
                        progress(chunk.nbytes)
        finally:
            writer.close()
        fh.flush()
        os.fsync(fh.fileno())
        return fh.tell()


def _clear_stale(out_dir: Path) -> None:
    for stale in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        pid = stale.name.rsplit("-", 2)[-2]
        if pid.isdigit() and _alive(int(pid)) and int(pid) != os.getpid():
            continue  # another live run is writing it
        shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def save_tree(tree: Mapping, out_dir: str | os.PathLike, manifest: dict | None = None, *,
              shard_bytes: int = DEFAULT_SHARD_BYTES, progress: Callable[[int], None] | None = None) -> bool:
    """Write `tree` to `out_dir` as safetensors shards plus manifest.json, atomically.

    Args:
      tree: flat mapping path -> array, or a `LazyTree` (streamed one chunk at a time).
      out_dir: destination folder; replaced only once the new output is complete.
      manifest: provenance to record (model, spec digest, source repo/revision/files); with the
        leaves' shapes and dtypes it decides whether an existing output is already up to date.
      shard_bytes: approximate maximum bytes per shard file.
      progress: called with the number of bytes written after each chunk.

    Returns:
      True if the output was written, False if an identical complete output already existed.

    Raises:
      OutputError: the disk is full or the folder cannot be written.
    """
    out_dir = Path(out_dir).absolute()
    manifest = dict(manifest or {})
    info = _leaf_info(tree)
    digest = _inputs_digest(manifest, info)
    if is_complete(out_dir, digest):
        return False
    if out_dir.exists() and not _replaceable(out_dir):
        raise OutputError(f"{out_dir}: exists and is not a vidax conversion; remove it or choose another output folder")
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file-size limit becomes EFBIG, not a kill
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        _clear_stale(out_dir)
        tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            _write_all(tree, tmp, manifest, info, digest, shard_bytes, progress)
            _swap_in(tmp, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as err:
        if err.errno in _DISK_FULL:
            raise OutputError(f"{out_dir}: disk full or file size limit reached while writing ({err.strerror})") from None
        raise OutputError(f"{out_dir}: cannot write output ({err.strerror or err})") from None
    return True


def _replaceable(out_dir: Path) -> bool:
    """Only an earlier vidax output (it has our manifest) or an empty folder may be replaced."""
    if not out_dir.is_dir():
        return False
    try:
        return json.loads((out_dir / MANIFEST).read_text()).get("format") == FORMAT_VERSION
    except (OSError, ValueError, AttributeError):
        return not any(out_dir.iterdir())


def _write_all(tree, tmp: Path, manifest: dict, info: dict, digest: str, shard_bytes: int, progress) -> None:
    groups = _shards(info, shard_bytes)
    shard_entries = []
    for i, names in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        size = _write_shard(tmp / file, tree, names, info, progress)
        shard_entries.append({"file": file, "bytes": size, "leaves": names})
    record = {**manifest, "vidax_version": _version(), "format": FORMAT_VERSION, "inputs_digest": digest,
              "leaves": {p: {"shape": list(s), "dtype": str(d)} for p, (s, d) in info.items()},
              "shards": shard_entries}
    with open(tmp / MANIFEST, "w") as fh:  # written last: its presence marks completeness
        json.dump(record, fh, indent=1, default=str)
        fh.flush()
        os.fsync(fh.fileno())


def _swap_in(tmp: Path, out_dir: Path) -> None:
    old = None
    if out_dir.exists():
        old = out_dir.parent / f".{out_dir.name}.tmp-old-{uuid.uuid4().hex[:8]}"
        os.rename(out_dir, old)
    os.rename(tmp, out_dir)
    dir_fd = os.open(out_dir.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load(out_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """Map a `save_tree` output back as a flat tree of read-only zero-copy views.

    Args:
      out_dir: a folder written by `save_tree` / `vidax-convert`.

    Raises:
      OutputError: the folder is missing, incomplete, or disagrees with its manifest.
    """
    out_dir = Path(out_dir)
    if not is_complete(out_dir):
        raise OutputError(f"{out_dir}: not a complete vidax conversion (no valid {MANIFEST} or a shard is missing)")
    manifest = json.loads((out_dir / MANIFEST).read_text())
    tree = {}
    for shard in manifest["shards"]:
        reader = SafetensorsFile(out_dir / shard["file"])
        for name in shard["leaves"]:
            if name not in reader.tensors:
                raise OutputError(f"{out_dir / shard['file']}: leaf {name!r} listed in the manifest is missing")
            tree[name] = reader.array(name)
    return tree


def read_manifest(out_dir: str | os.PathLike) -> dict:
    return json.loads((Path(out_dir) / MANIFEST).read_text())
