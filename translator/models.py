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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from vidax.translator.api import LazyTree, convert
from vidax.translator.errors import GatedRepoError, SourceError
from vidax.translator.lora import resolve_for
from vidax.translator.output import copy_file, save_tree, staged_files, write_file
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
    transformer: Path | None = None  # the DiT's weights from this one file (GGUF or safetensors, quantized or not)
    transformer_2: Path | None = None  # the second expert's (Wan2.2 A14B)
    lora: tuple[str, ...] = ()  # SOURCE[=STRENGTH]s baked into `transformer` (translator/lora.py)
    lora_2: tuple[str, ...] = ()  # ... into Wan2.2 A14B's `transformer_2`


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


def _single_file(source: str | None) -> bool:
    """A local checkpoint file (`ltx-2-19b-dev.safetensors`, `mp_rank_00_model_states.pt`): the file is the
    model root, its layout is found from its keys, and no component subfolder applies inside it."""
    return _local(source) and Path(source).expanduser().is_file()


def _root_files(spec, component) -> tuple[str, ...]:
    """The globs that find a checkpoint file lying directly in a folder (`transformers/` holding
    `mp_rank_00_model_states.pt`): the file names of the component's own globs, else of the spec's."""
    own = [g for globs in component.file.values() for g in globs]
    globs = own or [g for layout in spec.layouts.values() for g in layout.files]
    return tuple(dict.fromkeys(posixpath.basename(g) for g in globs))


def _attempts(entry: ModelEntry, component, opts: ConvertOptions, detected: str | None = None
              ) -> list[tuple[str | None, str, str | None]]:
    """(layout, source, subfolder) tries for one component: the registry repo (the component's own,
    else the model's), or the user's source (a local model folder holds each component's repo at
    its `mount`; a single file is found by its keys). `detected`: the registry layout an earlier
    component of this run was found in."""
    if opts.source is None:
        layout = opts.layout or entry.default_layout
        if layout not in entry.repos:
            raise SourceError(f"model {entry.name} has no {layout!r} repo (has: {', '.join(entry.repos)})")
        layout = _read_layout(component, layout, opts)
        return [(layout, component.repo.get(layout) or entry.repos[layout], component.folder(layout, local=False))]
    if _single_file(opts.source):  # its keys say which layout; a subfolder would name a path inside the file
        return [(opts.layout, opts.source, None)]
    named = [l for l, repo in entry.repos.items() if repo == opts.source]  # a registry repo given explicitly
    layouts = [opts.layout] if opts.layout else named or ([detected] if detected else list(entry.repos))
    pinned = bool(opts.layout or named)  # otherwise the layout is detected from the files' keys
    local = _local(opts.source)
    tries = [(l if pinned else None, opts.source, component.folder(l, local)) for l in layouts]
    if detected and not pinned:  # the layout stands; the spec still detects its own
        tries = [(detected, s, f) for _, s, f in tries]
    return list(dict.fromkeys(tries))


def component_file(opts: ConvertOptions, name: str) -> Path | None:
    """The file `--transformer` / `--transformer-2` names for component `name`, or None."""
    value = {"transformer": opts.transformer, "transformer_2": opts.transformer_2}.get(name)
    return None if value is None else Path(value).expanduser()


class Attempt(NamedTuple):
    """One place to look for a component. `files`: globs replacing the spec's (None: the component's own
    for that layout, else the spec's). `single`: a single-file checkpoint (a file, or one lying in the
    source folder), which holds some of the model's components and none of their configs."""

    layout: str | None
    source: str
    subfolder: str | None
    files: tuple[str, ...] | None = None
    single: bool = False


def _all_attempts(entry: ModelEntry, component, opts: ConvertOptions, detected: str | None) -> list[Attempt]:
    """`_attempts`, then (a local folder) the folder itself holding a single checkpoint file, found by its keys."""
    single = _single_file(opts.source)
    tries = [Attempt(*t, single=single) for t in _attempts(entry, component, opts, detected)]
    shallow = _root_files(load_spec(component.spec), component) if _local(opts.source) and not single else ()
    if shallow:
        tries.append(Attempt(opts.layout, opts.source, None, shallow, single=True))
    return tries


def _open(entry: ModelEntry, name: str, opts: ConvertOptions, detected: str | None = None,
          loras: tuple = ()) -> tuple[LazyTree, bool]:
    """A component's planned tree (`loras` merged in), and whether it came from a single-file checkpoint."""
    component = entry.components[name]
    spec = load_spec(component.spec)
    own_file = component_file(opts, name)
    if own_file is not None:  # --transformer FILE: its layout from its keys, its configs from the source
        return convert(spec, own_file, dtype=opts.dtype or component.dtype, lazy=True, loras=loras), False
    first_error = None
    for layout, source, subfolder, files, single in _all_attempts(entry, component, opts, detected):
        if source.startswith("modelscope:"):
            raise SourceError(_modelscope_hint(entry, component, source))
        try:
            tree = convert(spec, source, layout=layout if layout in spec.layouts else None,
                           dtype=opts.dtype or component.dtype, files=component.files(layout) if files is None else files,
                           revision=opts.revision or entry.revision_of(layout), subfolder=subfolder, lazy=True,
                           headers_only=opts.check, loras=loras)  # --check on the Hub: headers, no weights downloaded
            return tree, single
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
    with staged_files() as files:  # every config whole, or none replaced
        for path in found:
            copy_file(path, target / path.name, files)
    return [p.name for p in found]


def _manifest(entry: ModelEntry, name: str, tree: LazyTree, opts: ConvertOptions) -> dict:
    source = tree.source
    loras = {"loras": source.checkpoint.records} if hasattr(source.checkpoint, "records") else {}
    return {**loras, "model": entry.name, "variant": entry.variant, "component": name, "spec": tree.spec.name, "spec_digest": tree.spec.digest,
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
    skipped: list = field(default_factory=list)  # components a single-file source does not hold
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
    _check_component_files(entry, opts)
    out = Path(opts.out) if opts.out is not None else Path("out") / entry.name
    # a preset's LoRAs, then the user's: baked in, and recorded in vidax_model.json
    adapters = resolve_for(entry.name, entry.components, {option: (*entry.loras.get(option, ()), *getattr(opts, option))
                                                          for option in ("lora", "lora_2")})
    result = ConvertedModel(entry, out)
    # components with weights first: the first one found fixes the layout for the others (a component
    # from its own --transformer file last: that file's layout says nothing of the source's)
    names = sorted(names, key=lambda n: (entry.components[n].spec is None, component_file(opts, n) is not None))
    detected = opts.layout
    came_in = {}  # component -> the registry layout it was read in
    single = _single_file(opts.source)  # a single-file checkpoint holds some components and none of their configs
    for name in names:
        component = entry.components[name]
        if component.spec is None:
            layout = detected or entry.default_layout
            if single and (_single_file(opts.source) or opts.check):  # a file holds no configs or tokenizers
                result.skipped.append(name)
                continue
            try:
                copied = [] if opts.check else _copy_files(entry, component, opts, layout, out)
            except SourceError:
                if not single:
                    raise
                result.skipped.append(name)  # a folder holding a single file may hold them too, or not
                continue
            came_in[name] = _read_layout(component, layout, opts)
            if not opts.check:
                result.copied[name] = copied
                hooks.done(name, f"copied {', '.join(copied) or 'nothing'} to {out / name}")
            continue
        opened = _open_or_skip(entry, name, opts, detected, result, hooks, single, adapters)
        if opened is None:
            continue
        tree, from_file = opened
        single = single or from_file
        result.trees[name] = tree
        hooks.planned(name, tree)
        own_file = component_file(opts, name) is not None
        layout = detected or (_source_layout(entry, name, opts) if own_file else _layout_of(entry, tree, opts))
        detected = detected or (layout if opts.source is not None and not own_file else None)
        came_in[name] = tree.source.layout.name if from_file else _read_layout(component, layout, opts)
        if opts.check:
            continue
        manifest = _manifest(entry, name, tree, opts)
        if own_file:  # the weights are the file's; the configs are the source's (vidax-gen reads them there)
            manifest["configs"] = _configs_origin(entry, name, opts, layout)
        written = save_tree(tree, out / name, manifest,
                            progress=hooks.writing(name, tree.nbytes))
        result.written[name] = bool(written)
        if not from_file:
            _copy_files(entry, component, opts, layout, out)
        hooks.done(name, f"{'wrote' if written else 'up to date,'} {out / name}")
    if single:
        _report_single_file(entry, opts, result, hooks)
    result.layout = detected or opts.layout or entry.default_layout
    if not opts.check:
        out.mkdir(parents=True, exist_ok=True)
        record = {"model": entry.name, "family": entry.family, "variant": entry.variant, "tags": list(entry.variants),
                  "layout": result.layout, "component_layouts": {**_recorded_layouts(entry, out), **came_in}}
        if adapters:  # the LoRAs baked in, per component: source, strength, content hash
            record["loras"] = {name: [a.record() for a in found] for name, found in adapters.items()}
        write_file(out / MODEL_FILE, json.dumps(record, indent=1) + "\n")  # whole, or absent
    return result


def _source_layout(entry: ModelEntry, name: str, opts: ConvertOptions) -> str:
    """The registry layout of the source a component from its own file takes its configs from: that of the
    source's own copy of the component when it has one (planned from headers), else the pinned or default."""
    try:
        tree, _ = _open(entry, name, dataclasses.replace(opts, transformer=None, transformer_2=None, check=True))
    except SourceError:  # the source holds no weights of it (downloaded without the DiT): configs only
        return opts.layout or entry.default_layout
    return _layout_of(entry, tree, opts)


def _configs_origin(entry: ModelEntry, name: str, opts: ConvertOptions, layout: str) -> str:
    """Where the configs of a component converted from its own file are: the source, as a manifest origin."""
    if opts.source is not None:
        return str(Path(opts.source).expanduser()) if _local(opts.source) else f"hf://{opts.source}"
    component = entry.components[name]
    return f"hf://{component.repo.get(layout) or entry.repos[layout]}"


def _check_component_files(entry: ModelEntry, opts: ConvertOptions) -> None:
    """`--transformer` / `--transformer-2`: the model has that component and the file exists (one line)."""
    for name in ("transformer", "transformer_2"):
        path = component_file(opts, name)
        flag = "--" + name.replace("_", "-")
        if path is not None and name not in entry.components:
            raise SourceError(f"{flag}: model {entry.name} has no {name} (has: {', '.join(entry.components)})")
        if path is not None and not path.is_file():
            raise SourceError(f"{flag} {path}: no such file")


def _open_or_skip(entry: ModelEntry, name: str, opts: ConvertOptions, detected: str | None, result: ConvertedModel,
                  hooks: ConversionHooks, single: bool, adapters: dict | None = None) -> tuple[LazyTree, bool] | None:
    """`_open`, or None when the component is optional and absent, or not in a single-file source (`single`:
    the source is one, or an earlier component came from one lying in the source folder) that the user did
    not ask it from by name: such a file holds some of a model's components."""
    component = entry.components[name]
    try:
        tree, from_file = _open(entry, name, opts, detected, (adapters or {}).get(name, ()))
    except SourceError:
        if component.optional:
            hooks.done(name, "not in this checkpoint (optional): skipped")
            return None
        if single and name not in opts.components:
            result.skipped.append(name)
            return None
        raise
    twins = [n for n, t in result.trees.items() if t.spec.name == tree.spec.name and t.source.files == tree.source.files]
    if from_file and twins and name not in opts.components:
        raise SourceError(f"{tree.source.origin}: one {tree.spec.name} checkpoint, and {entry.name} has several "
                          f"({', '.join([*twins, name])}): name the one it is with --components")
    return tree, from_file


def _report_single_file(entry: ModelEntry, opts: ConvertOptions, result: ConvertedModel,
                        hooks: ConversionHooks) -> None:
    """A single file holds some of a model's components: say which are missing and how to add them."""
    if not result.trees:
        raise SourceError(f"{opts.source}: no component of {entry.name} found in it "
                          f"(components: {', '.join(entry.components)})")
    if result.skipped:
        out = f" --out {result.out}" if opts.out is not None else ""
        hooks.done(", ".join(result.skipped), f"not in {Path(opts.source).name}: add them from the model's repo with "
                   f"`vidax-convert {entry.name} --components {','.join(result.skipped)}{out}`")


def _recorded_layouts(entry: ModelEntry, out: Path) -> dict:
    """The component layouts an earlier conversion of the same model into `out` recorded (a run with
    --components adds to the folder, it does not forget the others)."""
    try:
        recorded = json.loads((out / MODEL_FILE).read_text())
    except (OSError, ValueError):
        return {}
    same = recorded.get("model") == entry.name and recorded.get("variant") == entry.variant
    return dict(recorded.get("component_layouts") or {}) if same else {}
