"""The official single-file layout: a tiny checkpoint written the way the Lightricks/LTX-Video files are
(DiT under `model.diffusion_model.`, VAE under `vae.`, the config as JSON in the safetensors header)
converts to exactly the tree of its diffusers twin, for the DiT and each VAE generation.

The official key names in ltx_spec_fixtures.py are proved against diffusers' own single-file converters
(`convert_ltx_transformer_checkpoint_to_diffusers`, `convert_ltx_vae_checkpoint_to_diffusers`): official
names -> diffusers' converter -> exactly the diffusers state dict.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from diffusers.loaders.single_file_utils import (
    convert_ltx_transformer_checkpoint_to_diffusers,
    convert_ltx_vae_checkpoint_to_diffusers,
)

from vidax.translator import AccountingError, convert, load_spec
from vidax.translator.fetch.sources import resolve
from vidax.zoo.ltx_video.config import (
    LTXConfigError,
    SchedulerConfig,
    TransformerConfig,
    VAEConfig,
    read_checkpoint_config,
)

from .references.ltx_spec_fixtures import (
    TINY_VAES,
    diffusers_config,
    dit_reference,
    official_dit_state,
    official_vae_state,
    save,
    save_official_file,
    vae_reference,
)


def _same_tensors(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_official_dit_names_are_diffusers_inverse():
    state = dit_reference().state_dict()
    official = {**official_dit_state(state), "vae.decoder.conv_in.conv.weight": torch.zeros(1)}
    _same_tensors(convert_ltx_transformer_checkpoint_to_diffusers(dict(official)), state)


@pytest.mark.parametrize("version", sorted(TINY_VAES))
def test_official_vae_names_are_diffusers_inverse(version):
    state = vae_reference(version).state_dict()
    official = official_vae_state(state, version)
    key = "vae.encoder.conv_out.conv.weight"
    real = official[key]
    if version == "0.9.5":  # diffusers tells 0.9.5 by this weight's 2048 input channels; the toy has fewer
        official[key] = torch.zeros(real.shape[0], 2048, *real.shape[2:])
    converted = convert_ltx_vae_checkpoint_to_diffusers(official)
    converted["encoder.conv_out.conv.weight"] = real
    _same_tensors(converted, state)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """One official file (DiT + 0.9.5 VAE) and the diffusers folders of the same weights."""
    root = tmp_path_factory.mktemp("ltx_twins")
    dit, vae = dit_reference(), vae_reference("0.9.5")
    save(dit.state_dict(), root / "diffusers" / "transformer", diffusers_config(dit, "LTXVideoTransformer3DModel"))
    save(vae.state_dict(), root / "diffusers" / "vae", diffusers_config(vae, "AutoencoderKLLTXVideo"))
    return dit, vae, save_official_file(root / "ltxv-tiny-0.9.8.safetensors", dit=dit, vae=vae), root / "diffusers"


@pytest.mark.parametrize("spec_name", ["ltx_video/transformer", "ltx_video/vae"])
def test_single_file_converts_to_its_diffusers_twin(twins, spec_name):
    _, _, official, folder = twins
    spec = load_spec(spec_name)
    ours, theirs = convert(spec, official), convert(spec, folder)
    assert resolve(spec, official).layout.name == "official" and resolve(spec, folder).layout.name == "diffusers"
    assert sorted(ours) == sorted(theirs)
    for path in ours:
        assert ours[path].dtype == theirs[path].dtype, path
        np.testing.assert_array_equal(ours[path], theirs[path], err_msg=path)


def test_header_config_reads_as_the_diffusers_configs(twins):
    dit, vae, official, _ = twins
    config = read_checkpoint_config(official)
    dit_cfg = TransformerConfig.from_official_config(config)
    assert dataclasses.replace(dit_cfg, causal_temporal_positioning=None) == TransformerConfig.from_hf_config(dict(dit.config))
    assert dit_cfg.causal_temporal_positioning is True
    vae_cfg = VAEConfig.from_official_config(config)
    ref_cfg = VAEConfig.from_hf_config(dict(vae.config))
    assert dataclasses.replace(vae_cfg, spatial_compression_ratio=32, temporal_compression_ratio=8) == ref_cfg
    # the 0.9.5+ official scheduler: linear-quadratic sigmas, no resolution-dependent shift
    assert SchedulerConfig.from_official_config(config) == SchedulerConfig(sampler="linear_quadratic", dynamic_shift=None,
                                                                           shift_terminal=None)


@pytest.mark.parametrize("version, layout", [("0.9.0", "official_090"), ("0.9.1", "official_091"), ("0.9.5", "official")])
def test_vae_generation_is_detected(tmp_path, version, layout):
    path = save_official_file(tmp_path / "ltxv-tiny.safetensors", vae=vae_reference(version), version=version)
    assert resolve(load_spec("ltx_video/vae"), path).layout.name == layout


def test_a_file_without_header_config_is_a_clear_error(tmp_path):
    path = save(dit_reference().state_dict(), tmp_path / "plain.safetensors")
    with pytest.raises(LTXConfigError, match="no `config` entry"):
        read_checkpoint_config(path)


def test_an_unmodelled_official_key_is_refused(tmp_path):
    """A module vidax does not model (e.g. a newer checkpoint's extra embedder) fails, naming the key."""
    from safetensors.torch import load_file

    path = save_official_file(tmp_path / "ltxv-tiny.safetensors", dit=dit_reference())
    state = load_file(path)
    state["model.diffusion_model.audio_embedder.weight"] = torch.zeros(2, 2)
    save(state, tmp_path / "ltxv-extra.safetensors")
    with pytest.raises(AccountingError, match="audio_embedder"):
        convert("ltx_video/transformer", tmp_path / "ltxv-extra.safetensors")
