"""What made an output: vidax's version and, run from a git checkout, its commit.

A checkout run without installing (PYTHONPATH to a `vidax/` folder of links, as a TPU host runs it) has no
package metadata, and an editable install's metadata is the version at install time: so the version comes
from the source tree's `pyproject.toml` when the package sits in one, and from the installed metadata
otherwise (a wheel). The commit is read from the checkout's `.git` (HEAD, then the branch it names, loose or
packed), without starting git; None outside a checkout.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

UNKNOWN = "unknown"
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # SHA-1, or SHA-256 repositories


def source_root() -> Path | None:
    """The checkout this package was imported from (the folder holding vidax's `pyproject.toml`), or None.

    `translator/` sits at the checkout's top; links (a `vidax/` folder of them) are followed to it."""
    root = Path(__file__).resolve().parents[1]
    project = root / "pyproject.toml"
    try:
        text = project.read_text()
    except OSError:
        return None
    return root if re.search(r'(?m)^name\s*=\s*"vidax"\s*$', text) else None


@functools.cache
def version() -> str:
    """vidax's version: the checkout's `pyproject.toml`, else the installed package's, else "unknown"."""
    root = source_root()
    if root is not None:
        import tomllib

        try:
            return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            pass
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as installed

        return installed("vidax")
    except PackageNotFoundError:
        return UNKNOWN


@functools.cache
def commit() -> str | None:
    """The checked-out commit of the checkout vidax runs from (None: no checkout, or no readable HEAD)."""
    root = source_root()
    if root is None:
        return None
    try:
        return _head(_git_dir(root / ".git"))
    except (OSError, UnicodeDecodeError):
        return None


def provenance() -> dict[str, str | None]:
    """The fields an output's record carries: `vidax_version` and `vidax_commit`."""
    return {"vidax_version": version(), "vidax_commit": commit()}


def _git_dir(dot_git: Path) -> Path:
    """`.git` itself, or the folder a `.git` file points to (a worktree, a submodule)."""
    if dot_git.is_file():
        target = dot_git.read_text().strip().removeprefix("gitdir:").strip()
        return (dot_git.parent / target).resolve()
    return dot_git


def _head(git: Path) -> str | None:
    head = (git / "HEAD").read_text().strip()
    if _SHA.match(head):  # a detached HEAD
        return head
    if not head.startswith("ref:"):
        return None
    ref = head.removeprefix("ref:").strip()
    common = git
    if (git / "commondir").is_file():  # a worktree keeps its branches in the main repository's folder
        common = (git / (git / "commondir").read_text().strip()).resolve()
    for folder in dict.fromkeys((git, common)):
        loose = folder / ref
        if loose.is_file():
            sha = loose.read_text().strip()
            return sha if _SHA.match(sha) else None
    for folder in dict.fromkeys((git, common)):
        packed = folder / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and _SHA.match(sha):
                    return sha
    return None  # a branch with no commit yet
