"""LTX-2 audio decoding against diffusers, through the real specs: the audio VAE decoder
(`AutoencoderKLLTX2Audio.decode`) and both vocoders (`LTX2Vocoder`, `LTX2VocoderWithBWE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.ltx2.decoding.audio import LTX2AudioVAE, LTX2Vocoder
from vidax.zoo.ltx2.config import AudioVAEConfig, VocoderConfig

from tests.oracle import unflatten

from .references.ltx2_spec_fixtures import TINY_AUDIO_VAE, TINY_VOCODER, audio_vae_reference, save_diffusers, vocoder_reference

ATOL = 2e-5  # fp32; observed ~1e-6


@pytest.mark.parametrize("variant", sorted(TINY_AUDIO_VAE))
def test_audio_vae_decode(variant, tmp_path):
    ref = audio_vae_reference(variant)
    save_diffusers(ref, tmp_path / "audio_vae")
    vae = LTX2AudioVAE(AudioVAEConfig.from_hf_config(dict(ref.config)))
    params = unflatten(convert(load_spec("ltx2/audio_vae"), tmp_path, vae.param_shapes(), dtype="float32"))
    np.testing.assert_array_equal(params["latents_mean"], ref.latents_mean.numpy())
    m = vae.cfg.mel_bins // 4
    z = torch.randn(2, vae.cfg.latent_channels, 5, m, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = ref.decode(z).sample.numpy()
    got = np.asarray(jax.jit(vae.decode)(params, jnp.asarray(z.numpy())))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("variant", sorted(TINY_VOCODER))
def test_vocoder(variant, tmp_path):
    ref = vocoder_reference(variant)
    save_diffusers(ref, tmp_path / "vocoder")
    voc = LTX2Vocoder(VocoderConfig.from_hf_config(dict(ref.config)))
    params = unflatten(convert(load_spec("ltx2/vocoder"), tmp_path, voc.param_shapes(), dtype="float32"))
    mel = torch.randn(2, 2, 6, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(mel).numpy()
    got = np.asarray(jax.jit(voc.__call__)(params, jnp.asarray(mel.numpy())))
    assert got.shape == want.shape
    assert voc.sample_rate == (48000 if variant == "bwe" else 24000)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-5)
