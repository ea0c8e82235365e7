"""The Cosmos-Predict2.5 registry entries: the recorded configs build the released sizes offline."""

from __future__ import annotations

import math

import pytest
from vidax.translator.registry import load_registry
from vidax.zoo.cosmos import CosmosTransformer, CosmosTransformerConfig
from vidax.zoo.cosmos.text import DEFAULT_NEGATIVE_PROMPT
from vidax.zoo.parts.encoders.decoder import DecoderConfig
from vidax.zoo.parts.wan_vae import WanVAEConfig

SIZES = {"cosmos-predict2.5-2b": (1.9e9, 2.2e9), "cosmos-predict2.5-14b": (13.5e9, 15e9)}  # DiT parameters


@pytest.mark.parametrize("name", sorted(SIZES))
def test_configs_build_the_released_sizes(name):
    entry = load_registry()[name]
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(entry.config["transformer"]))
    count = sum(math.prod(s) for s in model.param_shapes().values())  # abstract: nothing allocated
    low, high = SIZES[name]
    assert low < count < high, count
    assert model.cfg.text_in_dim == 28 * 3584  # every Reason1 layer's 3584 features
    text = DecoderConfig.from_hf_config(entry.config["text_encoder"])
    assert text.num_hidden_layers * text.hidden_size == model.cfg.text_in_dim
    assert WanVAEConfig.from_hf_config(entry.config["vae"]).z_dim == model.cfg.in_channels - 1


@pytest.mark.parametrize("name", sorted(SIZES))
def test_settings_are_the_native_defaults(name):
    settings = load_registry()[name].settings
    assert (settings["height"], settings["width"], settings["frames"], settings["fps"]) == (704, 1280, 93, 16)
    assert (settings["steps"], settings["guidance"]) == (35, 7.0)
    scheduler = load_registry()[name].config["scheduler"]  # the folder's own scheduler config wins over it
    assert scheduler["use_karras_sigmas"] and (scheduler["sigma_min"], scheduler["sigma_max"]) == (0.01, 200.0)
    assert settings["negative_prompt"] == DEFAULT_NEGATIVE_PROMPT
