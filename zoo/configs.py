"""Reading a released `config.json` into a family's frozen config dataclass, field by field."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, Mapping


def pick_fields(cls, hf: Mapping[str, Any], renames: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The entries of a config.json that dataclass `cls` declares (renamed where asked; lists, nested
    ones too, as tuples, so the config stays hashable); diffusers' `_class_name`, `_diffusers_version` and any
    other key the dataclass does not name are left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    out = {}
    for key, value in hf.items():
        key = (renames or {}).get(key, key)
        if key in names:
            out[key] = _frozen(value)
    return out


def _frozen(value: Any) -> Any:
    """JSON lists as tuples, nested ones too (per-stage kernel lists: `[[3, 3, 3], ...]`)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


class HeadsConfig:
    """Widths derived from `num_attention_heads`, `attention_head_dim` and `mlp_ratio`, the fields
    of a diffusers DiT config that counts its width in heads (a mixin for frozen config dataclasses)."""

    num_attention_heads: int
    attention_head_dim: int
    mlp_ratio: float

    @cached_property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @cached_property
    def mlp_dim(self) -> int:
        return int(self.inner_dim * self.mlp_ratio)
