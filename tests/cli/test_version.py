"""Every output says what made it: vidax's version and, from a git checkout, its commit.

Run from a checkout without installing (PYTHONPATH to a `vidax/` folder of links to the repository's
packages, as a TPU host runs it and as bench/accelerator/run.py's `ensure_vidax` makes it), the sidecar
once said `"vidax_version": "unknown"`: the version now comes from the source tree's pyproject.toml and the
commit from its `.git`, with the package metadata out of reach in the child below."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vidax.translator import version as version_module

ROOT = Path(__file__).resolve().parents[2]
PROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

# the child: no installed metadata for vidax (a bare checkout), vidax imported from the links only
CHILD = """
import importlib.metadata as metadata, json, sys
real = metadata.version
def version(name):
    if name == "vidax":
        raise metadata.PackageNotFoundError(name)
    return real(name)
metadata.version = version
import vidax.zoo.video_io as video_io
assert video_io.__file__.startswith(sys.argv[1]), video_io.__file__
video_io.write_sidecar(sys.argv[2], {"seed": 0})
"""


def link_checkout(shim: Path, root: Path, folders=("translator", "zoo", "cli", "conversion_specs")) -> Path:
    """A folder holding a `vidax/` of links to `root`'s packages (what `ensure_vidax` makes)."""
    (shim / "vidax").mkdir(parents=True)
    for folder in folders:
        (shim / "vidax" / folder).symlink_to(root / folder, target_is_directory=True)
    return shim


def run_child(shim: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(shim), "JAX_PLATFORMS": "cpu", "HOME": str(shim)}
    done = subprocess.run([sys.executable, "-c", code, str(shim), *args], env=env, cwd=shim, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_sidecar_from_a_checkout_not_installed_names_version_and_commit(tmp_path):
    shim = link_checkout(tmp_path / "shim", ROOT)
    run_child(shim, CHILD, str(tmp_path / "clip.npy"))
    sidecar = json.loads((tmp_path / "clip.json").read_text())
    assert sidecar["vidax_version"] == PROJECT_VERSION != "unknown"
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        assert sidecar["vidax_commit"] == head.stdout.strip()
    else:  # a copy of the tree (an exported archive): no commit to name
        assert sidecar["vidax_commit"] is None


def test_a_tree_without_git_gives_its_own_version_and_no_commit(tmp_path):
    """A copied tree (no `.git`): the version is the tree's own pyproject.toml's, read from the source
    (9.9.9 here, not the installed 0.x), and the commit None."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "translator", tree / "translator", ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "pyproject.toml").read_text().replace(f'version = "{PROJECT_VERSION}"', 'version = "9.9.9"', 1)
    (tree / "pyproject.toml").write_text(text)
    shim = link_checkout(tmp_path / "shim", tree, folders=("translator",))
    done = run_child(shim, "import json, sys\nfrom vidax.translator.version import provenance\n"
                           "print(json.dumps(provenance()))")
    assert json.loads(done.stdout) == {"vidax_version": "9.9.9", "vidax_commit": None}


def write_git(folder: Path, head: str, loose: dict | None = None, packed: str | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "HEAD").write_text(head + "\n")
    for ref, sha in (loose or {}).items():
        (folder / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / ref).write_text(sha + "\n")
    if packed is not None:
        (folder / "packed-refs").write_text(packed)
    return folder


A, B = "a" * 40, "b" * 40


@pytest.mark.parametrize("layout, expected", [
    ("loose", A), ("packed", B), ("detached", A), ("worktree", B), ("unborn", None), ("garbage", None),
])
def test_commit_read_from_git_files(tmp_path, layout, expected):
    main = tmp_path / "repo" / ".git"
    if layout == "loose":
        write_git(main, "ref: refs/heads/main", loose={"refs/heads/main": A})
    elif layout == "packed":  # after `git gc`: the branch only in packed-refs
        write_git(main, "ref: refs/heads/main", packed=f"# pack-refs with: peeled\n{A} refs/heads/other\n{B} refs/heads/main\n")
    elif layout == "detached":
        write_git(main, A)
    elif layout == "worktree":  # a `.git` file pointing at a worktree folder whose branches live in the main one
        write_git(main, "ref: refs/heads/main", loose={"refs/heads/feature": B})
        worktree = write_git(main / "worktrees" / "wt", "ref: refs/heads/feature")
        (worktree / "commondir").write_text("../..\n")
        (tmp_path / "wt").mkdir()
        (tmp_path / "wt" / ".git").write_text(f"gitdir: {worktree}\n")
        main = tmp_path / "wt" / ".git"
    elif layout == "unborn":
        write_git(main, "ref: refs/heads/main")
    else:
        write_git(main, "ref: refs/heads/main", loose={"refs/heads/main": "not a sha"})
    assert version_module._head(version_module._git_dir(main)) == expected


def test_installed_package_falls_back_to_its_metadata(monkeypatch):
    """Outside a checkout (a wheel) the version is the installed package's."""
    from importlib.metadata import version as installed

    monkeypatch.setattr(version_module, "source_root", lambda: None)
    assert version_module.version.__wrapped__() == installed("vidax")
    assert version_module.commit.__wrapped__() is None
