"""Where a checkpoint comes from: a local file, a local model folder, or a Hub repo id.

A layout's `files` globs are relative to the model root; the first glob that matches anything
wins (a diffusers repo keeps the transformer under `transformer/`, the official Wan repo at the
root). Hub repos are fetched through huggingface_hub with those globs as `allow_patterns`, so its
cache, HF_TOKEN and HF_HUB_OFFLINE apply and only the component's files are downloaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from vidax.translator.checkpoint import Checkpoint
from vidax.translator.errors import SourceError
from vidax.translator.spec import Layout, Spec

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass
class Source:
    """A resolved checkpoint: its files, detected layout and provenance (for the manifest)."""

    layout: Layout
    checkpoint: Checkpoint
    files: list[Path]
    repo: str | None = None
    revision: str | None = None
    origin: str = ""
    extra: dict = field(default_factory=dict)


def layout_files(layout: Layout, root: Path) -> list[Path]:
    """Files of `layout` under `root`: those of the first glob that matches (index.json preferred)."""
    for pattern in layout.files:
        found = sorted(p for p in root.glob(pattern) if p.is_file())
        if not found:
            continue
        index = [p for p in root.glob(pattern + ".index.json")] + [p for p in found if p.name.endswith(".index.json")]
        return sorted(set(index)) if index else found
    return []


def detect_layout(spec: Spec, keys: list[str], where: str) -> Layout:
    """The one layout whose every signature regex matches some key."""
    hits = [l for l in spec.layouts.values() if all(any(s.fullmatch(k) for k in keys) for s in l.signature)]
    if len(hits) != 1:
        what = "no layout" if not hits else f"several layouts ({', '.join(l.name for l in hits)})"
        raise SourceError(f"{where}: {what} of spec {spec.name} match its keys (layouts: {', '.join(spec.layouts)})")
    return hits[0]


def _from_files(spec: Spec, files: list[Path], layout: str | None, where: str) -> tuple[Layout, Checkpoint]:
    ckpt = Checkpoint(files)
    if layout is not None:
        return spec.layouts[layout], ckpt
    return detect_layout(spec, ckpt.keys(), where), ckpt


def open_local(spec: Spec, path: Path, layout: str | None = None) -> Source:
    """Open a local checkpoint file or model folder, detecting the layout unless one is named."""
    if layout is not None and layout not in spec.layouts:
        raise SourceError(f"spec {spec.name} has no layout {layout!r} (has: {', '.join(spec.layouts)})")
    if path.is_file():
        chosen, ckpt = _from_files(spec, [path], layout, str(path))
        return Source(chosen, ckpt, ckpt.paths, origin=str(path))
    if not path.is_dir():
        raise SourceError(f"{path}: no such file or folder")
    candidates = [spec.layouts[layout]] if layout else list(spec.layouts.values())
    tried = []
    for candidate in candidates:
        files = layout_files(candidate, path)
        tried += [f"{candidate.name}: {', '.join(candidate.files)}"]
        if not files:
            continue
        ckpt = Checkpoint(files)
        # a folder may hold another layout's files under this glob (a diffusers `transformer/` folder)
        found = candidate if layout else detect_layout(spec, ckpt.keys(), str(path))
        return Source(found, ckpt, ckpt.paths, origin=str(path))
    raise SourceError(f"{path}: no checkpoint files of spec {spec.name} found (looked for {'; '.join(tried)})")


def looks_like_repo(source: str) -> bool:
    return bool(_REPO_ID.fullmatch(source)) and not Path(source).exists()


def download(repo: str, patterns: list[str], revision: str | None = None, subfolder: str | None = None) -> tuple[Path, str]:
    """Snapshot the files matching `patterns` of a Hub model repo; returns (model root, commit)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    prefix = f"{subfolder.strip('/')}/" if subfolder else ""
    try:
        snapshot = Path(snapshot_download(repo, revision=revision, allow_patterns=[prefix + p for p in patterns]))
    except LocalEntryNotFoundError:
        raise SourceError(f"{repo}: not in the local Hugging Face cache and the Hub is unreachable or offline (HF_HUB_OFFLINE)") from None
    except HfHubHTTPError as err:
        raise SourceError(f"{repo}: Hub download failed ({str(err).splitlines()[0]})") from None
    except ValueError as err:  # bad repo id or revision
        raise SourceError(f"{repo}: {err}") from None
    commit = snapshot.name if snapshot.parent.name == "snapshots" else (revision or "main")
    return (snapshot / prefix if prefix else snapshot), commit


def resolve(spec: Spec, source: str | Path, *, revision: str | None = None, subfolder: str | None = None,
            layout: str | None = None) -> Source:
    """Resolve `source` (file, folder, or Hub repo id) to an opened checkpoint of `spec`."""
    text = str(source)
    if isinstance(source, Path) or not looks_like_repo(text):
        path = Path(text).expanduser()
        if subfolder:
            path = path / subfolder
        return open_local(spec, path, layout)
    layouts = [spec.layouts[layout]] if layout else list(spec.layouts.values())
    patterns = sorted({g for l in layouts for g in l.files} | {g + ".index.json" for l in layouts for g in l.files})
    root, commit = download(text, patterns, revision, subfolder)
    opened = open_local(spec, root, layout)
    opened.repo, opened.revision, opened.origin = text, commit, f"hf://{text}"
    return opened
