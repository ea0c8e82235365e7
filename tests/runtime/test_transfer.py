"""`compute.transfer.to_devices` (host trees onto devices in bounded groups) and `drop_pages` (a mapped
leaf's pages out of the process's resident set once it is on a device)."""

from __future__ import annotations

import jax
import numpy as np
import psutil
from safetensors.numpy import save_file

from vidax.translator.formats.safetensors_io import SafetensorsFile, drop_pages
from vidax.zoo.compute import transfer
from vidax.zoo.compute.runtime import platform_override

MIB = 1 << 20


def _mapped_tree(tmp_path, sizes_mib=(24, 8, 8)):
    arrays = {f"t{i}": np.random.default_rng(i).standard_normal(n * MIB // 4).astype(np.float32)
              for i, n in enumerate(sizes_mib)}
    save_file(arrays, str(tmp_path / "w.safetensors"))
    file = SafetensorsFile(tmp_path / "w.safetensors")
    return file, {name: file.array(name) for name in arrays}, arrays


def _mapped_resident(path) -> int:
    """Resident bytes of this process's mapping of `path`."""
    return sum(m.rss for m in psutil.Process().memory_maps(grouped=True) if m.path == str(path))


def test_drop_pages_leaves_the_values_and_frees_the_resident_pages(tmp_path):
    file, mapped, arrays = _mapped_tree(tmp_path)
    for name in mapped:
        assert float(mapped[name].sum()) == float(arrays[name].sum())  # every page read in
    before = _mapped_resident(file.path)
    assert before >= 39 * MIB
    assert drop_pages(mapped["t0"])
    assert _mapped_resident(file.path) <= before - 23 * MIB
    np.testing.assert_array_equal(mapped["t0"], arrays["t0"])  # faulted back from the page cache
    assert not drop_pages(np.ones(4, np.float32))  # no mapping under it


def test_to_devices_moves_groups_and_drops_each_groups_pages(tmp_path, monkeypatch):
    file, mapped, arrays = _mapped_tree(tmp_path)
    for name in mapped:
        mapped[name].sum()
    moves = []
    move = transfer._move
    monkeypatch.setattr(transfer, "_move", lambda leaves, targets, placed, group: (moves.append(list(group)),
                                                                                 move(leaves, targets, placed, group)))
    monkeypatch.setattr(transfer, "GROUP_BYTES", 16 * MIB)
    with platform_override("tpu", "TPU v5 lite", 1, 16 << 30):  # the accelerator path, on this host's CPU device
        placed = transfer.to_devices({"a": mapped["t0"], "b": {"c": mapped["t1"], "d": mapped["t2"]}})
    assert moves == [[0], [1, 2]]  # 24 MiB alone, then 8 + 8 MiB (flattening order: a, b/c, b/d)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(placed))
    assert _mapped_resident(file.path) < 4 * MIB
    np.testing.assert_array_equal(np.asarray(placed["b"]["d"]), arrays["t2"])


def test_to_devices_on_a_cpu_is_one_device_put(tmp_path, monkeypatch):
    _, mapped, arrays = _mapped_tree(tmp_path, (1, 1))
    monkeypatch.setattr(transfer, "_move", lambda *args: (_ for _ in ()).throw(AssertionError("grouped on a CPU")))
    placed = transfer.to_devices(mapped)
    np.testing.assert_array_equal(np.asarray(placed["t1"]), arrays["t1"])


def test_resident_peak_sees_a_peak_gone_by_the_blocks_end_and_says_its_kind():
    """A host peak inside a stage (a transfer's staging buffers) is gone when the stage ends: the sampler
    still reports it, as anonymous memory, with the moment it was seen."""
    import time

    from vidax.zoo.compute.progress import ResidentPeak, resident_parts

    before = resident_parts()
    assert set(before) == {"anon", "file", "shmem"} and before["anon"] > 0
    with ResidentPeak(interval=0.02) as peak:
        staging = np.ones(256 * MIB, np.uint8)  # touched: resident
        time.sleep(0.2)
        seen = time.time()
        del staging
        time.sleep(0.1)
    figures = peak.figures()
    assert figures["anon"] >= before["anon"] + 200 * MIB, (before, figures)
    assert figures["bytes"] == figures["anon"] + figures["file"] + figures["shmem"]
    assert figures["at"] <= seen
    assert resident_parts()["anon"] < figures["anon"] - 200 * MIB  # the peak is gone
