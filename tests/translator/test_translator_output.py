"""save_tree / load: atomic output, no-op reruns, SIGKILL at several points, full disk."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import wan_transformer_spec_fixtures as wan
from vidax.translator import OutputError, convert, load, save_tree
from vidax.translator.output import is_complete, read_manifest
from vidax.translator.testing import mismatches


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan-out")
    state = wan.reference_state_dict("i2v")
    return wan.save_diffusers(state, root / "model"), wan.expected_tree(state)


def test_roundtrip_is_mmap_and_rerun_does_nothing(tmp_path, model):
    source, expected = model
    out = tmp_path / "out"
    tree = convert("wan/transformer", source, dtype="float32", lazy=True)
    assert save_tree(tree, out, {"model": "tiny"}, shard_bytes=20_000) is True
    manifest = read_manifest(out)
    assert len(manifest["shards"]) > 1 and manifest["model"] == "tiny"
    loaded = load(out)
    assert mismatches(loaded, expected) == []
    assert all(not a.flags.owndata and not a.flags.writeable for a in loaded.values() if a.size)
    stamp = (out / "manifest.json").stat().st_mtime_ns
    assert save_tree(convert("wan/transformer", source, dtype="float32", lazy=True), out, {"model": "tiny"}, shard_bytes=20_000) is False
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    # different inputs (dtype) rewrite it
    assert save_tree(convert("wan/transformer", source, lazy=True), out, {"model": "tiny"}) is True
    assert load(out)["blocks/attn1/to_q/kernel"].dtype.name == "bfloat16"


def test_plain_dict_tree_and_incomplete_output(tmp_path):
    tree = {"a/kernel": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, np.int64)}
    save_tree(tree, tmp_path / "o")
    assert mismatches(load(tmp_path / "o"), tree) == []
    (tmp_path / "o" / "manifest.json").unlink()
    with pytest.raises(OutputError, match="not a complete vidax conversion"):
        load(tmp_path / "o")


_KILLER = textwrap.dedent("""
    import os, signal, sys
    from vidax.translator import convert, save_tree
    import vidax.translator.output as output
    source, out, mode, when = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    calls = [0]
    def die():
        calls[0] += 1
        if calls[0] == when:
            os.kill(os.getpid(), signal.SIGKILL)
    if mode == "chunk":
        progress = lambda n: die()
    else:
        progress = None
        real_rename = os.rename
        def rename(a, b):
            die()
            real_rename(a, b)
        output.os.rename = rename
    tree = convert("wan/transformer", source, dtype="float32", lazy=True)
    save_tree(tree, out, {"run": "kill-test"}, shard_bytes=20_000, progress=progress)
""")


@pytest.mark.parametrize("mode,when,preexisting", [("chunk", 1, False), ("chunk", 40, False), ("rename", 1, False),
                                                   ("rename", 1, True), ("rename", 2, True)])
def test_sigkill_never_leaves_complete_looking_output(tmp_path, model, mode, when, preexisting):
    source, expected = model
    out = tmp_path / "out"
    if preexisting:  # an older, different conversion is already there
        save_tree({"old": np.zeros(3, np.float32)}, out, {"run": "old"})
    proc = subprocess.run([sys.executable, "-c", _KILLER, str(source), str(out), mode, str(when)], capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()
    new_complete = is_complete(out) and read_manifest(out).get("run") == "kill-test"
    assert not new_complete
    if is_complete(out):  # only the untouched old output may remain
        assert read_manifest(out)["run"] == "old"
    save_tree(convert("wan/transformer", source, dtype="float32", lazy=True), out, {"run": "kill-test"}, shard_bytes=20_000)
    assert mismatches(load(out), expected) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # stale temp folders cleared


@pytest.mark.parametrize("writer", ["direct", "buffered"])
def test_file_size_limit_is_a_clean_error(tmp_path, model, writer):
    source, _ = model
    out = tmp_path / "out"
    limit = 16 * 1024

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    force = "import os; os.O_DIRECT = 0\n" if writer == "buffered" else ""  # as on a filesystem without O_DIRECT
    script = "from vidax.translator import convert, save_tree, OutputError\n" \
             "import sys\n" + force + \
             "try:\n" \
             f"    save_tree(convert('wan/transformer', {str(source)!r}, dtype='float32', lazy=True), {str(out)!r})\n" \
             "except OutputError as err:\n" \
             "    print(err); sys.exit(3)\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, preexec_fn=cap)
    assert proc.returncode == 3, proc.stderr
    assert "disk full or file size limit" in proc.stdout
    assert not out.exists() and [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_tmpfs_destination_writes_through_the_ring(model, monkeypatch):
    """/dev/shm: the same ring (O_DIRECT where the kernel's tmpfs takes it, else buffered), same tree."""
    import shutil
    import tempfile

    import vidax.translator.output as output

    source, expected = model
    writers = []
    original = output._open_writer
    monkeypatch.setattr(output, "_open_writer", lambda *a: writers.append(original(*a)) or writers[-1])
    folder = tempfile.mkdtemp(dir="/dev/shm")
    try:
        save_tree(convert("wan/transformer", source, dtype="float32", lazy=True), f"{folder}/out", shard_bytes=20_000)
        assert writers and all(isinstance(w, output._ShardWriter) for w in writers)
        assert mismatches(load(f"{folder}/out"), expected) == []
    finally:
        shutil.rmtree(folder)


def test_manifest_records_leaves(tmp_path):
    save_tree({"x/y": np.zeros((2, 3), np.float16)}, tmp_path / "o", {"model": "m"})
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["leaves"] == {"x/y": {"shape": [2, 3], "dtype": "float16"}}
    assert manifest["format"] == 1 and "vidax_version" in manifest and os.path.exists(tmp_path / "o" / manifest["shards"][0]["file"])


def test_never_replaces_a_folder_it_did_not_write(tmp_path):
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="exists and is not a vidax conversion"):
        save_tree({"a": np.ones(2, np.float32)}, precious)
    assert (precious / "notes.txt").read_text() == "keep me"
    (tmp_path / "empty").mkdir()
    assert save_tree({"a": np.ones(2, np.float32)}, tmp_path / "empty") is True
