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

from vidax.zoo.parts.configs import LIBRARY_BOOKKEEPING, ConfigError, pick_fields


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
    ("parts.wan_vae.WanVAEConfig:from_hf_config", "AutoencoderKLWan"),
]

TRANSFORMERS = [
    ("parts.encoders.t5.T5Config:from_hf_config", "T5Config"),
    ("parts.encoders.t5.T5Config:from_hf_config", "UMT5Config"),
    ("parts.encoders.decoder.DecoderConfig:from_hf_config", "LlamaConfig"),
    ("parts.encoders.decoder.DecoderConfig:from_hf_config", "Qwen2Config"),
    ("parts.encoders.decoder.DecoderConfig:from_hf_config", "Qwen2_5_VLTextConfig"),
    ("parts.encoders.decoder.DecoderConfig:from_hf_config", "Qwen2_5_VLConfig"),
    ("parts.encoders.clip_text.CLIPTextConfig:from_hf_config", "CLIPTextConfig"),
    ("parts.encoders.clip_text.CLIPTextConfig:from_hf_config", "CLIPConfig"),
    ("parts.encoders.clip.clip_vision_config", "CLIPVisionConfig"),
    ("parts.encoders.siglip.siglip_vision_config", "SiglipVisionConfig"),
    ("parts.encoders.llava.LlavaConfig:from_hf_config", "LlavaConfig"),
    ("parts.encoders.gemma.GemmaConfig:from_hf_config", "Gemma3TextConfig"),
    ("parts.encoders.gemma.GemmaConfig:from_hf_config", "Gemma3Config"),
    ("parts.encoders.gemma.GemmaConfig:from_hf_config", "Gemma4UnifiedTextConfig"),
    ("parts.encoders.gemma.GemmaConfig:from_hf_config", "Gemma4UnifiedConfig"),
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


# --- the official (non-diffusers) layouts' readers --------------------------------------------------------
# Their configs are no library's `save_config` of a class installed here, so the keys each official class
# writes are listed from its source: LTX-Video's `Transformer3DModel.__init__` (every release's arguments,
# `project_to_2d_pos` of 0.9.0 included), `CausalVideoAutoencoder.from_config`'s reads, `LatentUpsampler.config()`,
# `RectifiedFlowScheduler.__init__`; HunyuanVideo-1.5's `HunyuanVideo_1_5_DiffusionTransformer.__init__`
# (a `register_to_config` constructor, so its config.json is exactly these arguments).
OFFICIAL_ARGUMENTS = {
    "ltx_video.config.TransformerConfig": (
        "num_attention_heads attention_head_dim in_channels out_channels num_layers dropout norm_num_groups "
        "cross_attention_dim attention_bias num_vector_embeds activation_fn num_embeds_ada_norm use_linear_projection "
        "only_cross_attention double_self_attention upcast_attention adaptive_norm standardization_norm "
        "norm_elementwise_affine norm_eps attention_type caption_channels project_to_2d_pos use_tpu_flash_attention "
        "qk_norm positional_embedding_type positional_embedding_theta positional_embedding_max_pos "
        "timestep_scale_multiplier causal_temporal_positioning"),
    "ltx_video.config.VAEConfig": (
        "dims double_z latent_log_var use_quant_conv normalize_latent_channels in_channels latent_channels blocks "
        "encoder_blocks decoder_blocks patch_size norm_layer encoder_base_channels decoder_base_channels "
        "spatial_padding_mode out_channels causal_decoder timestep_conditioning scaling_factor"),
    "ltx_video.config.UpsamplerConfig": (
        "in_channels mid_channels num_blocks_per_stage dims spatial_upsample temporal_upsample"),
    "ltx_video.config.SchedulerConfig": (
        "num_train_timesteps shifting base_resolution target_shift_terminal sampler shift"),
    "hunyuan_video15.config.TransformerConfig": (
        "patch_size in_channels concat_condition out_channels hidden_size heads_num mlp_width_ratio mlp_act_type "
        "mm_double_blocks_depth mm_single_blocks_depth rope_dim_list qkv_bias qk_norm qk_norm_type guidance_embed "
        "use_meanflow text_projection use_attention_mask text_states_dim text_states_dim_2 text_pool_type rope_theta "
        "attn_mode attn_param glyph_byT5_v2 vision_projection vision_states_dim is_reshape_temporal_channels "
        "use_cond_type_embedding ideal_resolution ideal_task"),
}


@pytest.mark.parametrize("owner", OFFICIAL_ARGUMENTS)
def test_an_official_reader_accounts_for_every_key_its_class_writes(owner):
    cls = _reader(owner)
    ignored = getattr(cls, "OFFICIAL_IGNORED", {})
    assert set(OFFICIAL_ARGUMENTS[owner].split()) <= set(cls.OFFICIAL_KEYS) | set(ignored)
    assert set(ignored) <= set(OFFICIAL_ARGUMENTS[owner].split())  # no stale reason
    assert all(isinstance(why, str) and len(why) > 10 for why in getattr(cls, "OFFICIAL_IGNORED", {}).values())


def _ltx_official_configs() -> dict[str, tuple[str, dict]]:
    """The LTX-Video test fixtures' official header configs, reader -> (owner in the message, config)."""
    from types import SimpleNamespace

    from tests.ltx_video.references.ltx_spec_fixtures import (OFFICIAL_SCHEDULER, OFFICIAL_VAE_CONFIGS, official_dit_config,
                                                   official_upsampler_config)

    dit = SimpleNamespace(config=SimpleNamespace(attention_head_dim=8, caption_channels=16, cross_attention_dim=16,
                                                 in_channels=8, out_channels=8, num_attention_heads=2, num_layers=1))
    upsampler = SimpleNamespace(config=SimpleNamespace(in_channels=8, mid_channels=32, num_blocks_per_stage=1, dims=3,
                                                       spatial_upsample=True, temporal_upsample=False))
    out = {f"ltx_video.config.VAEConfig:from_official_config {v}": ("CausalVideoAutoencoder", c)
           for v, c in OFFICIAL_VAE_CONFIGS.items()}
    out["ltx_video.config.TransformerConfig:from_official_config"] = ("Transformer3DModel", official_dit_config(dit))
    out["ltx_video.config.UpsamplerConfig:from_official_config"] = (
        "LatentUpsampler", official_upsampler_config(upsampler))
    out["ltx_video.config.SchedulerConfig:from_official_config"] = ("RectifiedFlowScheduler", OFFICIAL_SCHEDULER)
    return out


HUNYUAN15_OFFICIAL = {"hidden_size": 2048, "heads_num": 16, "mm_double_blocks_depth": 54, "mm_single_blocks_depth": 0,
                      "mlp_width_ratio": 4.0, "patch_size": [1, 1, 1], "rope_dim_list": [16, 56, 56], "rope_theta": 256,
                      "text_states_dim": 3584, "text_states_dim_2": 1472, "use_meanflow": False,
                      "_class_name": "HunyuanVideo_1_5_DiffusionTransformer", "attn_mode": "flash",
                      "glyph_byT5_v2": True, "vision_projection": "linear", "ideal_resolution": "480p",
                      "ideal_task": "t2v"}


def _official_cases() -> list[tuple[str, str, dict]]:
    cases = [(reader, owner, config) for reader, (owner, config) in _ltx_official_configs().items()]
    return cases + [("hunyuan_video15.config.TransformerConfig:from_official_config",
                     "HunyuanVideo_1_5_DiffusionTransformer", HUNYUAN15_OFFICIAL)]


OFFICIAL_CASES = _official_cases()


@pytest.mark.parametrize("reader, owner, config", OFFICIAL_CASES, ids=[c[1] + c[0].partition(" ")[2]
                                                                      for c in OFFICIAL_CASES])
def test_an_official_reader_reads_its_fixture_and_refuses_an_unknown_key(reader, owner, config):
    read = _reader(reader.split(" ")[0])
    read(config)
    with pytest.raises(ConfigError) as raised:
        read({**config, "frobnicate": 1, "use_new_trick": True})
    message = str(raised.value)
    assert "\n" not in message and owner in message
    assert "'frobnicate'" in message and "'use_new_trick'" in message


def test_an_official_ltx_header_is_read_table_by_table():
    """The single file's header nests the tables; each reader checks only its own."""
    from tests.ltx_video.references.ltx_spec_fixtures import OFFICIAL_SCHEDULER, OFFICIAL_VAE_CONFIGS

    from vidax.zoo.ltx_video.config import SchedulerConfig, VAEConfig

    header = {"vae": OFFICIAL_VAE_CONFIGS["0.9.5"], "scheduler": OFFICIAL_SCHEDULER}
    assert VAEConfig.from_official_config(header).timestep_conditioning
    with pytest.raises(ConfigError, match="RectifiedFlowScheduler.*'frobnicate'"):
        SchedulerConfig.from_official_config({**header, "scheduler": {**OFFICIAL_SCHEDULER, "frobnicate": 1}})


def test_a_diffusers_ltx_scheduler_config_is_as_strict():
    from vidax.zoo.ltx_video.config import SchedulerConfig

    config = _diffusers_config("FlowMatchEulerDiscreteScheduler")
    assert SchedulerConfig.from_hf_config(config).sampler == "uniform"
    with pytest.raises(ConfigError, match="FlowMatchEulerDiscreteScheduler.*'frobnicate'"):
        SchedulerConfig.from_hf_config({**config, "frobnicate": 1})


@pytest.mark.parametrize("key", ["only_cross_attention", "double_self_attention"])
def test_an_official_ltx_attention_switch_that_changes_the_model_is_refused(key):
    from vidax.zoo.ltx_video.config import LTXConfigError

    reader = "ltx_video.config.TransformerConfig:from_official_config"
    _, config = _ltx_official_configs()[reader]
    assert _reader(reader)(config).num_layers == 1
    with pytest.raises(LTXConfigError, match=f"{key}=True"):
        _reader(reader)({**config, key: True})
