"""The model families `vidax-train` trains, each a `TrainFamily` over its zoo `Family` (`base.py` says what one
supplies); `train_family` picks it by the registry entry's family and refuses the others in one line."""

from __future__ import annotations

import importlib

from vidax.train.families.base import Expert, TrainFamily, TrainRefused

# zoo family name -> "module:class" of its TrainFamily
FAMILIES = {
    "wan": "vidax.train.families.wan:WanTrainFamily",
    "hunyuan_video15": "vidax.train.families.hunyuan_video15:HunyuanVideo15TrainFamily",
    "ltx2": "vidax.train.families.ltx2:LTX2TrainFamily",
    "cogvideox": "vidax.train.families.cogvideox:CogVideoXTrainFamily",
}
TRAINED = "Wan 2.1 / 2.2, HunyuanVideo-1.5, LTX-2 and CogVideoX 1.0 / 1.5 DiTs"

__all__ = ["Expert", "FAMILIES", "TRAINED", "TrainFamily", "TrainRefused", "train_family"]


def train_family(family) -> TrainFamily:
    """The `TrainFamily` of a zoo family instance (`make_pipeline`'s), or `TrainRefused`."""
    found = FAMILIES.get(family.entry.family)
    if found is None:
        raise TrainRefused(f"{family.name}: vidax-train lora trains {TRAINED}, not {family.entry.family} models")
    module, name = found.split(":")
    return getattr(importlib.import_module(module), name)(family)
