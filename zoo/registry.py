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
}


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
_loaded = False


def register(name: str, family: str, description: str, factory: Factory) -> None:
    """Declare that `factory(name, options)` builds the pipeline for model `name`."""
    if name in _MODELS and _MODELS[name].factory is not factory:
        raise ValueError(f"model {name!r} is already registered by family {_MODELS[name].family!r}")
    _MODELS[name] = RegisteredModel(name, family, description, factory)


def _load_families() -> None:
    global _loaded
    if not _loaded:
        for modules in FAMILY_MODULES.values():
            for module in modules:
                importlib.import_module(module)
        _loaded = True


def registered_models() -> dict[str, RegisteredModel]:
    """Every model `vidax-gen` can run, by name."""
    _load_families()
    return dict(_MODELS)


def lookup(name: str) -> RegisteredModel:
    """The registered model `name`; an unknown name is a one-line SourceError with close matches."""
    models = registered_models()
    if name in models:
        return models[name]
    close = difflib.get_close_matches(name, models, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else " (see vidax-gen --list)"
    raise SourceError(f"unknown model {name!r}{hint}")


def make_pipeline(name: str, options: Any) -> Pipeline:
    """Build the pipeline of model `name` for `options` (its weights source, mesh, dtype)."""
    return lookup(name).factory(name, options)
