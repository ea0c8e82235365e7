"""Model name -> its family's generator.

The models are data: `conversion_specs/<family>/models.toml` (the translator's registry) names each
model's family, repos, components, native settings and configs. A family is the folder of that
name under `zoo/`, whose `family.py` exports `FAMILY` (a `vidax.zoo.generator.contract.Family` subclass). No
Python names a model, and adding a family needs no edit here.

    pipeline = make_pipeline("wan2.1-t2v-1.3b", options)
    result = generate_video(pipeline, options, progress)
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
from typing import Any

from vidax.translator import SourceError
from vidax.translator.registry import ModelEntry, load_registry


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    name: str
    family: str
    description: str


def family_class(family: str):
    """The `Family` subclass of a family folder (`vidax.zoo.<family>.family.FAMILY`)."""
    try:
        module = importlib.import_module(f"vidax.zoo.{family}.family")
    except ModuleNotFoundError as err:
        if err.name not in (f"vidax.zoo.{family}", f"vidax.zoo.{family}.family"):
            raise
        raise SourceError(f"family {family!r} has no generator yet (vidax.zoo.{family}.family)") from None
    return module.FAMILY


def registered_models() -> dict[str, RegisteredModel]:
    """Every model `vidax-gen` can run, by name (those whose family has a generator)."""
    out = {}
    for name, entry in load_registry().items():
        if _has_generator(entry.family):
            out[name] = RegisteredModel(name, entry.family, entry.description)
    return out


def _has_generator(family: str) -> bool:
    return importlib.util.find_spec(f"vidax.zoo.{family}.family") is not None if _has_package(family) else False


def _has_package(family: str) -> bool:
    try:
        return importlib.util.find_spec(f"vidax.zoo.{family}") is not None
    except ModuleNotFoundError:
        return False


def lookup(name: str) -> ModelEntry:
    """The registry entry of model `name`; an unknown name is a one-line SourceError with close matches."""
    models = load_registry()
    if name in models:
        return models[name]
    close = difflib.get_close_matches(name, models, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else " (see vidax-gen --list)"
    raise SourceError(f"unknown model {name!r}{hint}")


def make_pipeline(name: str, options: Any, source: Any = None):
    """The generator of model `name` for `options` (its weights source, mesh, dtype, `variant`)."""
    entry = lookup(name)
    variant = getattr(options, "variant", None)
    if variant is not None:
        entry = _select_variant(entry, variant)
    pipeline = family_class(entry.family)(entry, options, source)
    if variant is not None and pipeline.entry.variant != variant:  # a converted folder recorded another
        raise SourceError(f"{options.weights}: converted as {name}'s variant {pipeline.entry.variant}, "
                          f"not --variant {variant}")
    return pipeline


def _select_variant(entry: ModelEntry, variant: str) -> ModelEntry:
    """`--variant` of a model with variants; an alias names its own variant only."""
    if entry.alias_of is not None and variant != entry.variant:
        raise SourceError(f"{entry.name} is {entry.alias_of}'s variant {entry.variant}; for {variant} run "
                          f"`{entry.alias_of} --variant {variant}`")
    return entry if entry.alias_of is not None else entry.select(variant)
