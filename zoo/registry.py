"""Model name -> family pipeline factory.

Each family's pipeline module registers the names it serves when imported (`register`); this
module imports the family modules listed in `FAMILY_MODULES` on first lookup, so adding a family
is one line here plus its own module. Registered names are the translator registry's
(`conversion_specs/<family>/models.toml`) plus embedded models such as `wan-tiny`.

    pipeline = make_pipeline("wan2.1-t2v-1.3b", options)
    result = pipeline.generate(options, progress)
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Callable
from typing import Any, Protocol

from vidax.translator import SourceError

# family -> modules whose import registers that family's models
FAMILY_MODULES = {
    "wan": ("vidax.zoo.wan.pipeline", "vidax.zoo.wan.tiny"),
    "hunyuan_video15": ("vidax.zoo.hunyuan_video15.generate",),
}
# models with no models.toml entry (no checkpoint to convert) -> their family
EMBEDDED = {"wan-tiny": "wan"}


class Pipeline(Protocol):
    def generate(self, options: Any, progress: Any = None) -> Any: ...


Factory = Callable[[str, Any], Pipeline]


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    name: str
    family: str
    description: str
    factory: Factory


_MODELS: dict[str, RegisteredModel] = {}
_loaded: set[str] = set()


def register(name: str, family: str, description: str, factory: Factory) -> None:
    """Declare that `factory(name, options)` builds the pipeline for model `name`."""
    if name in _MODELS and _MODELS[name].factory is not factory:
        raise ValueError(f"model {name!r} is already registered by family {_MODELS[name].family!r}")
    _MODELS[name] = RegisteredModel(name, family, description, factory)


def _load_family(family: str) -> None:
    """Import one family's modules (only the family a run needs: the others may be heavy)."""
    if family not in _loaded:
        for module in FAMILY_MODULES.get(family, ()):
            importlib.import_module(module)
        _loaded.add(family)


def registered_models() -> dict[str, RegisteredModel]:
    """Every model `vidax-gen` can run, by name."""
    for family in FAMILY_MODULES:
        _load_family(family)
    return dict(_MODELS)


def _family_of(name: str) -> str | None:
    if name in EMBEDDED:
        return EMBEDDED[name]
    from vidax.translator.registry import load_registry

    entry = load_registry().get(name)
    return entry.family if entry is not None else None


def lookup(name: str) -> RegisteredModel:
    """The registered model `name`; an unknown name is a one-line SourceError with close matches."""
    family = _family_of(name)
    if family is not None:
        _load_family(family)
    if name in _MODELS:
        return _MODELS[name]
    models = registered_models()
    close = difflib.get_close_matches(name, models, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else " (see vidax-gen --list)"
    raise SourceError(f"unknown model {name!r}{hint}")


def make_pipeline(name: str, options: Any) -> Pipeline:
    """Build the pipeline of model `name` for `options` (its weights source, mesh, dtype)."""
    return lookup(name).factory(name, options)
