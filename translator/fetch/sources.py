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

from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.formats.comfy_prefix import COMFY_PREFIX
from vidax.translator.errors import GatedRepoError, SourceError
from vidax.translator.formats.gguf_io import check_architecture
from vidax.translator.fetch.remote import glob_match, header_checkpoint
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


def _fits(layout: Layout, keys: list[str]) -> bool:
    return all(any(s.fullmatch(k) for k in keys) for s in layout.signature)


def detect_layout(spec: Spec, keys: list[str], where: str) -> Layout:
    """The one layout whose every signature regex matches some key."""
    hits = [l for l in spec.layouts.values() if _fits(l, keys)]
    if len(hits) != 1:
        what = "no layout" if not hits else f"several layouts ({', '.join(l.name for l in hits)})"
        raise SourceError(f"{where}: {what} of spec {spec.name} match its keys (layouts: {', '.join(spec.layouts)})")
    return hits[0]


def read_keys(spec: Spec, ckpt: Checkpoint, layout: str | None, where: str) -> tuple[Layout, Checkpoint]:
    """The layout of `ckpt` (detected from its keys, or the one named) and the checkpoint to read it through:
    its keys as the files spell them or, when no layout fits those (or the named one does not), the same keys
    without ComfyUI's `model.diffusion_model.` prefix (`comfy_prefix`)."""
    keys = ckpt.keys()
    if layout is not None:
        chosen = spec.layouts[layout]
        bare = None if _fits(chosen, keys) else ckpt.without_comfy_prefix()
        return chosen, (bare if bare is not None and _fits(chosen, bare.keys()) else ckpt)
    if any(_fits(l, keys) for l in spec.layouts.values()):
        return detect_layout(spec, keys, where), ckpt
    bare = ckpt.without_comfy_prefix()
    if bare is None:
        return detect_layout(spec, keys, where), ckpt
    try:
        return detect_layout(spec, bare.keys(), where), bare
    except SourceError as err:
        raise SourceError(f"{err} (read with and without {COMFY_PREFIX})") from None


def _from_files(spec: Spec, files: list[Path], layout: str | None, where: str) -> tuple[Layout, Checkpoint]:
    ckpt = Checkpoint(files)
    check_architecture(spec.name, ckpt.paths, ckpt.metadata)  # a GGUF names its model: before its keys are read
    return read_keys(spec, ckpt, layout, where)


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
    tried, mismatched = [], []
    for candidate in candidates:
        files = layout_files(candidate, path)
        tried += [f"{candidate.name}: {', '.join(candidate.files)}"]
        if not files:
            continue
        # a glob may find another layout's files (a diffusers `transformer/` folder) or another
        # component's (a root-level DiT when looking for a VAE): detect, and go on if nothing fits
        try:
            found, ckpt = read_keys(spec, Checkpoint(files), layout, str(path))
        except SourceError as err:
            mismatched.append(str(err))
            continue
        return Source(found, ckpt, ckpt.paths, origin=str(path))
    if mismatched:
        raise SourceError(mismatched[0])
    raise SourceError(f"{path}: no checkpoint files of spec {spec.name} found (looked for {'; '.join(tried)})")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's connection/timeout errors (huggingface_hub's client differs across versions)."""
    errors = []
    for module in ("httpx2", "httpx", "requests"):
        try:
            client = __import__(module)
        except ImportError:
            continue
        errors += [getattr(client, n) for n in ("TransportError", "ConnectionError", "Timeout") if hasattr(client, n)]
    return tuple(e for e in errors if isinstance(e, type) and issubclass(e, BaseException))


def _unreachable() -> tuple[type[BaseException], ...]:
    """The errors of a Hub call that cannot be made: offline mode, no network, refused or private."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    return (OfflineModeIsEnabled, HfHubHTTPError, OSError, *_transport_errors())


def hub_patterns(repo: str, layouts: list[Layout], revision: str | None, subfolder: str | None) -> list[str]:
    """allow_patterns for a Hub snapshot: the first glob whose files the repo has, from its file
    listing; offline (no listing) every glob of `layouts`, which then only reads the cache."""
    every = sorted({g for l in layouts for g in l.files} | {g + ".index.json" for l in layouts for g in l.files})
    import huggingface_hub

    try:
        files = huggingface_hub.list_repo_files(repo, revision=revision)
    except _unreachable():  # offline, no network, or private: snapshot_download decides from the cache
        return every
    prefix = f"{subfolder.strip('/')}/" if subfolder else ""
    relative = [f[len(prefix):] for f in files if f.startswith(prefix)]
    for layout in layouts:
        for glob in layout.files:
            if any(glob_match(f, glob) for f in relative):
                return [glob, glob + ".index.json"]
    raise SourceError(f"{repo}: no files matching {', '.join(g for l in layouts for g in l.files)}"
                      + (f" under {subfolder}/" if subfolder else ""))


def looks_like_repo(source: str) -> bool:
    return bool(_REPO_ID.fullmatch(source)) and not Path(source).exists()


def download(repo: str, patterns: list[str], revision: str | None = None, subfolder: str | None = None) -> tuple[Path, str]:
    """Snapshot the files matching `patterns` of a Hub model repo; returns (model root, commit)."""
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError as HubGated
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    prefix = f"{subfolder.strip('/')}/" if subfolder else ""
    try:
        snapshot = Path(huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=[prefix + p for p in patterns]))
    except LocalEntryNotFoundError:
        raise SourceError(f"{repo}: not in the local Hugging Face cache and the Hub is unreachable or offline (HF_HUB_OFFLINE)") from None
    except HubGated:
        raise GatedRepoError(f"{repo} is gated: accept its terms on huggingface.co/{repo} and set HF_TOKEN (or "
                          "`hf auth login`)") from None
    except HfHubHTTPError as err:
        raise SourceError(f"{repo}: Hub download failed ({str(err).splitlines()[0]})") from None
    except ValueError as err:  # bad repo id or revision
        raise SourceError(f"{repo}: {err}") from None
    commit = snapshot.name if snapshot.parent.name == "snapshots" else (revision or "main")
    return (snapshot / prefix if prefix else snapshot), commit


def _open_headers(spec: Spec, repo: str, layouts: list[Layout], revision: str | None, subfolder: str | None,
                  pinned: bool) -> Source | None:
    """A Hub checkpoint opened from its safetensors headers alone; None when that cannot be done
    (offline, not safetensors, nothing matches), and the caller downloads as usual."""
    import huggingface_hub

    try:
        files = huggingface_hub.list_repo_files(repo, revision=revision)
        for candidate in layouts:
            ckpt = header_checkpoint(repo, files, list(candidate.files), revision, subfolder)
            if ckpt is None:
                continue
            try:
                chosen = candidate if pinned else detect_layout(spec, ckpt.keys(), f"hf://{repo}")
            except SourceError:  # another layout's (or component's) files: as open_local, go on
                continue
            return Source(chosen, ckpt, ckpt.paths, repo=repo, revision=revision or "main",
                          origin=f"hf://{repo} (headers only)")
    except _unreachable():
        return None
    return None


def resolve(spec: Spec, source: str | Path, *, revision: str | None = None, subfolder: str | None = None,
            layout: str | None = None, headers_only: bool = False) -> Source:
    """Resolve `source` (file, folder, or Hub repo id) to an opened checkpoint of `spec`.

    `headers_only`: for a Hub repo, read only the safetensors headers when the Hub answers (a plan
    without tensor data); otherwise, and for local sources, open the files as usual."""
    text = str(source)
    if isinstance(source, Path) or not looks_like_repo(text):
        path = Path(text).expanduser()
        if subfolder:
            path = path / subfolder
        return open_local(spec, path, layout)
    layouts = [spec.layouts[layout]] if layout else list(spec.layouts.values())
    if headers_only:
        opened = _open_headers(spec, text, layouts, revision, subfolder, pinned=layout is not None)
        if opened is not None:
            return opened
    patterns = hub_patterns(text, layouts, revision, subfolder)
    root, commit = download(text, patterns, revision, subfolder)
    opened = open_local(spec, root, layout)
    opened.repo, opened.revision, opened.origin = text, commit, f"hf://{text}"
    return opened
