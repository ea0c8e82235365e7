"""`vidax-convert`: convert a registered model's PyTorch checkpoints into vidax host trees on disk.

    vidax-convert wan2.1-t2v-1.3b --out out/wan13b
    vidax-convert wan2.1-t2v-1.3b --source /models/Wan2.1-T2V-1.3B --check
    vidax-convert --list
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.table import Table

from vidax.cli.common import byte_task, console, run_guarded
from vidax.translator import LazyTree, SourceError, convert, load_spec, save_tree
from vidax.translator.registry import ModelEntry, get_model, load_registry

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@dataclass(frozen=True)
class ConvertOptions:
    model: str
    source: str | None = None
    revision: str | None = None
    out: Path | None = None
    components: tuple[str, ...] = ()
    dtype: str | None = None
    layout: str | None = None
    check: bool = False


def _file_digest(path: Path) -> str:
    """A cheap identity for a source file: the Hub blob hash when cached by huggingface_hub, else size+mtime."""
    real = path.resolve()
    if real.parent.name == "blobs":
        return f"hub-blob:{real.name}"
    stat = real.stat()
    return f"size-mtime:{stat.st_size}-{stat.st_mtime_ns}"


def _attempts(entry: ModelEntry, component, opts: ConvertOptions) -> list[tuple[str | None, str, str | None]]:
    """(layout, source, subfolder) tries for one component: the registry repo, or the user's source."""
    if opts.source is None:
        layout = opts.layout or entry.default_layout
        if layout not in entry.repos:
            raise SourceError(f"model {entry.name} has no {layout!r} repo (has: {', '.join(entry.repos)})")
        return [(layout, entry.repos[layout], component.subfolder.get(layout) or None)]
    named = [l for l, repo in entry.repos.items() if repo == opts.source]  # a registry repo given explicitly
    layouts = [opts.layout] if opts.layout else named or list(entry.repos)
    pinned = bool(opts.layout or named)  # otherwise the layout is detected from the files' keys
    tries = [(l if pinned else None, opts.source, component.subfolder.get(l) or None) for l in layouts]
    return list(dict.fromkeys(tries))


def _open(entry: ModelEntry, name: str, opts: ConvertOptions) -> LazyTree:
    component = entry.components[name]
    spec = load_spec(component.spec)
    first_error = None
    for layout, source, subfolder in _attempts(entry, component, opts):
        try:
            return convert(spec, source, layout=layout if layout in spec.layouts else None, dtype=opts.dtype,
                           revision=opts.revision or entry.revision, subfolder=subfolder, lazy=True)
        except SourceError as err:
            first_error = first_error or err
    raise first_error


def _manifest(entry: ModelEntry, name: str, tree: LazyTree, opts: ConvertOptions) -> dict:
    source = tree.source
    return {"model": entry.name, "component": name, "spec": tree.spec.name, "spec_digest": tree.spec.digest,
            "layout": source.layout.name, "dtype": opts.dtype or "spec default",
            "source": {"origin": source.origin, "repo": source.repo, "revision": source.revision,
                       "files": [{"name": p.name, "bytes": p.stat().st_size, "digest": _file_digest(p)} for p in source.files]}}


def _report(name: str, tree: LazyTree) -> None:
    dtypes: dict[str, int] = {}
    for leaf in tree.leaves.values():
        dtypes[str(leaf.dtype)] = dtypes.get(str(leaf.dtype), 0) + 1
    ckpt = tree.source.checkpoint
    table = Table(title=f"{name}: {tree.spec.name} ({tree.source.layout.name} layout)", show_header=False)
    table.add_row("source", tree.source.origin)
    table.add_row("files", ", ".join(p.name for p in tree.source.files))
    table.add_row("source tensors", f"{len(ckpt.keys())} ({ckpt.nbytes / 1e9:.3f} GB), all accounted for")
    table.add_row("leaves", f"{len(tree)} ({tree.nbytes / 1e9:.3f} GB): " + ", ".join(f"{n} {d}" for d, n in dtypes.items()))
    console.print(table)


def run(opts: ConvertOptions) -> int:
    """Convert (or with `check`, only plan and verify) every selected component of a model."""
    entry = get_model(opts.model)
    names = list(opts.components) or list(entry.components)
    unknown = [n for n in names if n not in entry.components]
    if unknown:
        raise SourceError(f"model {entry.name} has no component(s) {', '.join(unknown)} (has: {', '.join(entry.components)})")
    out = opts.out or Path("out") / entry.name
    for name in names:
        tree = _open(entry, name, opts)
        _report(name, tree)
        if opts.check:
            continue
        with byte_task(f"converting {name}", tree.nbytes) as advance:
            written = save_tree(tree, out / name, _manifest(entry, name, tree, opts), progress=advance)
        console.print(f"{name}: {'wrote' if written else 'up to date,'} {out / name}")
    return 0


def list_models() -> int:
    table = Table("model", "default repo", "other layouts", "components", "description")
    table.columns[0].no_wrap = table.columns[1].no_wrap = True
    for name, entry in load_registry().items():
        others = ", ".join(f"{l}: {r}" for l, r in entry.repos.items() if l != entry.default_layout)
        table.add_row(name, entry.repo(), others, ", ".join(entry.components), entry.description)
    import sys

    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 220).print(table)
    return 0


@app.command()
def main_command(
    model: str = typer.Argument(None, help="registered model name (see --list)"),
    source: str = typer.Option(None, "--source", help="Hub repo id or local file/folder instead of the registry's repo"),
    revision: str = typer.Option(None, "--revision", help="Hub branch, tag or commit"),
    out: Path = typer.Option(None, "--out", help="output folder (default out/MODEL); one subfolder per component"),
    components: list[str] = typer.Option(None, "--components", help="components to convert, repeated or comma-separated (default: all)"),
    dtype: str = typer.Option(None, "--dtype", help="override the spec's default dtype: float32, bfloat16, float16, keep"),
    layout: str = typer.Option(None, "--layout", help="source layout (e.g. official, diffusers) instead of detecting it"),
    check: bool = typer.Option(False, "--check", help="plan and verify coverage without writing"),
    list_: bool = typer.Option(False, "--list", help="list registered models and their default repos"),
    debug: bool = typer.Option(False, "--debug", help="show full tracebacks"),
) -> None:
    """Convert a model's PyTorch checkpoints into vidax's safetensors host trees."""
    if list_:
        raise typer.Exit(run_guarded(list_models, debug=debug))
    if model is None:
        console.print("error: give a MODEL name (see vidax-convert --list)")
        raise typer.Exit(2)
    names = tuple(n for item in components or () for n in item.split(",") if n)  # --components a,b or repeated
    opts = ConvertOptions(model, source, revision, out, names, dtype, layout, check)
    raise typer.Exit(run_guarded(lambda: run(opts), debug=debug))


def main() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    app()


if __name__ == "__main__":
    main()
