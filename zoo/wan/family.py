"""Wan on the family contract as the registry finds it (`FAMILY`): the text-, image- and first-last-frame
models are `vidax.zoo.wan.base_family.WanFamily`, the VACE models (a registry entry whose DiT spec is
wan/vace_transformer) `vidax.zoo.wan.vace_family.WanVACEFamily`; which class an entry gets is decided here,
above both, so that neither imports the other's module back."""

from __future__ import annotations

from vidax.zoo.wan import base_family
from vidax.zoo.wan.base_family import UMT5_XXL, WanCondition, WanModel, WanPredict, WanSettings, _is_vace  # noqa: F401
from vidax.zoo.wan.vace_family import WanVACEFamily


class WanFamily(base_family.WanFamily):
    """`base_family.WanFamily`, or `WanVACEFamily` for a VACE registry entry."""

    def __new__(cls, entry=None, *args, **kwargs):
        if cls is WanFamily and entry is not None and _is_vace(entry):
            return WanVACEFamily(entry, *args, **kwargs)  # built whole: Python calls no __init__ on another class
        return super().__new__(cls)


FAMILY = WanFamily
