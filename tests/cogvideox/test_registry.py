"""The CogVideoX registry entries: native settings, the released configs (every leaf of our trees has
diffusers' shape for them, on the meta device), the reference's sampler choice, and the SAT repo's
folders (zai-org/CogVideoX1.5-5B-SAT) converting through each component's spec and subfolder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vidax.translator import convert, load_spec
from vidax.translator.registry import get_model
from vidax.zoo.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig
from vidax.zoo.cogvideox.latents import reference_scheduler_config
from vidax.zoo.cogvideox.transformer import CogVideoXTransformer
from vidax.zoo.cogvideox.vae import CogVideoXVAE
from vidax.zoo.parts.encoders.t5 import T5Config
from vidax.zoo.samplers import DDIM, CogVideoXDPM, stepper_from_config

from tests.oracle import state_of

from . import cogvideox_spec_fixtures as fx

NAMES = ["cogvideox-2b", "cogvideox-5b", "cogvideox-5b-i2v", "cogvideox1.5-5b", "cogvideox1.5-5b-i2v"]
NATIVE = {  # (height, width, frames, fps, sampler, dynamic CFG): THUDM/CogVideo inference/cli_demo.py
    "cogvideox-2b": (480, 720, 49, 8, DDIM, False),
    "cogvideox-5b": (480, 720, 49, 8, CogVideoXDPM, True),
    "cogvideox-5b-i2v": (480, 720, 49, 8, CogVideoXDPM, True),
    "cogvideox1.5-5b": (768, 1360, 81, 16, CogVideoXDPM, True),
    "cogvideox1.5-5b-i2v": (768, 1360, 81, 16, CogVideoXDPM, True),
}


@pytest.mark.parametrize("name", NAMES)
def test_settings_and_scheduler(name, tmp_path, monkeypatch):
    """The native settings as `vidax-gen NAME` resolves them before any download (registry only)."""
    from vidax.zoo.cogvideox.family import SAMPLERS
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty"))
    entry = get_model(name)
    options = GenerateOptions(model=name, prompt="")
    family = make_pipeline(name, options)
    s = family.resolve_settings(options)
    height, width, frames, fps, sampler, dynamic = NATIVE[name]
    assert (s.height, s.width, s.frames, s.fps, s.steps, s.guidance) == (height, width, frames, fps, 50, 6.0)
    assert s.dynamic_cfg is dynamic and s.max_sequence_length == 226 and s.vae_tiling
    assert isinstance(family.stepper(s, family.latent_shape(s)), sampler)
    config = reference_scheduler_config(entry.config["scheduler"], SAMPLERS[s.sampler])
    stepper = stepper_from_config(config, s.steps)
    assert isinstance(stepper, sampler) and stepper.timesteps[0] == 999  # trailing spacing


@pytest.mark.parametrize("name", NAMES)
def test_released_configs_give_diffusers_shapes(name):
    """The planner's sizes: every leaf of the DiT and VAE trees for the released configs equals
    diffusers' (meta-device models of the same config, no memory)."""
    from diffusers import AutoencoderKLCogVideoX, CogVideoXTransformer3DModel

    entry = get_model(name)
    with torch.device("meta"):
        dit = CogVideoXTransformer3DModel(**entry.config["transformer"])
        vae = AutoencoderKLCogVideoX(**entry.config["vae"])
    model = CogVideoXTransformer(CogVideoXTransformerConfig.from_hf_config(entry.config["transformer"]))
    assert fx.expected_dit_shapes({k: tuple(v.shape) for k, v in dit.state_dict().items()}) == model.param_shapes()
    ours = CogVideoXVAE(CogVideoXVAEConfig.from_hf_config(entry.config["vae"])).param_shapes()
    assert fx.expected_vae_shapes({k: tuple(v.shape) for k, v in vae.state_dict().items()}) == ours
    assert T5Config.from_hf_config(entry.config["text_encoder"]).d_model == dit.config.text_embed_dim


def test_sat_repo_folders_convert(tmp_path):
    """zai-org/CogVideoX1.5-5B-SAT as the registry reads it: transformer_i2v/1000/..., vae/3d-vae.pt."""
    entry = get_model("cogvideox1.5-5b-i2v")
    dit, vae = fx.dit_reference("15_i2v"), fx.vae_reference()
    fx.save_sat(state_of(dit), tmp_path, "i2v")
    fx.save_sat_vae(state_of(vae), tmp_path)
    for component, expected in (("transformer", fx.expected_dit_tree(state_of(dit))),
                                ("vae", fx.expected_vae_tree(state_of(vae)))):
        comp = entry.components[component]
        tree = convert(load_spec(comp.spec), tmp_path, subfolder=comp.subfolder["sat"], dtype="float32")
        assert tree.keys() == expected.keys()
        for path, value in expected.items():
            np.testing.assert_array_equal(tree[path], value, err_msg=path)


# `model.network_config.params` of THUDM/CogVideo's SAT configs (sat/configs/*.yaml), the entries
# `CogVideoXTransformerConfig.from_sat_config` reads (the rest of each file is training setup).
SAT_CONFIGS = {
    "cogvideox-5b-i2v": dict(  # cogvideox_5b_i2v.yaml
        time_embed_dim=512, num_frames=49, latent_width=90, latent_height=60, num_layers=42, patch_size=2,
        in_channels=32, out_channels=16, hidden_size=3072, num_attention_heads=48,
        modules=dict(pos_embed_config=dict(target="dit_video_concat.Rotary3DPositionEmbeddingMixin",
                                           params=dict(learnable_pos_embed=True, hidden_size_head=64, text_length=226)),
                     patch_embed_config=dict(params=dict(text_hidden_size=4096)))),
    "cogvideox1.5-5b-i2v": dict(  # cogvideox1.5_5b_i2v.yaml
        ofs_embed_dim=512, time_embed_dim=512, num_frames=81, latent_width=300, latent_height=300, num_layers=42,
        patch_size=[2, 2, 2], in_channels=32, out_channels=16, hidden_size=3072, num_attention_heads=48,
        modules=dict(pos_embed_config=dict(target="dit_video_concat.Rotary3DPositionEmbeddingMixin",
                                           params=dict(hidden_size_head=64, text_length=224)),
                     patch_embed_config=dict(params=dict(text_hidden_size=4096)))),
    "cogvideox-2b": dict(  # cogvideox_2b.yaml
        time_embed_dim=512, num_frames=49, latent_width=90, latent_height=60, num_layers=30, patch_size=2,
        in_channels=16, out_channels=16, hidden_size=1920, num_attention_heads=30,
        modules=dict(pos_embed_config=dict(target="dit_video_concat.Basic3DPositionEmbeddingMixin",
                                           params=dict(text_length=226, height_interpolation=1.875,
                                                       width_interpolation=1.875)),
                     patch_embed_config=dict(params=dict(text_hidden_size=4096)))),
}


@pytest.mark.parametrize("name", sorted(SAT_CONFIGS))
def test_sat_configs_read_as_the_released_configs(name):
    released = CogVideoXTransformerConfig.from_hf_config(get_model(name).config["transformer"])
    assert CogVideoXTransformerConfig.from_sat_config(SAT_CONFIGS[name]) == released
