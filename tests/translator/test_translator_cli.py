"""vidax-convert end to end (subprocesses) and Hub sources through a huggingface_hub-shaped cache, offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import save_file

import wan_transformer_spec_fixtures as wan
from vidax.translator import SourceError, load, load_spec
from vidax.translator.fetch import sources
from vidax.translator.output import read_manifest
from vidax.translator.registry import get_model, load_registry
from vidax.translator.testing import make_hub_cache, mismatches

REPO = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    state = wan.reference_state_dict("t2v")
    local = wan.save_diffusers(state, tmp / "local")
    readme = tmp / "README.md"
    readme.write_text("not needed")
    files = {"transformer/diffusion_pytorch_model.safetensors": local / "transformer/diffusion_pytorch_model.safetensors",
             "transformer/config.json": local / "transformer/config.json", "README.md": readme}
    snapshot = make_hub_cache(tmp / "cache", REPO, files, COMMIT)
    return tmp / "cache", snapshot, local, wan.expected_tree(state)


def _cli(*args, cache: Path | None = None, cwd: Path | None = None):
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    if cache is not None:
        env["HF_HUB_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "vidax.cli.convert", *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_hub_repo_offline_from_cache_end_to_end(hub, tmp_path):
    cache, _, _, expected = hub
    out = tmp_path / "out"
    proc = _cli("wan2.1-t2v-1.3b", "--components", "transformer", "--out", str(out), "--dtype", "float32", cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert mismatches(load(out / "transformer"), expected) == []
    manifest = read_manifest(out / "transformer")
    assert manifest["source"]["repo"] == REPO and manifest["source"]["revision"] == COMMIT
    assert manifest["source"]["files"][0]["digest"].startswith("hub-blob:")
    assert manifest["spec_digest"] == load_spec("wan/transformer").digest
    again = _cli("wan2.1-t2v-1.3b", "--components", "transformer", "--out", str(out), "--dtype", "float32", cache=cache)
    assert again.returncode == 0 and "up to date" in again.stderr


def test_hub_download_asks_only_for_the_component_files(hub, monkeypatch):
    _, snapshot, _, _ = hub
    calls = []

    def fake_snapshot_download(repo, revision=None, allow_patterns=None):
        calls.append((repo, revision, allow_patterns))
        return str(snapshot)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    opened = sources.resolve(load_spec("wan/transformer"), REPO, revision="v1", layout="diffusers")
    assert calls == [(REPO, "v1", ["diffusion_pytorch_model*.safetensors", "diffusion_pytorch_model*.safetensors.index.json",
                                   "transformer/diffusion_pytorch_model*.safetensors",
                                   "transformer/diffusion_pytorch_model*.safetensors.index.json"])]
    assert opened.layout.name == "diffusers" and opened.revision == COMMIT
    calls.clear()
    sources.resolve(load_spec("wan/transformer"), REPO, subfolder="transformer", layout="diffusers")
    assert all(p.startswith("transformer/") for p in calls[0][2])


def test_hub_listing_picks_only_the_matching_glob(hub, monkeypatch):
    _, snapshot, _, _ = hub
    import huggingface_hub

    listing = ["transformer/diffusion_pytorch_model.safetensors", "transformer/config.json",
               "vae/diffusion_pytorch_model.safetensors", "text_encoder/model-00001-of-00005.safetensors"]
    calls = []
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo, revision=None: listing)
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo, revision=None, allow_patterns=None: calls.append(allow_patterns) or str(snapshot))
    assert sources.resolve(load_spec("wan/transformer"), REPO).layout.name == "diffusers"
    assert calls == [["transformer/diffusion_pytorch_model*.safetensors",
                      "transformer/diffusion_pytorch_model*.safetensors.index.json"]]
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo, revision=None: ["README.md"])
    with pytest.raises(SourceError, match="no files matching"):
        sources.resolve(load_spec("wan/transformer"), REPO)


def test_hub_repo_missing_from_offline_cache(hub):
    cache, _, _, _ = hub
    proc = _cli("wan2.1-t2v-14b", "--check", cache=cache)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: Wan-AI/Wan2.1-T2V-14B-Diffusers: not in the local Hugging Face cache")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_check_reports_coverage_without_writing(hub, tmp_path):
    _, _, local, _ = hub
    proc = _cli("wan2.1-t2v-1.3b", "--source", str(local), "--components", "transformer", "--check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "all accounted for" in proc.stderr and "diffusers layout" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,message", [
    (["wan2.1-t2v-1.3", "--check"], "error: unknown model 'wan2.1-t2v-1.3' (did you mean wan2.1-t2v-1.3b"),
    (["wan2.1-t2v-1.3b", "--source", "/nonexistent/folder", "--check"], "no such file or folder"),
    (["wan2.1-t2v-1.3b", "--components", "vea", "--check"], "has no component(s) vea"),
])
def test_user_errors_are_one_line(args, message):
    proc = _cli(*args)
    assert proc.returncode == 1
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_accounting_failure_is_one_line_and_debug_shows_traceback(tmp_path):
    state = wan.reference_state_dict("t2v")
    state["blocks.0.attn1.unexpected.weight"] = state["proj_out.weight"].clone()
    (tmp_path / "m").mkdir()
    save_file(state, tmp_path / "m" / "diffusion_pytorch_model.safetensors")
    proc = _cli("wan2.1-t2v-1.3b", "--source", str(tmp_path / "m"), "--components", "transformer", "--out", str(tmp_path / "o"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "accounting problem(s)" in proc.stderr and "blocks.0.attn1.unexpected.weight" in proc.stderr
    assert not (tmp_path / "o").exists()
    debug = _cli("wan2.1-t2v-1.3b", "--source", str(tmp_path / "m"), "--components", "transformer", "--debug", "--check")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "AccountingError" in debug.stderr


def test_list_shows_models_and_default_repos():
    proc = _cli("--list")
    assert proc.returncode == 0
    assert "wan2.1-t2v-1.3b" in proc.stdout and REPO in proc.stdout


def test_registry_entries_are_valid():
    registry = load_registry()
    assert {"wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.1-i2v-14b-480p", "wan2.1-i2v-14b-720p", "wan2.2-ti2v-5b",
            "wan2.2-t2v-a14b", "wan2.2-i2v-a14b"} <= registry.keys()
    a14b = get_model("wan2.2-t2v-a14b")
    assert a14b.components["transformer_2"].subfolder == {"diffusers": "transformer_2", "official": "low_noise_model"}
    assert set(a14b.components) == {"transformer", "transformer_2", "vae", "text_encoder"}
    assert get_model("wan2.1-i2v-14b-720p").components["image_encoder"].spec == "encoders/clip_vision"
    assert get_model("wan2.2-ti2v-5b").components["vae"].spec == "wan/vae22"
    for entry in registry.values():
        for component in (entry.all_components or entry.components).values():
            if component.spec is not None:  # files-only components (tokenizers) have none
                load_spec(component.spec)
    with pytest.raises(SourceError, match="unknown model 'nope'"):
        get_model("nope")


def test_two_expert_model_from_official_subfolders(tmp_path):
    states = {"high_noise_model": wan.reference_state_dict("t2v", seed=1), "low_noise_model": wan.reference_state_dict("t2v", seed=2)}
    for folder, state in states.items():
        wan.save_official(state, tmp_path / "repo" / folder)
    out = tmp_path / "out"
    proc = _cli("wan2.2-t2v-a14b", "--source", str(tmp_path / "repo"), "--components", "transformer,transformer_2",
                "--out", str(out), "--dtype", "float32")
    assert proc.returncode == 0, proc.stderr
    assert mismatches(load(out / "transformer"), wan.expected_tree(states["high_noise_model"])) == []
    assert mismatches(load(out / "transformer_2"), wan.expected_tree(states["low_noise_model"])) == []


@pytest.mark.parametrize("component, error", [
    ('{ spec = "wan/vae", subfolder = "vae", colour = "red" }', "unknown key(s) colour"),
    ('{ spec = "wan/nope" }', "missing spec 'wan/nope'"),
    ('{ spec = "wan/vae", subfolder = { mirror = "vae" } }', "table of known layouts"),
    ('{ spec = "wan/vae", hub_layout = { official = "mirror" } }', "hub_layout must name layouts"),
])
def test_registry_rejects_bad_components(tmp_path, component, error):
    from vidax.translator import SpecError

    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "models.toml").write_text(
        f'[models.m]\nrepos = {{ official = "o/m", diffusers = "d/m" }}\ncomponents.vae = {component}\n')
    with pytest.raises(SpecError, match=re.escape(error)):
        load_registry(tmp_path)


def test_registry_rejects_duplicate_models(tmp_path):
    from vidax.translator import SpecError

    for family in ("a", "b"):
        (tmp_path / family).mkdir()
        (tmp_path / family / "models.toml").write_text('[models.m]\nrepos = { d = "d/m" }\ncomponents.vae = { spec = "wan/vae" }\n')
    with pytest.raises(SpecError, match="already registered"):
        load_registry(tmp_path)
    (tmp_path / "b" / "models.toml").write_text('[models.n]\nrepos = { d = "d/m" }\ncomponents.vae = { spec = "wan/vae" }\n')
    assert set(load_registry(tmp_path)) == {"m", "n"}
    assert get_model("n", load_registry(tmp_path)).components["vae"].hub("d") == "d"


def test_gated_repo_says_what_to_do(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError as HubGated

    from vidax.translator.errors import GatedRepoError

    def gated(repo, revision=None, allow_patterns=None):
        error = HubGated.__new__(HubGated)  # its constructor wants an HTTP response (client varies)
        Exception.__init__(error, "401 Client Error. Cannot access gated repo")
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    with pytest.raises(GatedRepoError, match=r"black-forest-labs/FLUX.1-Redux-dev is gated: accept its terms .* HF_TOKEN"):
        sources.download("black-forest-labs/FLUX.1-Redux-dev", ["*.safetensors"])


def _fake_hub_api(monkeypatch, snapshot: Path, drop: str | None = None):
    """huggingface_hub's listing, header parser and small-file download over a local snapshot; any
    weight download fails the test. `drop`: a key the served headers leave out."""
    import huggingface_hub
    from huggingface_hub.utils import SafetensorsFileMetadata, TensorInfo

    from vidax.translator.dtypes import safetensors_code
    from vidax.translator.formats.safetensors_io import SafetensorsFile

    def parse(repo, filename, revision=None):
        local = SafetensorsFile(snapshot / filename)
        base = min(i.start for i in local.tensors.values())
        return SafetensorsFileMetadata(local.metadata, {
            k: TensorInfo(safetensors_code(i.dtype), list(i.shape), (i.start - base, i.end - base))
            for k, i in local.tensors.items() if k != drop})

    def no_download(*args, **kwargs):
        raise AssertionError("a --check on the Hub downloaded weights")

    listing = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo, revision=None: listing)
    monkeypatch.setattr(huggingface_hub, "parse_safetensors_file_metadata", parse)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, revision=None: str(snapshot / name))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)


@pytest.mark.parametrize("sharded", [False, True])
def test_check_on_the_hub_reads_only_headers(hub, tmp_path, monkeypatch, sharded):
    """`vidax-convert MODEL --check` plans and accounts from the safetensors headers (a few hundred KB per
    file) instead of downloading the weights; a shard index is followed; a missing tensor still fails."""
    from safetensors.numpy import save_file as save_numpy

    from vidax.translator.models import ConvertOptions, convert_model as run
    from vidax.translator import AccountingError, convert

    _, snapshot, _, expected = hub
    if sharded:  # the same tensors as two shards and an index, as large repos ship them
        whole = load_numpy(str(snapshot / "transformer" / "diffusion_pytorch_model.safetensors"))
        keys = sorted(whole)
        root = tmp_path / "sharded"
        (root / "transformer").mkdir(parents=True)
        weight_map = {}
        for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
            name = f"diffusion_pytorch_model-0000{i + 1}-of-00002.safetensors"
            save_numpy({k: np.ascontiguousarray(whole[k]) for k in part}, str(root / "transformer" / name))
            weight_map.update({k: name for k in part})
        (root / "transformer" / "diffusion_pytorch_model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map}))
        snapshot = root
    _fake_hub_api(monkeypatch, snapshot)
    tree = convert(load_spec("wan/transformer"), REPO, lazy=True, headers_only=True, dtype="float32")
    assert tree.shapes() == {p: a.shape for p, a in expected.items()}
    assert tree.source.origin == f"hf://{REPO} (headers only)" and len(tree.source.files) == (2 if sharded else 1)
    with pytest.raises(SourceError, match="only the checkpoint's headers"):
        tree[next(iter(tree))]
    run(ConvertOptions("wan2.1-t2v-1.3b", components=("transformer",), check=True))

    _fake_hub_api(monkeypatch, snapshot, drop=sorted(load_numpy(str(hub[1] / "transformer" / "diffusion_pytorch_model.safetensors")))[0])
    with pytest.raises(AccountingError):
        run(ConvertOptions("wan2.1-t2v-1.3b", components=("transformer",), check=True))
