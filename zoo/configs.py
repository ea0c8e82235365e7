"""Reading a released `config.json` into a family's frozen config dataclass, field by field."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


def pick_fields(cls, hf: Mapping[str, Any], renames: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The entries of a config.json that dataclass `cls` declares (renamed where asked; lists as
    tuples, so the config stays hashable); diffusers' `_class_name`, `_diffusers_version` and any
    other key the dataclass does not name are left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    out = {}
    for key, value in hf.items():
        key = (renames or {}).get(key, key)
        if key in names:
            out[key] = tuple(value) if isinstance(value, list) else value
    return out
