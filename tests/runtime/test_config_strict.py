"""Config reading is as strict as the translator: every key a reference class writes into its config.json
is read, renamed or ignored by name with a reason, and an unknown key is a one-line `ConfigError`.

The reference configs are built from the classes themselves (diffusers: the constructor's arguments and
defaults, which is what `save_config` writes; transformers: `Config().to_dict()`), so a library release
that adds a setting makes this test fail until the reader decides what the setting means for vidax.
"""

from __future__ import annotations

import inspect
import json

import pytest

from vidax.zoo.configs import LIBRARY_BOOKKEEPING, ConfigError, pick_fields


def _diffusers_config(name: str) -> dict:
    """What diffusers' `save_config` writes for `name` at its defaults (as a parsed config.json)."""
    import diffusers
    from diffusers.pipelines import ltx, ltx2

    cls = getattr(diffusers, name, None) or getattr(ltx2, name, None) or getattr(ltx, name)
    params = inspect.signature(cls.__init__).parameters.values()
    config = {p.name: p.default for p in params if p.name != "self" and p.kind == p.POSITIONAL_OR_KEYWORD}
    config.update(_class_name=name, _diffusers_version=diffusers.__version__)
    return json.loads(json.dumps(config, default=list))


def _transformers_config(name: str) -> dict:
    import transformers

    return json.loads(json.dumps(getattr(transformers, name)().to_dict(), default=list))


def _reader(path: str):
    module, _, attr = path.rpartition(".")
    owner, _, method = attr.partition(":")
    found = getattr(__import__(f"vidax.zoo.{module}", fromlist=[owner]), owner)
    return getattr(found, method) if method else found


DIFFUSERS = [
    ("cogvideox.config.CogVideoXTransformerConfig:from_hf_config", "CogVideoXTransformer3DModel"),
    ("cogvideox.config.CogVideoXVAEConfig:from_hf_config", "AutoencoderKLCogVideoX"),
    ("cosmos.config.CosmosTransformerConfig:from_hf_config", "CosmosTransformer3DModel"),
    ("cosmos3.config.Cosmos3TransformerConfig:from_hf_config", "Cosmos3OmniTransformer"),
    ("hunyuan_video.config.TransformerConfig:from_hf_config", "HunyuanVideoTransformer3DModel"),
    ("hunyuan_video.config.VAEConfig:from_hf_config", "AutoencoderKLHunyuanVideo"),
    ("hunyuan_video15.config.TransformerConfig:from_hf_config", "HunyuanVideo15Transformer3DModel"),
    ("hunyuan_video15.config.VAEConfig:from_hf_config", "AutoencoderKLHunyuanVideo15"),
    ("ltx2.config.TransformerConfig:from_hf_config", "LTX2VideoTransformer3DModel"),
    ("ltx2.config.ConnectorsConfig:from_hf_config", "LTX2TextConnectors"),
    ("ltx2.config.VideoVAEConfig:from_hf_config", "AutoencoderKLLTX2Video"),
    ("ltx2.config.AudioVAEConfig:from_hf_config", "AutoencoderKLLTX2Audio"),
    ("ltx2.config.VocoderConfig:from_hf_config", "LTX2Vocoder"),
    ("ltx2.config.VocoderConfig:from_hf_config", "LTX2VocoderWithBWE"),
    ("ltx2.config.DiffusionDecoderConfig:from_hf_config", "LTX2VideoDiffusionDecoderModel"),
    ("ltx_video.config.TransformerConfig:from_hf_config", "LTXVideoTransformer3DModel"),
    ("ltx_video.config.VAEConfig:from_hf_config", "AutoencoderKLLTXVideo"),
    ("ltx_video.config.UpsamplerConfig:from_hf_config", "LTXLatentUpsamplerModel"),
    ("wan.config.WanTransformerConfig:from_hf_config", "WanTransformer3DModel"),
    ("wan_vae.WanVAEConfig:from_hf_config", "AutoencoderKLWan"),
]

TRANSFORMERS = [
    ("encoders.t5.T5Config:from_hf_config", "T5Config"),
    ("encoders.t5.T5Config:from_hf_config", "UMT5Config"),
    ("encoders.decoder.DecoderConfig:from_hf_config", "LlamaConfig"),
    ("encoders.decoder.DecoderConfig:from_hf_config", "Qwen2Config"),
    ("encoders.decoder.DecoderConfig:from_hf_config", "Qwen2_5_VLTextConfig"),
    ("encoders.decoder.DecoderConfig:from_hf_config", "Qwen2_5_VLConfig"),
    ("encoders.clip_text.CLIPTextConfig:from_hf_config", "CLIPTextConfig"),
    ("encoders.clip_text.CLIPTextConfig:from_hf_config", "CLIPConfig"),
    ("encoders.clip.clip_vision_config", "CLIPVisionConfig"),
    ("encoders.siglip.siglip_vision_config", "SiglipVisionConfig"),
    ("encoders.llava.LlavaConfig:from_hf_config", "LlavaConfig"),
    ("encoders.gemma.GemmaConfig:from_hf_config", "Gemma3TextConfig"),
    ("encoders.gemma.GemmaConfig:from_hf_config", "Gemma3Config"),
    ("encoders.gemma.GemmaConfig:from_hf_config", "Gemma4UnifiedTextConfig"),
    ("encoders.gemma.GemmaConfig:from_hf_config", "Gemma4UnifiedConfig"),
]


@pytest.mark.parametrize("reader, reference", DIFFUSERS, ids=[r for _, r in DIFFUSERS])
def test_reads_every_key_a_diffusers_class_writes(reader, reference):
    _reader(reader)(_diffusers_config(reference))


@pytest.mark.parametrize("reader, reference", TRANSFORMERS, ids=[r for _, r in TRANSFORMERS])
def test_reads_every_key_a_transformers_config_writes(reader, reference):
    _reader(reader)(_transformers_config(reference))


@pytest.mark.parametrize("reader, reference", DIFFUSERS[:1] + TRANSFORMERS[:1] + TRANSFORMERS[11:12],
                         ids=["diffusers", "transformers", "hand-read"])
def test_an_unknown_key_is_one_line_naming_every_such_key(reader, reference):
    config = _diffusers_config(reference) if reader.startswith(DIFFUSERS[0][0][:9]) else _transformers_config(reference)
    with pytest.raises(ConfigError) as raised:
        _reader(reader)({**config, "frobnicate": 1, "use_new_trick": True})
    message = str(raised.value)
    assert "\n" not in message
    assert "'frobnicate'" in message and "'use_new_trick'" in message
    assert reader.rpartition(".")[2].partition(":")[0] in message  # the class that refused it


def test_an_official_wan_config_is_as_strict():
    official = {"_class_name": "WanModel", "dim": 64, "num_heads": 2, "ffn_dim": 128, "num_layers": 1,
                "model_type": "t2v", "window_size": [-1, -1]}
    reader = _reader("wan.config.WanTransformerConfig:from_hf_config")
    assert reader(official).num_attention_heads == 2
    with pytest.raises(ConfigError, match="WanModel.*'frobnicate'"):
        reader({**official, "frobnicate": 1})


def test_a_reason_is_given_for_every_ignored_key():
    ignoring = [_reader(r.partition(":")[0]) for r, _ in DIFFUSERS + TRANSFORMERS if ":" in r]
    tables = [LIBRARY_BOOKKEEPING] + [getattr(c, "IGNORED", {}) for c in ignoring]
    assert all(isinstance(why, str) and len(why) > 10 for table in tables for why in table.values())


def test_renamed_and_read_keys_are_known():
    from vidax.zoo.hunyuan_video.config import VAEConfig

    picked = pick_fields(VAEConfig, {"time_compression_ratio": 4, "act_fn": "silu"},
                         {"time_compression_ratio": "temporal_compression_ratio"})
    assert picked == {"temporal_compression_ratio": 4, "act_fn": "silu"}
    with pytest.raises(ConfigError, match="'rope_scaling'"):
        pick_fields(VAEConfig, {"rope_scaling": None})
    assert pick_fields(VAEConfig, {"rope_scaling": None}, read=("rope_scaling",)) == {}
