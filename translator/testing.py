"""Test hooks for spec authors: a registry of tiny test checkpoints, one factory per spec.

A family's test folder ships a module whose name ends in ``spec_fixtures.py`` (for example
``tests/wan_vae/wan_vae_spec_fixtures.py``) that registers a factory for each spec it owns::

    from vidax.translator.testing import SpecCase, register_spec_fixture

    @register_spec_fixture("wan/vae")
    def wan_vae_cases(tmp_path):
        ...  # build a tiny reference model, save its real state dict per layout
        return [SpecCase("official", tmp_path / "official", expected_tree)]

`expected_tree` is the converted tree computed independently of the spec (numpy transposes of
the reference state dict). The translator's mutation test (tests/translator) discovers these
modules, converts every case through the real spec, and checks that deleting any one rule or
turning any transpose into identity makes at least one case fail. Factories must not need the
network; they may import torch (tests only).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIXTURES: dict[str, Callable[[Path], list["SpecCase"]]] = {}


@dataclass
class SpecCase:
    """One test checkpoint of a spec and the tree it must convert to.

    Args:
      name: short label, e.g. ``"official-i2v"``.
      source: file or folder passed to `convert`.
      expected: path -> array, computed without the spec.
      dtype: dtype override used for the comparison (float32 keeps values exact).
    """

    name: str
    source: Path
    expected: dict[str, np.ndarray]
    dtype: str = "float32"


def register_spec_fixture(spec_name: str):
    """Decorator registering `build(tmp_path) -> list[SpecCase]` as the test checkpoints of a spec."""

    def decorate(build):
        FIXTURES[spec_name] = build
        return build

    return decorate


def discover(tests_root: Path) -> dict[str, Callable[[Path], list[SpecCase]]]:
    """Import every ``*spec_fixtures.py`` under `tests_root` so their factories register."""
    for path in sorted(Path(tests_root).rglob("*spec_fixtures.py")):
        name = "vidax_spec_fixtures__" + "_".join(path.relative_to(tests_root).with_suffix("").parts)
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    return FIXTURES


def mismatches(tree: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> list[str]:
    """Differences between a converted tree and the expected one (keys, shapes, dtypes, values)."""
    problems = [f"missing {p}" for p in expected if p not in tree]
    problems += [f"unexpected {p}" for p in tree if p not in expected]
    for path in expected.keys() & tree.keys():
        got, want = np.asarray(tree[path]), np.asarray(expected[path])
        if got.shape != want.shape or got.dtype != want.dtype:
            problems.append(f"{path}: {got.shape} {got.dtype} != {want.shape} {want.dtype}")
        elif not np.array_equal(got, want):
            problems.append(f"{path}: values differ")
    return problems


def make_hub_cache(cache: Path, repo: str, files: dict[str, Path], commit: str = "0" * 40) -> Path:
    """A Hub repo as huggingface_hub caches it, for tests of the Hub path offline (HF_HUB_CACHE=cache,
    HF_HUB_OFFLINE=1): blobs/<sha256>, snapshots/<commit>/<path> -> blob, refs/main -> commit.

    Args:
      cache: the cache root. repo: "org/name". files: path inside the repo -> local file to store there.
    Returns the snapshot folder.
    """
    storage = Path(cache) / f"models--{repo.replace('/', '--')}"
    for rel, src in files.items():
        data = Path(src).read_bytes()
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = storage / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(blob, link.parent))
    (storage / "refs").mkdir(exist_ok=True)
    (storage / "refs" / "main").write_text(commit)
    return storage / "snapshots" / commit
