"""The registry's LTX-2 entries build vidax configs offline (what the memory planner reads), at the
release sizes: LTX-2.0's DiT is the 19B model its name says (14B video + 5B audio streams)."""

from __future__ import annotations

import numpy as np
import pytest

from vidax.translator.registry import get_model, load_registry
from vidax.zoo.ltx2.config import (
    AudioVAEConfig,
    ConnectorsConfig,
    DiffusionDecoderConfig,
    TransformerConfig,
    VideoVAEConfig,
    VocoderConfig,
)
from vidax.zoo.ltx2.transformer import LTX2Transformer

BUILDERS = {"transformer": TransformerConfig, "connectors": ConnectorsConfig, "vae": VideoVAEConfig,
            "audio_vae": AudioVAEConfig, "vocoder": VocoderConfig, "diffusion_decoder": DiffusionDecoderConfig}


@pytest.mark.parametrize("name", ["ltx-2", "ltx-2.5"])
def test_registry_configs_build(name):
    model = get_model(name, load_registry())
    built = {c: BUILDERS[c].from_hf_config(cfg) for c, cfg in model.config.items() if c in BUILDERS}
    assert set(built) >= {"transformer", "connectors", "vae", "audio_vae", "vocoder"}
    assert model.settings["frames"] == 121 and (model.settings["height"], model.settings["width"]) == (704, 1216)
    assert built["vae"].spatial_ratio == 32 and built["vae"].temporal_ratio == 8


def test_ltx2_dit_is_19b():
    cfg = TransformerConfig.from_hf_config(get_model("ltx-2", load_registry()).config["transformer"])
    params = sum(int(np.prod(s)) for s in LTX2Transformer(cfg).param_shapes().values())
    assert 18.5e9 < params < 19.5e9, params


def test_official_config_names_map_to_the_diffusers_sizes():
    """ltx_core's metadata names (as in the single file's `config`) give the diffusers config's sizes."""
    official = {"transformer": dict(num_attention_heads=32, attention_head_dim=128, num_layers=48,
                                    cross_attention_dim=4096, positional_embedding_max_pos=[20, 2048, 2048],
                                    audio_num_attention_heads=32, audio_attention_head_dim=64,
                                    audio_cross_attention_dim=2048, av_ca_timestep_scale_multiplier=1000,
                                    rope_type="split", frequencies_precision="float64", caption_channels=3840)}
    mine = TransformerConfig.from_official_config(official)
    shipped = TransformerConfig.from_hf_config(get_model("ltx-2", load_registry()).config["transformer"])
    for field in ("inner_dim", "audio_inner_dim", "num_layers", "cross_attention_dim", "rope_type",
                  "rope_double_precision", "cross_attn_timestep_scale_multiplier", "pos_embed_max_pos"):
        assert getattr(mine, field) == getattr(shipped, field), field


def test_the_two_stage_preset_is_ltx2_with_two_stage_on():
    """`ltx-2-two-stage`: Lightricks' recommended chain with no flag, at ltx_pipelines' two-stage size (a multiple
    of 64, so stage 1 halves it to whole latents), stage 2's distilled LoRA the base's; `ltx-2` stays single-stage
    (diffusers' LTX2Pipeline), and `vidax-gen --list` names the preset."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app
    from vidax.zoo.ltx2.family import LTX2Settings

    registry = load_registry()
    preset, base = get_model("ltx-2-two-stage", registry), get_model("ltx-2", registry)
    assert (preset.alias_of, preset.family, preset.components) == ("ltx-2", "ltx2", base.components)
    s = LTX2Settings(**{**preset.settings, **preset.preset_settings})
    assert s.two_stage and (s.height, s.width) == (1024, 1536) and s.height % 64 == s.width % 64 == 0
    assert s.two_stage_lora == base.settings["two_stage_lora"] and (s.steps, s.frames) == (40, 121)
    assert not LTX2Settings(**base.settings).two_stage
    listed = CliRunner().invoke(app, ["--list"])
    assert listed.exit_code == 0 and "ltx-2-two-stage" in listed.output
