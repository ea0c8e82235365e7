"""The Cosmos3 registry entries: the recorded configs build the released sizes offline."""

from __future__ import annotations

import math

import pytest
from vidax.translator.registry import load_registry
from vidax.zoo.cosmos3 import Cosmos3Transformer, Cosmos3TransformerConfig
from vidax.zoo.cosmos3.conditioning import latent_shape
from vidax.zoo.parts.wan_vae import WanVAEConfig

# converted DiT parameters (text and video pathways, embeddings; no LM head, sound or action heads)
SIZES = {"cosmos3-nano": (14e9, 17e9), "cosmos3-edge": (2.8e9, 3.4e9)}
NATIVE = {"cosmos3-nano": (704, 1280, 93), "cosmos3-edge": (480, 832, 121)}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_configs_build_the_released_sizes(name):
    entry = load_registry()[name]
    cfg = Cosmos3TransformerConfig.from_hf_config(entry.config["transformer"])
    count = sum(math.prod(s) for s in Cosmos3Transformer(cfg).param_shapes().values())  # abstract
    low, high = SIZES[name]
    assert low < count < high, count
    assert WanVAEConfig.from_hf_config(entry.config["vae"]).z_dim == cfg.latent_channel
    height, width, frames = NATIVE[name]
    settings = entry.settings
    assert (settings["height"], settings["width"], settings["frames"], settings["steps"]) == (height, width, frames, 35)
    assert latent_shape(frames, height, width) == (1, 48, (frames - 1) // 4 + 1, height // 16, width // 16)
