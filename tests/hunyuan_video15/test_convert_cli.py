"""`vidax-convert hunyuanvideo-1.5 --source FOLDER` converts transformer and VAE from either layout."""

from __future__ import annotations

import shutil

import pytest

from vidax.cli.convert import ConvertOptions, run
from vidax.translator import load
from vidax.translator.testing import mismatches

from .hunyuan_spec_fixtures import transformer_cases, vae_cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    built = tmp_path_factory.mktemp("hv15_cli_cases")
    return {"transformer": transformer_cases(built / "t"), "vae": vae_cases(built / "v")}


@pytest.mark.parametrize("layout", ["official", "diffusers"])
def test_convert_model_folder(cases, layout, tmp_path):
    # Assemble the repo folder as it ships: official keeps the DiT under transformer/<variant>/.
    root = tmp_path / "repo"
    dit = next(c for c in cases["transformer"] if c.name == layout)
    vae = next(c for c in cases["vae"] if c.name == layout)
    dit_folder = root / ("transformer/480p_t2v" if layout == "official" else "transformer")
    dit_folder.mkdir(parents=True)
    dit_file = dit.source / ("" if layout == "official" else "transformer") / "diffusion_pytorch_model.safetensors"
    shutil.copy(dit_file, dit_folder)
    shutil.copytree(vae.source / "vae", root / "vae")

    assert run(ConvertOptions(model="hunyuanvideo-1.5", source=str(root), out=tmp_path / "out", dtype="float32")) == 0
    for component, case in (("transformer", dit), ("vae", vae)):
        assert mismatches(load(tmp_path / "out" / component), case.expected) == [], component
