"""Converting a registered model: resolve its repos and layout, convert every component through its
spec, copy the configs and tokenizers its generator reads, and write the output folder with its
`vidax_model.json`. `vidax-convert` is a thin wrapper over `convert_model`; another JAX port calls it
directly (and `vidax.translator.convert` for one component with its own spec).

    from vidax.translator import convert_model
    result = convert_model("hunyuanvideo-1.5", variant="720p_i2v", out="ckpt/hv15")
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import posixpath
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vidax.translator.api import LazyTree, convert
from vidax.translator.errors import GatedRepoError, SourceError
from vidax.translator.output import save_tree
from vidax.translator.registry import ModelEntry, get_model
from vidax.translator.spec import load_spec


@dataclass(frozen=True)
class ConvertOptions:
    """One conversion request (the `vidax-convert` flags)."""

    model: str
    source: str | None = None
    revision: str | None = None
    out: Path | None = None
    components: tuple[str, ...] = ()
    dtype: str | None = None
    layout: str | None = None
    check: bool = False
    variant: str | None = None


MODEL_FILE = "vidax_model.json"  # the converted folder's model, variant and tags (read by vidax-gen)


def _file_digest(path: Path) -> str:
    """A cheap identity for a source file: the Hub blob hash when cached by huggingface_hub, else size+mtime."""
    real = path.resolve()
    if real.parent.name == "blobs":
        return f"hub-blob:{real.name}"
    stat = real.stat()
    return f"size-mtime:{stat.st_size}-{stat.st_mtime_ns}"


def _local(source: str | None) -> bool:
    return source is not None and Path(source).expanduser().exists()


def _read_layout(component, layout: str, opts: ConvertOptions) -> str:
    """The layout `component` is read in when the model's is `layout`: from the Hub, its `hub_layout`."""
    return component.hub(layout) if opts.source is None else layout


def _attempts(entry: ModelEntry, component, opts: ConvertOptions, detected: str | None = None
              ) -> list[tuple[str | None, str, str | None]]:
    """(layout, source, subfolder) tries for one component: the registry repo (the component's own,
    else the model's), or the user's source (a local model folder holds each component's repo at
    its `mount`). `detected`: the registry layout an earlier component of this run was found in."""
    if opts.source is None:
        layout = opts.layout or entry.default_layout
        if layout not in entry.repos:
            raise SourceError(f"model {entry.name} has no {layout!r} repo (has: {', '.join(entry.repos)})")
        layout = _read_layout(component, layout, opts)
        return [(layout, component.repo.get(layout) or entry.repos[layout], component.folder(layout, local=False))]
    named = [l for l, repo in entry.repos.items() if repo == opts.source]  # a registry repo given explicitly
    layouts = [opts.layout] if opts.layout else named or ([detected] if detected else list(entry.repos))
    pinned = bool(opts.layout or named)  # otherwise the layout is detected from the files' keys
    local = _local(opts.source)
    tries = [(l if pinned else None, opts.source, component.folder(l, local)) for l in layouts]
    if detected and not pinned:  # the layout stands; the spec still detects its own
        tries = [(detected, s, f) for _, s, f in tries]
    return list(dict.fromkeys(tries))


def _open(entry: ModelEntry, name: str, opts: ConvertOptions, detected: str | None = None) -> LazyTree:
    component = entry.components[name]
    spec = load_spec(component.spec)
    first_error = None
    for layout, source, subfolder in _attempts(entry, component, opts, detected):
        if source.startswith("modelscope:"):
            raise SourceError(_modelscope_hint(entry, component, source))
        try:
            return convert(spec, source, layout=layout if layout in spec.layouts else None,
                           dtype=opts.dtype or component.dtype, files=component.files(layout),
                           revision=opts.revision or entry.revision_of(layout), subfolder=subfolder, lazy=True,
                           headers_only=opts.check)  # --check on the Hub: headers, no weights downloaded
        except SourceError as err:
            if opts.source is None and isinstance(err, GatedRepoError):  # another layout's repo may carry it
                others = [f"--layout {l} ({r})" for l, r in entry.repos.items() if l != layout and r != source]
                if others:
                    err = GatedRepoError(f"{err}; or take every component from {' or '.join(others)}")
            first_error = first_error or err
    elsewhere = next((r for r in component.repo.values() if r.startswith("modelscope:")), None)
    if elsewhere and _local(opts.source):  # a local folder without the ModelScope download
        raise SourceError(f"{first_error}; {_modelscope_hint(entry, component, elsewhere)}") from None
    raise first_error


def _modelscope_hint(entry: ModelEntry, component, source: str) -> str:
    mount = next(iter(component.mount.values()), "")
    hub = "" if not component.hub_layout else " (or convert without --source: the Hub mirror has it)"
    return (f"{component.name} of {entry.name} comes from ModelScope ({source.split(':', 1)[1]}), not the Hugging Face "
            f"Hub: download the model folder as its docs say (e.g. `modelscope download --model "
            f"{source.split(':', 1)[1]} --local_dir ckpts/{mount}` and the Hub repos into ckpts/), then pass "
            f"--source ckpts{hub}")


def _copy_files(entry: ModelEntry, component, opts: ConvertOptions, layout: str, out: Path) -> list[str]:
    """Copy the component's `copy` files (configs, tokenizers) into out/<component>/; returns their names."""
    layout = _read_layout(component, layout, opts)
    globs = component.copy.get(layout, [])
    if not globs:
        return []
    if opts.source is not None and _local(opts.source):
        base = Path(opts.source).expanduser()
        folder = component.folder(layout, local=True)
    else:
        repo = opts.source or component.repo.get(layout) or entry.repos[layout]
        if repo.startswith("modelscope:"):
            raise SourceError(_modelscope_hint(entry, component, repo))
        folder = component.folder(layout, local=False)
        patterns = [posixpath.normpath(posixpath.join(folder or "", g)) for g in globs]
        from huggingface_hub import snapshot_download

        try:
            base = Path(snapshot_download(repo, revision=opts.revision or entry.revision_of(layout),
                                          allow_patterns=patterns))
        except Exception as err:  # offline, gated, missing: one line
            raise SourceError(f"{repo}: could not fetch {component.name} files ({str(err).splitlines()[0]})") from None
    root = base / folder if folder else base
    found = []
    for glob in globs:
        parent = (root / glob).parent
        matches = sorted(p for p in parent.glob(Path(glob).name) if p.is_file()) if parent.is_dir() else []
        found += [p for p in matches if fnmatch.fnmatch(p.name, Path(glob).name)]
    if not found and not component.optional:
        raise SourceError(f"{component.name}: none of {', '.join(globs)} found in {root}")
    target = out / component.name
    target.mkdir(parents=True, exist_ok=True)
    for path in found:
        shutil.copyfile(path, target / path.name)
    return [p.name for p in found]


def _manifest(entry: ModelEntry, name: str, tree: LazyTree, opts: ConvertOptions) -> dict:
    source = tree.source
    return {"model": entry.name, "variant": entry.variant, "component": name, "spec": tree.spec.name, "spec_digest": tree.spec.digest,
            "layout": source.layout.name, "dtype": opts.dtype or "spec default",
            "source": {"origin": source.origin, "repo": source.repo, "revision": source.revision,
                       "files": [{"name": p.name, "bytes": p.stat().st_size, "digest": _file_digest(p)} for p in source.files]}}


def _layout_of(entry: ModelEntry, tree: LazyTree, opts: ConvertOptions) -> str:
    """The registry layout a converted component came from (its spec layout's name when the registry
    has it, else the pinned or default one)."""
    name = tree.source.layout.name
    if opts.layout:
        return opts.layout
    return name if name in entry.repos else next((l for l, r in entry.repos.items() if r == opts.source),
                                                 entry.default_layout)


@dataclass
class ConvertedModel:
    """What `convert_model` did: per component, the tree it planned (or wrote) and whether it was written."""

    entry: ModelEntry
    out: Path
    trees: dict = field(default_factory=dict)  # component -> LazyTree
    written: dict = field(default_factory=dict)  # component -> True (written) / False (up to date)
    copied: dict = field(default_factory=dict)  # files-only component -> copied file names
    layout: str | None = None


class ConversionHooks:
    """What `convert_model` reports while it works; the default reports nothing (the CLI shows rich output)."""

    def planned(self, component: str, tree: LazyTree) -> None:
        """A component's conversion is planned and fully accounted (before any weight is read)."""

    def writing(self, component: str, nbytes: int) -> Callable[[int], None]:
        """A component is being written: returns `advance(nbytes)`."""
        return lambda n: None

    def done(self, component: str, message: str) -> None:
        """A component is finished (written, up to date, or its files copied)."""


def convert_model(model: str | ConvertOptions, *, hooks: ConversionHooks | None = None, **options) -> ConvertedModel:
    """Convert (or with `check`, only plan and verify) every selected component of a registered model
    (of the selected variant) and copy the configs and tokenizers its generator reads.

    Args:
      model: a registered model name (`vidax-convert --list`), or a full `ConvertOptions`.
      hooks: progress and report callbacks.
      **options: `ConvertOptions` fields: source, revision, out, components, dtype, layout, check, variant.

    Returns:
      The per-component trees and what was written; the output folder holds one subfolder per
      component and `vidax_model.json` (model, family, variant, tags, layouts).
    """
    opts = model if isinstance(model, ConvertOptions) else ConvertOptions(model, **options)
    hooks = hooks or ConversionHooks()
    entry = get_model(opts.model)
    if entry.embedded:
        raise SourceError(f"{entry.name} is built locally by {entry.embedded}: there is nothing to convert")
    entry = entry.select(opts.variant) if opts.variant else entry
    named = next((l for l, r in entry.repos.items() if r == opts.source), None)
    if named and not _local(opts.source):  # `--source <a registry repo>` is the registry's way, that layout pinned
        opts = dataclasses.replace(opts, source=None, layout=opts.layout or named)
    names = list(opts.components) or list(entry.components)
    unknown = [n for n in names if n not in entry.components]
    if unknown:
        raise SourceError(f"model {entry.name} has no component(s) {', '.join(unknown)} (has: {', '.join(entry.components)})")
    out = Path(opts.out) if opts.out is not None else Path("out") / entry.name
    result = ConvertedModel(entry, out)
    # components with weights first: the first one found fixes the layout for the others
    names = sorted(names, key=lambda n: entry.components[n].spec is None)
    detected = opts.layout
    came_in = {}  # component -> the registry layout it was read in
    for name in names:
        component = entry.components[name]
        if component.spec is None:
            layout = detected or entry.default_layout
            came_in[name] = _read_layout(component, layout, opts)
            if opts.check:
                continue
            result.copied[name] = _copy_files(entry, component, opts, layout, out)
            hooks.done(name, f"copied {', '.join(result.copied[name]) or 'nothing'} to {out / name}")
            continue
        try:
            tree = _open(entry, name, opts, detected)
        except SourceError:
            if not component.optional:
                raise
            hooks.done(name, "not in this checkpoint (optional): skipped")
            continue
        result.trees[name] = tree
        hooks.planned(name, tree)
        layout = detected or _layout_of(entry, tree, opts)
        detected = detected or (layout if opts.source is not None else None)
        came_in[name] = _read_layout(component, layout, opts)
        if opts.check:
            continue
        written = save_tree(tree, out / name, _manifest(entry, name, tree, opts),
                            progress=hooks.writing(name, tree.nbytes))
        result.written[name] = bool(written)
        _copy_files(entry, component, opts, layout, out)
        hooks.done(name, f"{'wrote' if written else 'up to date,'} {out / name}")
    result.layout = detected or opts.layout or entry.default_layout
    if not opts.check:
        out.mkdir(parents=True, exist_ok=True)
        record = {"model": entry.name, "family": entry.family, "variant": entry.variant, "tags": list(entry.variants),
                  "layout": result.layout, "component_layouts": came_in}
        (out / MODEL_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return result
