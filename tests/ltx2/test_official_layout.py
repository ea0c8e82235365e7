"""The official single-file key names the specs read are the ones diffusers' own single-file converters
turn back into the diffusers checkpoint (LTX-2.0 transformer, video VAE, audio VAE): the test
checkpoints' official layouts (ltx2_spec_fixtures) round-trip exactly through them."""

from __future__ import annotations

import torch
from diffusers.loaders.single_file_utils import (
    convert_ltx2_audio_vae_to_diffusers,
    convert_ltx2_transformer_to_diffusers,
    convert_ltx2_vae_to_diffusers,
)

from .references.ltx2_spec_fixtures import (
    audio_vae_reference,
    dit_reference,
    official_dit_state,
    official_vae_state,
    state_of,
    vae_reference,
)


def assert_same(converted: dict, state: dict):
    assert sorted(converted) == sorted(state)
    for key, value in state.items():
        assert torch.equal(converted[key], value), key


def test_transformer_round_trip():
    state = state_of(dit_reference("2.0"))
    official = official_dit_state(state)
    official["model.diffusion_model.video_embeddings_connector.learnable_registers"] = torch.zeros(1)  # dropped
    assert_same(convert_ltx2_transformer_to_diffusers(official), state)


def test_video_vae_round_trip():
    state = state_of(vae_reference())
    official = {k: v for k, v in official_vae_state(state).items()}
    assert_same(convert_ltx2_vae_to_diffusers(official), state)


def test_audio_vae_round_trip():
    state = state_of(audio_vae_reference())
    names = {"latents_mean": "mean-of-means", "latents_std": "std-of-means"}
    official = {(f"audio_vae.per_channel_statistics.{names[k]}" if k in names else "audio_vae." + k): v
                for k, v in state.items()}
    assert_same(convert_ltx2_audio_vae_to_diffusers(official), state)
