"""The model registry: model names -> default repos, components and specs, read from data files.

Every family ships `conversion_specs/<family>/models.toml` (format in conversion_specs/README.md);
this module globs them, validates them and answers lookups.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from vidax.translator.errors import SourceError, SpecError
from vidax.translator.spec import SPECS_ROOT

_MODEL_KEYS = {"description", "family", "repos", "default_layout", "revision", "variants", "default_variant",
               "components", "alias_of", "variant", "settings", "config", "embedded"}
_COMPONENT_KEYS = {"spec", "subfolder", "optional", "repo", "mount", "copy", "when", "hub_layout", "dtype", "file"}
_VARIANT_KEYS = {"description", "tags", "repos", "subfolder", "settings", "config"}


@dataclass(frozen=True)
class Component:
    """One part of a model. `spec` components are converted; a component without one only has its
    `copy` files (configs, tokenizers) copied into the output. Each per-layout table may lack a layout."""

    name: str
    spec: str | None
    subfolder: dict  # layout -> folder inside the component's repo ("" = repo root)
    optional: bool = False
    repo: dict = field(default_factory=dict)  # layout -> its own repo id (default: the model's repo)
    mount: dict = field(default_factory=dict)  # layout -> where that repo sits inside a local model folder
    copy: dict = field(default_factory=dict)  # layout -> globs (relative to the component folder) copied as is
    when: str | None = None  # a variant tag the component needs (e.g. "i2v")
    # layout -> the layout whose Hub repo serves this component when it is fetched from the Hub (the
    # official HunyuanVideo-1.5 ByT5 is on ModelScope only; the diffusers mirror carries the same weights)
    hub_layout: dict = field(default_factory=dict)
    dtype: str | None = None  # converted in this dtype unless the user says otherwise (CogVideoX's T5: fp32)
    file: dict = field(default_factory=dict)  # layout -> globs replacing the spec's (one release among several)
    subfolder_layouts: tuple = ()  # every layout of the model (what "the same file in every layout" means)

    def files(self, layout: str | None) -> tuple[str, ...] | None:
        """The component's own file globs in `layout` (None: the spec's). With no layout named, the
        globs only when every layout of the model has the same ones (a plain string in the TOML)."""
        if layout is not None:
            found = self.file.get(layout)
            return tuple(found) if found else None
        values = {tuple(v) for v in self.file.values()}
        return next(iter(values)) if len(values) == 1 and len(self.file) == len(self.subfolder_layouts) else None

    def hub(self, layout: str) -> str:
        """The layout to fetch this component in from the Hub when the model's layout is `layout`."""
        return self.hub_layout.get(layout, layout)

    def folder(self, layout: str | None, local: bool) -> str | None:
        """The component's folder inside a local model folder (`local`) or inside its repo."""
        parts = [self.mount.get(layout, "") if local else "", self.subfolder.get(layout, "")]
        return "/".join(p.strip("/") for p in parts if p) or None


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    tags: tuple[str, ...]
    repos: dict  # layout -> repo id overriding the model's
    subfolder: dict  # component -> {layout -> folder}
    settings: dict  # generation defaults (shift, guidance, ...) over the model's
    config: dict  # component -> config entries over the model's


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    description: str
    repos: dict  # layout -> Hub repo id
    default_layout: str
    revision: str | dict | None  # one revision, or layout -> revision (a layout kept on a branch)
    variants: tuple[str, ...]  # tags (t2v, i2v, 480p, ...) of this entry, or of its selected variant
    components: dict  # name -> Component (for the selected variant)
    choices: dict = field(default_factory=dict)  # variant name -> Variant
    default_variant: str | None = None
    variant: str | None = None  # the selected choice
    all_components: dict = field(default_factory=dict)  # before variant selection
    alias_of: str | None = None  # the model this name is an alias of (for one of its variants)
    # native generation defaults (height, width, frames, steps, guidance, shift, fps, ...; family keys too),
    # of the selected variant; the checkpoint folder's own scheduler and configs win over them
    settings: dict = field(default_factory=dict)
    # component -> its config.json entries as the released checkpoint ships them: the architecture
    # sizes `vidax-gen --plan` needs before (or without) a download
    config: dict = field(default_factory=dict)
    # a module that builds the model's weights locally (no checkpoint to fetch or convert: `wan-tiny`)
    embedded: str | None = None
    # a preset (an alias with its own `settings`, `lora`, `lora_2`): settings that win over the checkpoint
    # folder's (a distilled LoRA's steps, guidance, shift, sampler), and LoRAs by option ("lora", "lora_2")
    preset_settings: dict = field(default_factory=dict)
    loras: dict = field(default_factory=dict)

    def repo(self, layout: str | None = None) -> str:
        return self.repos[layout or self.default_layout]

    def revision_of(self, layout: str | None = None) -> str | None:
        """The Hub revision of a layout's repo (`revision` may be one string or a layout table)."""
        if isinstance(self.revision, dict):
            return self.revision.get(layout or self.default_layout)
        return self.revision

    def select(self, variant: str | None = None) -> "ModelEntry":
        """This model with one of its `variants` chosen (None: the default); a model without
        choices accepts only None."""
        if not self.choices:
            if variant is not None:
                raise SourceError(f"model {self.name} has no variants (got --variant {variant})")
            return self
        name = variant or self.default_variant
        if name not in self.choices:
            close = difflib.get_close_matches(name, self.choices, n=3)
            hint = f"did you mean {', '.join(close)}?; " if close else ""
            raise SourceError(f"model {self.name} has no variant {name!r} ({hint}has: {', '.join(self.choices)})")
        choice = self.choices[name]
        components = {}
        for cname, comp in self.all_components.items():
            if comp.when is not None and comp.when not in choice.tags:
                continue
            if cname in choice.subfolder:
                comp = replace(comp, subfolder={**comp.subfolder, **choice.subfolder[cname]})
            components[cname] = comp
        config = {c: {**self.config.get(c, {}), **choice.config.get(c, {})} for c in {*self.config, *choice.config}}
        return replace(self, repos={**self.repos, **choice.repos}, variants=choice.tags, components=components,
                       variant=name, settings={**self.settings, **choice.settings}, config=config)


def _per_layout(value, repos: dict, what: str, where: str) -> dict:
    """A string (every layout) or a layout -> value table."""
    if isinstance(value, (str, list)):
        return {layout: value for layout in repos}
    if not isinstance(value, dict) or set(value) - set(repos):
        raise SpecError(f"{where}: {what} must be a string or a table of known layouts ({', '.join(repos)})")
    return dict(value)


def _component(model: str, name: str, raw: dict, repos: dict, where: str) -> Component:
    if not isinstance(raw, dict) or not ("spec" in raw or "copy" in raw):
        raise SpecError(f"{where}: component {name!r} of {model!r} needs a 'spec' or 'copy'")
    extra = set(raw) - _COMPONENT_KEYS
    if extra:
        raise SpecError(f"{where}: component {name!r} of {model!r} has unknown key(s) {', '.join(sorted(extra))}")
    if "spec" in raw and not (SPECS_ROOT / f"{raw['spec']}.toml").is_file():
        raise SpecError(f"{where}: component {name!r} of {model!r} names missing spec {raw['spec']!r}")
    what = f"component {name!r} of {model!r}:"
    subfolder = _per_layout(raw.get("subfolder", {}), repos, f"{what} subfolder", where)
    copy = {k: [v] if isinstance(v, str) else list(v)
            for k, v in _per_layout(raw.get("copy", {}), repos, f"{what} copy", where).items()}
    hub_layout = _per_layout(raw.get("hub_layout", {}), repos, f"{what} hub_layout", where)
    if set(hub_layout.values()) - set(repos):
        raise SpecError(f"{where}: {what} hub_layout must name layouts of 'repos' ({', '.join(repos)})")
    files = {k: [v] if isinstance(v, str) else list(v)
             for k, v in _per_layout(raw.get("file", {}), repos, f"{what} file", where).items()}
    dtype = raw.get("dtype")
    if dtype is not None:
        from vidax.translator.dtypes import policy_dtype

        try:
            policy_dtype(dtype, f"{what} dtype")
        except SpecError as err:
            raise SpecError(f"{where}: {err}") from None
    return Component(name, raw.get("spec"), subfolder, bool(raw.get("optional", False)),
                     _per_layout(raw.get("repo", {}), repos, f"{what} repo", where),
                     _per_layout(raw.get("mount", {}), repos, f"{what} mount", where), copy, raw.get("when"),
                     hub_layout, dtype, files, tuple(repos))


def _variant(model: str, name: str, raw: dict, repos: dict, components: dict, where: str) -> Variant:
    if not isinstance(raw, dict) or set(raw) - _VARIANT_KEYS:
        raise SpecError(f"{where}: variant {name!r} of {model!r} must be a table with keys among "
                        f"{', '.join(sorted(_VARIANT_KEYS))}")
    sub = raw.get("subfolder", {})
    if set(sub) - set(components):
        raise SpecError(f"{where}: variant {name!r} of {model!r} overrides unknown components")
    subfolder = {c: _per_layout(v, repos, f"variant {name!r} subfolder", where) for c, v in sub.items()}
    return Variant(name, raw.get("description", ""), tuple(raw.get("tags", ())),
                   _per_layout(raw.get("repos", {}), repos, f"variant {name!r} repos", where), subfolder,
                   _table(raw, "settings", f"variant {name!r} of {model!r}", where),
                   _configs(raw, f"variant {name!r} of {model!r}", where))


def _table(raw: dict, key: str, what: str, where: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise SpecError(f"{where}: {what}: {key} must be a table")
    return dict(value)


NULL_KEY = "_null"  # a config table's list of the config.json entries that are null (TOML has no null)


def _config_table(table: dict, what: str, where: str) -> dict:
    """One component's config.json entries; the names listed under `_null` become None."""
    nulls = table.get(NULL_KEY, [])
    if not isinstance(nulls, list) or not all(isinstance(n, str) for n in nulls):
        raise SpecError(f"{where}: {what}: {NULL_KEY} must be a list of entry names")
    clash = sorted(set(nulls) & set(table))
    if clash:
        raise SpecError(f"{where}: {what}: {', '.join(clash)} both null ({NULL_KEY}) and given a value")
    return {**{k: v for k, v in table.items() if k != NULL_KEY}, **dict.fromkeys(nulls)}


def _configs(raw: dict, what: str, where: str) -> dict:
    """`config.<component> = { ... }`: a table of tables."""
    configs = _table(raw, "config", what, where)
    bad = [c for c, v in configs.items() if not isinstance(v, dict)]
    if bad:
        raise SpecError(f"{where}: {what}: config.{bad[0]} must be a table (the component's config.json entries)")
    return {c: _config_table(v, f"{what}: config.{c}", where) for c, v in configs.items()}


def _entry(name: str, raw: dict, where: str) -> ModelEntry:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: model {name!r} must be a table")
    extra = set(raw) - _MODEL_KEYS
    if extra:
        raise SpecError(f"{where}: model {name!r} has unknown key(s) {', '.join(sorted(extra))}")
    repos = raw.get("repos") or {}
    default = raw.get("default_layout", next(iter(repos), None))
    if not raw.get("embedded") and (not repos or default not in repos):
        raise SpecError(f"{where}: model {name!r} needs 'repos' (layout -> repo) containing its default_layout")
    components = {c: _component(name, c, r, repos, where) for c, r in (raw.get("components") or {}).items()}
    if not components and not raw.get("embedded"):
        raise SpecError(f"{where}: model {name!r} declares no components")
    variants = raw.get("variants", ())
    choices = {}
    if isinstance(variants, dict):  # named choices, one selected per conversion
        choices = {v: _variant(name, v, r, repos, components, where) for v, r in variants.items()}
        default_variant = raw.get("default_variant", next(iter(choices), None))
        if default_variant not in choices:
            raise SpecError(f"{where}: model {name!r}: default_variant {default_variant!r} is not one of its variants")
        variants = ()
    else:
        default_variant = None
    revision = raw.get("revision")
    if isinstance(revision, dict) and set(revision) - set(repos):
        raise SpecError(f"{where}: model {name!r}: revision must be a string or a table of known layouts ({', '.join(repos)})")
    entry = ModelEntry(name, raw.get("family", Path(where).parent.name), raw.get("description", ""), dict(repos),
                       default, revision, tuple(variants), components, choices, default_variant, None,
                       components, settings=_table(raw, "settings", f"model {name!r}", where),
                       config=_configs(raw, f"model {name!r}", where), embedded=raw.get("embedded"))
    return entry.select() if choices else entry


_PRESET_KEYS = ("settings", "lora", "lora_2")


def _alias(name: str, raw: dict, models: dict, where: str) -> ModelEntry:
    """`alias_of = MODEL` + `variant = NAME`: another name for one variant of a model; with `settings`,
    `lora` and `lora_2` (lists of `SOURCE[=STRENGTH]`), a preset of it (docs/LORA.md, "Presets")."""
    if set(raw) - {"alias_of", "variant", "description", *_PRESET_KEYS}:
        raise SpecError(f"{where}: alias {name!r} takes only alias_of, variant, description, {', '.join(_PRESET_KEYS)}")
    base = models.get(raw["alias_of"])
    if base is None:
        raise SpecError(f"{where}: alias {name!r} names unknown model {raw['alias_of']!r}")
    try:
        chosen = base.select(raw.get("variant"))
    except SourceError as err:
        raise SpecError(f"{where}: alias {name!r}: {err}") from None
    loras = {}
    for option in ("lora", "lora_2"):
        texts = raw.get(option, [])
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SpecError(f"{where}: preset {name!r}: {option} must be a list of \"SOURCE[=STRENGTH]\" strings")
        if texts:
            loras[option] = tuple(texts)
    return replace(chosen, name=name, description=raw.get("description", chosen.description), alias_of=raw["alias_of"],
                   preset_settings=_table(raw, "settings", f"preset {name!r}", where), loras=loras)


def registry_files(root: Path = SPECS_ROOT) -> list[Path]:
    """The shipped `<family>/models.toml` files, then the user's (`VIDAX_MODELS`: paths joined by the
    OS path separator): a new variant of a shipped family is a TOML file of one's own."""
    extra = [Path(p).expanduser() for p in os.environ.get("VIDAX_MODELS", "").split(os.pathsep) if p]
    missing = [str(p) for p in extra if not p.is_file()]
    if missing:
        raise SourceError(f"VIDAX_MODELS names missing file(s): {', '.join(missing)}")
    return sorted(root.glob("*/models.toml")) + extra


def load_registry(root: Path = SPECS_ROOT) -> dict[str, ModelEntry]:
    """Every model of every registry file (`registry_files`); duplicates and bad entries are SpecErrors.

    A model's family is the folder its `models.toml` sits in (`conversion_specs/wan/`), or its
    `family` key (required in the user's files, which sit in no family folder).
    """
    models: dict[str, ModelEntry] = {}
    aliases = []
    for path in registry_files(root):
        shipped = path.is_relative_to(root)
        where = str(path.relative_to(root)) if shipped else str(path)
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise SpecError(f"{where}: invalid TOML ({err})") from None
        if set(raw) - {"models"}:
            raise SpecError(f"{where}: only [models.<name>] tables are allowed")
        for name, entry in raw.get("models", {}).items():
            if not shipped and isinstance(entry, dict) and "alias_of" not in entry and "family" not in entry:
                raise SpecError(f"{where}: model {name!r} needs a 'family' key (e.g. family = \"wan\")")
            if name in models:
                raise SpecError(f"{where}: model {name!r} is already registered by another models.toml")
            if isinstance(entry, dict) and "alias_of" in entry:
                aliases.append((name, entry, where))
                models[name] = None  # reserved
            else:
                models[name] = _entry(name, entry, where)
    for name, entry, where in aliases:
        models[name] = _alias(name, entry, models, where)
    return models


def get_model(name: str, registry: dict[str, ModelEntry] | None = None) -> ModelEntry:
    """Look a model up by name; an unknown name is a one-line SourceError with close matches."""
    registry = load_registry() if registry is None else registry
    if name in registry:
        return registry[name]
    close = difflib.get_close_matches(name, registry, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else " (see vidax-convert --list)"
    raise SourceError(f"unknown model {name!r}{hint}")
