"""The LoRA example: `zoo/wan/tiny_lora/stripes.safetensors` (training/train_lora.py), a rank-4
PEFT LoRA on wan-tiny's DiT trained on the same clips with striped backgrounds, turns the plain
background asked for into horizontal stripes; without it the background stays plain."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from detector import FAR_FROM_BACKGROUND, stripe_contrast
from vidax.zoo.pipeline import GenerateOptions
from vidax.zoo.registry import make_pipeline

import vidax.zoo.wan as wan_package

LORA = Path(wan_package.__file__).parent / "tiny_lora" / "stripes.safetensors"
PROMPTS = ("a red circle moves left on a blue background", "a yellow square moves up on a black background")


def _contrasts(lora: tuple[str, ...]) -> list[float]:
    options = GenerateOptions(model="wan-tiny", prompt="", release_stages=False, lora=lora)
    pipeline = make_pipeline("wan-tiny", options)
    return [stripe_contrast(pipeline.generate(dataclasses.replace(options, prompt=p)).frames) for p in PROMPTS]


@pytest.fixture(scope="module")
def contrasts():
    return {"plain": _contrasts(()), "lora": _contrasts((str(LORA),))}


def test_lora_file_is_small():
    assert LORA.stat().st_size < 200_000


def test_lora_stripes_the_background(contrasts):
    print(f"\nstripe contrast without the LoRA {contrasts['plain']}, with it {contrasts['lora']}")
    assert all(c < FAR_FROM_BACKGROUND / 2 for c in contrasts["plain"]), contrasts
    assert all(c > FAR_FROM_BACKGROUND for c in contrasts["lora"]), contrasts
