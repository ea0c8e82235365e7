"""LTX-2's official single-file config reader is as strict as the others: every key of the header's
`transformer` table is read, held at the one value ltx_core builds for, or ignored by name with a reason.

The fixture is the table as Lightricks' `ltx_core` (github.com/Lightricks/LTX-2, packages/ltx-core) defines
it, written here from that code: the keys `LTXModelConfigurator.from_metadata` reads with `config.get` (at
its defaults) and checks with `check_config_value` (at the value it requires), the caption projection's
keys (`create_caption_projection`), the text encoder's four caption-projection markers
(`_V2_EXPECTED_CONFIG`: present all together, LTX-2.3 and later), the connector configurators' keys, and
the keys the released headers carry that no ltx_core code reads.
"""

from __future__ import annotations

import pytest

from vidax.zoo.parts.configs import ConfigError
from vidax.zoo.ltx2.config import TransformerConfig

# `LTXModelConfigurator.from_metadata`: config.get(key, default)
READ_DEFAULTS = {
    "num_attention_heads": 32, "attention_head_dim": 128, "in_channels": 128, "out_channels": 128,
    "num_layers": 48, "cross_attention_dim": 4096, "norm_eps": 1e-06, "positional_embedding_theta": 10000.0,
    "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000,
    "use_middle_indices_grid": True, "audio_num_attention_heads": 32, "audio_attention_head_dim": 64,
    "audio_in_channels": 128, "audio_out_channels": 128, "audio_cross_attention_dim": 2048,
    "audio_positional_embedding_max_pos": [20], "av_ca_timestep_scale_multiplier": 1, "rope_type": "split",
    "frequencies_precision": "float64", "apply_gated_attention": False, "cross_attention_adaln": False,
    "use_prompt_adaln_single": True, "ff_bias": True, "audio_ff_bias": True,
    "use_keyframes_abs_pos_embedding": False,
    "caption_channels": 3840,  # create_caption_projection (the 19B checkpoints' DiT-side projection)
}
# `check_config_value(config, key, expected)`
CHECKED = {
    "dropout": 0.0, "attention_bias": True, "num_vector_embeds": None, "activation_fn": "gelu-approximate",
    "num_embeds_ada_norm": 1000, "use_linear_projection": False, "only_cross_attention": False,
    "cross_attention_norm": True, "double_self_attention": False, "upcast_attention": False,
    "standardization_norm": "rms_norm", "norm_elementwise_affine": False, "qk_norm": "rms_norm",
    "positional_embedding_type": "rope", "use_audio_video_cross_attention": True, "share_ff": False,
    "av_cross_ada_norm": True,
}
# the text encoder's `_V2_EXPECTED_CONFIG` (the caption projection moved before the connectors)
V2_MARKERS = {"caption_proj_before_connector": True, "caption_projection_first_linear": False,
              "caption_proj_input_norm": False, "caption_projection_second_linear": False}
# `Embeddings1DConnectorConfigurator` / `AudioEmbeddings1DConnectorConfigurator`: the same table
CONNECTORS = {
    "connector_positional_embedding_max_pos": [1], "connector_num_attention_heads": 30,
    "connector_attention_head_dim": 128, "connector_num_layers": 2, "connector_apply_gated_attention": False,
    "connector_ff_bias": True, "audio_connector_num_attention_heads": 30, "audio_connector_attention_head_dim": 128,
    "audio_connector_num_layers": 2,
}
# in the released headers, read by no ltx_core code
UNREAD = {
    "_class_name": "AVTransformer3DModel", "attention_type": "default", "norm_num_groups": 32,
    "causal_temporal_positioning": True, "use_embeddings_connector": True, "connector_num_learnable_registers": 128,
    "connector_norm_output": True, "connector_learnable_registers_std": 1, "text_encoder_norm_type": "per_token_rms",
}

LTX_2_0 = {**READ_DEFAULTS, **CHECKED, **CONNECTORS, **UNREAD}
LTX_2_3 = {**LTX_2_0, **V2_MARKERS, "apply_gated_attention": True, "cross_attention_adaln": True}


@pytest.mark.parametrize("table", [LTX_2_0, LTX_2_3], ids=["2.0", "2.3"])
def test_the_official_table_is_read(table):
    config = TransformerConfig.from_official_config({"transformer": table, "vae": {"frobnicate": 1}})
    assert config.inner_dim == 4096 and config.audio_inner_dim == 2048 and config.num_layers == 48
    assert config.use_prompt_embeddings == ("caption_proj_before_connector" not in table)
    assert config.gated_attn == table["apply_gated_attention"] and config.rope_double_precision


def test_every_key_is_accounted_for_and_no_reason_is_stale():
    cls = TransformerConfig
    known = set(cls.OFFICIAL_KEYS) | set(cls.OFFICIAL_FIXED) | set(cls.OFFICIAL_IGNORED) | {"_class_name"}
    assert set(LTX_2_3) == known
    assert {k: v for k, v in LTX_2_3.items() if k in cls.OFFICIAL_FIXED} == dict(cls.OFFICIAL_FIXED)
    assert all(isinstance(why, str) and len(why) > 10 for why in cls.OFFICIAL_IGNORED.values())


def test_an_unknown_key_is_one_line_naming_it():
    with pytest.raises(ConfigError) as raised:
        TransformerConfig.from_official_config({"transformer": {**LTX_2_3, "frobnicate": 1}})
    message = str(raised.value)
    assert "\n" not in message and "'frobnicate'" in message and "LTXModel (AVTransformer3DModel)" in message


@pytest.mark.parametrize("key, value", [("share_ff", True), ("dropout", 0.1), ("caption_proj_input_norm", True)])
def test_a_value_ltx_core_does_not_build_is_refused(key, value):
    with pytest.raises(ConfigError, match=f"official {key}={value!r} is not supported"):
        TransformerConfig.from_official_config({"transformer": {**LTX_2_3, key: value}})
