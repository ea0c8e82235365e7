"""The LoRA example: `zoo/wan/tiny_lora/stripes.safetensors` (wan_tiny_recipe/train_lora.py), a rank-4
PEFT LoRA on wan-tiny's DiT trained on the same clips with striped backgrounds, turns the plain
background asked for into horizontal stripes; without it the background stays plain."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from detector import FAR_FROM_BACKGROUND, PALETTE, STRIPE, stripe_contrast
from vidax.zoo.generator.generation import generate_video
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.registry import make_pipeline
from vidax.zoo.wan.tiny import TRAINED

LORA = TRAINED.parent / "tiny_lora" / "stripes.safetensors"
PROMPTS = ("a red circle moves left on a blue background", "a yellow square moves up on a black background")


def _contrasts(lora: tuple[str, ...]) -> list[float]:
    options = GenerateOptions(model="wan-tiny", prompt="", release_stages=False, lora=lora)
    pipeline = make_pipeline("wan-tiny", options)
    return [stripe_contrast(generate_video(pipeline, dataclasses.replace(options, prompt=p)).frames) for p in PROMPTS]


@pytest.fixture(scope="module")
def contrasts():
    return {"plain": _contrasts(()), "lora": _contrasts((str(LORA),))}


def test_lora_file_is_small():
    assert LORA.stat().st_size < 200_000


def test_lora_stripes_the_background(contrasts):
    print(f"\nstripe contrast without the LoRA {contrasts['plain']}, with it {contrasts['lora']}")
    assert all(c < FAR_FROM_BACKGROUND / 2 for c in contrasts["plain"]), contrasts
    assert all(c > FAR_FROM_BACKGROUND for c in contrasts["lora"]), contrasts


def _striped_clip(stripes: bool) -> np.ndarray:
    """Blue background (with white stripes when asked) and a red disc moving right along the middle."""
    frames = np.empty((17, 64, 64, 3), np.float32)
    ys, xs = np.mgrid[0:64, 0:64]
    for f in range(17):
        frames[f] = np.asarray(PALETTE["blue"]) / 255
        if stripes:
            frames[f][(ys // STRIPE) % 2 == 1] = 1.0
        frames[f][(xs - 16 - 2 * f) ** 2 + (ys - 32) ** 2 <= 81] = np.asarray(PALETTE["red"]) / 255
    return frames


def test_detector_tells_stripes_from_a_plain_background():
    assert stripe_contrast(_striped_clip(False)) < 0.01
    assert stripe_contrast(_striped_clip(True)) > 1.0
