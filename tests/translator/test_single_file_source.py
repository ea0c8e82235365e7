"""`vidax-convert MODEL --source FILE` (and a folder holding that one file): the file's layout is found
from its keys before any component subfolder would be appended; the components it holds are converted,
the others (text encoders, tokenizers, configs: not in a checkpoint file) are named with the command that
adds them. One case per family that publishes single files: LTX-2 / LTX-2.5, HunyuanVideo `.pt`, CogVideoX
SAT, Cosmos-Predict2.5 `.pt`, Wan. The tiny files are the spec fixtures' own official cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.numpy import load_file, save_file

from vidax.translator import SourceError
from vidax.translator.models import ConversionHooks, convert_model
from vidax.translator.testing import discover, mismatches

FIXTURES = discover(Path(__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """`case(spec, name)`: one official test checkpoint of a spec (its file and expected tree)."""
    built = {}

    def get(spec: str, name: str):
        if spec not in built:
            built[spec] = {c.name: c for c in FIXTURES[spec](tmp_path_factory.mktemp(spec.replace("/", "-")))}
        return built[spec][name]

    return get


def _file(source: Path, pattern: str) -> Path:
    return source if source.is_file() else next(source.rglob(pattern))


def _merged(parts, target: Path) -> Path:
    """One safetensors file holding several components' official keys (LTX-2's single-file release)."""
    tensors = {}
    for path in parts:
        tensors.update(load_file(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, target)
    return target


class Notes(ConversionHooks):
    def __init__(self):
        self.lines = []

    def done(self, component, message):
        self.lines.append(f"{component}: {message}")


def _converted(model, source, expected: dict, tmp_path, **options):
    """convert_model from `source`; every expected component's tree equals its fixture's."""
    hooks = Notes()
    result = convert_model(model, source=str(source), out=tmp_path / "out", dtype="float32", hooks=hooks, **options)
    assert set(result.trees) == set(expected)
    for name, want in expected.items():
        tree = result.trees[name]
        assert mismatches({p: tree[p] for p in tree}, want) == [], name
    return result, hooks.lines


LTX2_PARTS = {"transformer": ("ltx2/transformer", "official-2.0"), "connectors": ("ltx2/connectors", "official-2.0"),
              "vae": ("ltx2/vae", "official-plain"), "audio_vae": ("ltx2/audio_vae", "official-release"),
              "vocoder": ("ltx2/vocoder", "official-plain")}


@pytest.mark.parametrize("where", ["file", "folder"])
def test_ltx2_release_file(case, tmp_path, where):
    """`vidax-convert ltx-2 --source ltx-2-19b-dev.safetensors`, the command models.toml documents."""
    cases = {name: case(*spec_case) for name, spec_case in LTX2_PARTS.items()}
    single = _merged([_file(c.source, "*.safetensors") for c in cases.values()], tmp_path / "dl" / "ltx-2-19b-dev.safetensors")
    source = single if where == "file" else single.parent
    result, notes = _converted("ltx-2", source, {n: c.expected for n, c in cases.items()}, tmp_path)
    assert result.skipped == ["text_encoder", "tokenizer", "scheduler"]
    assert any("vidax-convert ltx-2 --components text_encoder,tokenizer,scheduler" in line for line in notes)
    record = json.loads((tmp_path / "out" / "vidax_model.json").read_text())
    assert record["component_layouts"] == dict.fromkeys(LTX2_PARTS, "official")


def test_ltx25_transformer_file(case, tmp_path):
    """LTX-2.5's dev transformer is the official repo's diffusion_models/ file (models.toml)."""
    dit = case("ltx2/transformer", "official-2.5")
    result, _ = _converted("ltx-2.5", _file(dit.source, "*.safetensors"), {"transformer": dit.expected}, tmp_path)
    assert "text_encoder" in result.skipped and "vae" in result.skipped


@pytest.mark.parametrize("where", ["file", "folder"])
def test_hunyuan_video_pt(case, tmp_path, where):
    """hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt, alone or in its folder."""
    dit = case("hunyuan_video/transformer", "official")
    pt = _file(dit.source, "mp_rank_00_model_states.pt")
    _converted("hunyuanvideo", pt if where == "file" else pt.parent, {"transformer": dit.expected}, tmp_path)


def test_hunyuan_video_vae_pt(case, tmp_path):
    vae = case("hunyuan_video/vae", "official")
    _converted("hunyuanvideo", _file(vae.source, "pytorch_model.pt"), {"vae": vae.expected}, tmp_path)


@pytest.mark.parametrize("where", ["file", "folder"])
def test_cogvideox_sat_pt(case, tmp_path, where):
    """zai-org/CogVideoX1.5-5B-SAT's transformer_i2v/1000/mp_rank_00_model_states.pt."""
    dit = case("cogvideox/transformer15", "sat-15_i2v")
    pt = _file(dit.source, "mp_rank_00_model_states.pt")
    _converted("cogvideox1.5-5b-i2v", pt if where == "file" else pt.parent, {"transformer": dit.expected}, tmp_path)


def test_cogvideox_sat_vae_pt(case, tmp_path):
    vae = case("cogvideox/vae", "sat")
    _converted("cogvideox1.5-5b", _file(vae.source, "3d-vae.pt"), {"vae": vae.expected}, tmp_path)


@pytest.mark.parametrize("where", ["file", "folder"])
def test_cosmos_pt(case, tmp_path, where):
    """base/post-trained/<uuid>_ema_bf16.pt of nvidia/Cosmos-Predict2.5-2B."""
    dit = case("cosmos/transformer", "official")
    pt = _file(dit.source, "*_ema_bf16.pt")
    result, _ = _converted("cosmos-predict2.5-2b", pt if where == "file" else pt.parent, {"transformer": dit.expected},
                           tmp_path)
    assert {"vae", "text_encoder", "tokenizer"} <= set(result.skipped)


def test_wan_dit_file(case, tmp_path):
    dit = case("wan/transformer", "official-t2v")
    renamed = tmp_path / "dl" / "wan2.1_t2v_1.3B_fp32.safetensors"  # any name: a file is found by its keys
    renamed.parent.mkdir()
    shutil.copyfile(_file(dit.source, "*.safetensors"), renamed)
    result, _ = _converted("wan2.1-t2v-1.3b", renamed, {"transformer": dit.expected}, tmp_path)
    assert result.skipped == ["vae", "text_encoder"]


def test_wan_vae_file(case, tmp_path):
    vae = case("wan/vae", "official")
    _converted("wan2.1-t2v-1.3b", _file(vae.source, "Wan2.1_VAE.pth"), {"vae": vae.expected}, tmp_path)


def test_one_file_for_two_experts_is_ambiguous(case, tmp_path):
    """Wan2.2 A14B has two transformers: one DiT file is one of them, which the user names."""
    dit = case("wan/transformer", "official-t2v")
    single = _file(dit.source, "*.safetensors")
    with pytest.raises(SourceError, match=r"several \(transformer, transformer_2\): name the one it is with --components"):
        convert_model("wan2.2-t2v-a14b", source=str(single), check=True)
    _converted("wan2.2-t2v-a14b", single, {"transformer_2": dit.expected}, tmp_path, components=("transformer_2",))


def test_file_holding_no_component_is_one_error(case, tmp_path):
    vae = case("wan/vae", "official")
    with pytest.raises(SourceError, match="no component of ltx-2 found in it"):
        convert_model("ltx-2", source=str(_file(vae.source, "Wan2.1_VAE.pth")), check=True)


def test_named_component_missing_from_the_file_fails(case, tmp_path):
    dit = case("wan/transformer", "official-t2v")
    with pytest.raises(SourceError, match="no layout of spec wan/vae"):
        convert_model("wan2.1-t2v-1.3b", source=str(_file(dit.source, "*.safetensors")), components=("vae",), check=True)


def test_components_added_later_keep_the_record(case, tmp_path):
    """The note's command (`--components ... --out` the same folder) adds to vidax_model.json."""
    dit, vae = case("wan/transformer", "official-t2v"), case("wan/vae", "official")
    _converted("wan2.1-t2v-1.3b", _file(dit.source, "*.safetensors"), {"transformer": dit.expected}, tmp_path)
    _converted("wan2.1-t2v-1.3b", _file(vae.source, "Wan2.1_VAE.pth"), {"vae": vae.expected}, tmp_path)
    record = json.loads((tmp_path / "out" / "vidax_model.json").read_text())
    assert record["component_layouts"] == {"transformer": "official", "vae": "official"}
