"""The model registry: model names -> default repos, components and specs, read from data files.

Every family ships `conversion_specs/<family>/models.toml` (format in conversion_specs/README.md);
this module globs them, validates them and answers lookups.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from vidax.translator.errors import SourceError, SpecError
from vidax.translator.spec import SPECS_ROOT

_MODEL_KEYS = {"description", "family", "repos", "default_layout", "revision", "variants", "components"}
_COMPONENT_KEYS = {"spec", "subfolder", "optional"}


@dataclass(frozen=True)
class Component:
    name: str
    spec: str
    subfolder: dict  # layout -> folder inside the repo ("" = repo root)
    optional: bool = False


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    description: str
    repos: dict  # layout -> Hub repo id
    default_layout: str
    revision: str | None
    variants: tuple[str, ...]
    components: dict  # name -> Component

    def repo(self, layout: str | None = None) -> str:
        return self.repos[layout or self.default_layout]


def _component(model: str, name: str, raw: dict, repos: dict, where: str) -> Component:
    if not isinstance(raw, dict) or "spec" not in raw:
        raise SpecError(f"{where}: component {name!r} of {model!r} needs a 'spec'")
    extra = set(raw) - _COMPONENT_KEYS
    if extra:
        raise SpecError(f"{where}: component {name!r} of {model!r} has unknown key(s) {', '.join(sorted(extra))}")
    if not (SPECS_ROOT / f"{raw['spec']}.toml").is_file():
        raise SpecError(f"{where}: component {name!r} of {model!r} names missing spec {raw['spec']!r}")
    subfolder = raw.get("subfolder", {})
    if isinstance(subfolder, str):
        subfolder = {layout: subfolder for layout in repos}
    if set(subfolder) - set(repos):
        raise SpecError(f"{where}: component {name!r} of {model!r} has subfolders for unknown layouts")
    return Component(name, raw["spec"], subfolder, bool(raw.get("optional", False)))


def _entry(name: str, raw: dict, where: str) -> ModelEntry:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: model {name!r} must be a table")
    extra = set(raw) - _MODEL_KEYS
    if extra:
        raise SpecError(f"{where}: model {name!r} has unknown key(s) {', '.join(sorted(extra))}")
    repos = raw.get("repos") or {}
    default = raw.get("default_layout", next(iter(repos), None))
    if not repos or default not in repos:
        raise SpecError(f"{where}: model {name!r} needs 'repos' (layout -> repo) containing its default_layout")
    components = {c: _component(name, c, r, repos, where) for c, r in (raw.get("components") or {}).items()}
    if not components:
        raise SpecError(f"{where}: model {name!r} declares no components")
    return ModelEntry(name, raw.get("family", Path(where).parent.name), raw.get("description", ""), dict(repos), default,
                      raw.get("revision"), tuple(raw.get("variants", ())), components)


def load_registry(root: Path = SPECS_ROOT) -> dict[str, ModelEntry]:
    """Every model of every `<family>/models.toml` under `root`; duplicates and bad entries are SpecErrors."""
    models: dict[str, ModelEntry] = {}
    for path in sorted(root.glob("*/models.toml")):
        where = str(path.relative_to(root))
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise SpecError(f"{where}: invalid TOML ({err})") from None
        if set(raw) - {"models"}:
            raise SpecError(f"{where}: only [models.<name>] tables are allowed")
        for name, entry in raw.get("models", {}).items():
            if name in models:
                raise SpecError(f"{where}: model {name!r} is already registered by another models.toml")
            models[name] = _entry(name, entry, where)
    return models


def get_model(name: str, registry: dict[str, ModelEntry] | None = None) -> ModelEntry:
    """Look a model up by name; an unknown name is a one-line SourceError with close matches."""
    registry = load_registry() if registry is None else registry
    if name in registry:
        return registry[name]
    close = difflib.get_close_matches(name, registry, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else " (see vidax-convert --list)"
    raise SourceError(f"unknown model {name!r}{hint}")
