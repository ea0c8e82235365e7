"""The registry's HunyuanVideo entries: shipped config entries build our configs and equal diffusers' own
defaults (the released checkpoints' sizes), and the native settings are the reference's."""

from __future__ import annotations

import inspect

import pytest
from diffusers import AutoencoderKLHunyuanVideo, HunyuanVideoTransformer3DModel

from vidax.translator.registry import get_model
from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig
from vidax.zoo.parts.encoders.decoder import DecoderConfig
from vidax.zoo.parts.encoders.llava import LlavaConfig
from vidax.zoo.hunyuan_video.config import TransformerConfig, VAEConfig


def defaults(cls) -> dict:
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if p.default is not p.empty}


@pytest.mark.parametrize("name", ["hunyuanvideo", "hunyuanvideo-i2v"])
def test_registry_configs_are_the_released_sizes(name):
    model = get_model(name)
    cfg = TransformerConfig.from_hf_config(model.config["transformer"])
    expected = {**defaults(HunyuanVideoTransformer3DModel), "image_condition_type": "token_replace" if "i2v" in name else None}
    assert cfg == TransformerConfig.from_hf_config(expected)
    assert cfg.num_layers == 20 and cfg.num_single_layers == 40 and cfg.inner_dim == 3072
    assert VAEConfig.from_hf_config(model.config["vae"]) == VAEConfig.from_hf_config(defaults(AutoencoderKLHunyuanVideo))
    assert CLIPTextConfig.from_hf_config(model.config["text_encoder_2"]) == CLIPTextConfig()  # CLIP-L, legacy pooling
    text = model.config["text_encoder"]
    llama = DecoderConfig.from_hf_config(text) if name == "hunyuanvideo" else LlavaConfig.from_hf_config(text).text
    assert (llama.hidden_size, llama.num_hidden_layers, llama.kv_heads, llama.rope_theta) == (4096, 32, 8, 500000.0)
    s = model.settings
    assert (s["height"], s["width"], s["frames"], s["steps"], s["shift"], s["guidance"], s["true_cfg"]) == \
        (720, 1280, 129, 50, 7.0, 6.0, 1.0)
