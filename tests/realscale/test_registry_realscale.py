"""Every registry model at its real size, without a byte of weights.

For each model (each variant) and each of its registry layouts: every component's reference class
(diffusers / transformers) is built from the registry's own config on the meta device, its tensor table
written as a header-only safetensors set in the Hub layout (sparse files), and `convert_model(...,
check=True)` (what `vidax-convert --check` runs) must account for every tensor; each planned tree must
equal, path by path and shape by shape, the tree of the zoo module built from the same config. Official
layouts come from the spec fixtures' inverse key maps, checked against diffusers' single-file converters
where diffusers has one; they are written as one file per component and found by their keys.

This is what catches a registry config that differs from the released one (a learnable table the
checkpoint lacks, a wrong head count), a spec that misses a tensor only real checkpoints carry, and a
zoo module whose tree drifts from the reference's at sizes the tiny tests never build.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

from vidax.translator.models import convert_model
from vidax.translator.registry import get_model, load_registry
from vidax.translator.spec import load_spec

from .references import CONVERTERS, OFFICIAL, class_name, is_diffusers, meta_model, saved_state
from .sparse import table_of, write_header_only
from .zoo_trees import ZOO_TREES

# Components whose released config is not recorded in the registry, with the reason (conversion_specs/README.md
# "Real-scale coverage" names them too). Everything else must carry its config.
NO_REAL_CONFIG: dict[tuple[str, str], str] = {}
# (family, component, registry layout) -> the class that layout's repo holds when it differs from the config's
CLASS_BY_LAYOUT = {("hunyuan_video15", "text_encoder", "diffusers"): "Qwen2_5_VLTextModel"}
# (family, component, registry layout) -> the spec layout its files are in when the names differ
SPEC_LAYOUT = {("hunyuan_video15", "text_encoder_2", "official"): "glyph"}
# (spec, spec layout, reference class or None for any) with no key map to build the official file from, and why
NOT_BUILT = {
    ("encoders/t5", "glyph", None): "Glyph-SDXL-v2's byt5_model.pt (ModelScope): its keys are checked by the tiny fixtures",
    ("encoders/clip_vision", "official", None): "Wan's open-clip XLM-RoBERTa .pth holds a text tower no transformers "
                                                "class has: its keys are checked by the tiny fixtures",
    ("ltx2/vocoder", "official", "LTX2VocoderWithBWE"): "the BWE vocoder's single-file names are not known (the spec's "
                                                        "official layout is LTX-2.0's plain vocoder)",
}
NATIVE = ("diffusers", "transformers")  # spec layouts a reference class writes as it is
# official keys a diffusers single-file converter leaves unrenamed (its own load of such a file fails), and
# the names it would need: applied to the converter's output before comparing
CONVERTER_GAPS = {"wan/transformer": {"img_emb.emb_pos": "condition_embedder.image_embedder.pos_embed"}}  # FLF2V


def _layouts(entry) -> list[str]:
    """The registry's layouts, and `official` where only single files of it exist (LTX-2's release files:
    `vidax-convert ltx-2 --source ltx-2-19b-dev.safetensors`)."""
    specs = [load_spec(c.spec) for c in entry.all_components.values() if c.spec]
    single = ["official"] if "official" not in entry.repos and any("official" in s.layouts for s in specs) else []
    return list(entry.repos) + single


def _cases():
    for name, entry in load_registry().items():
        if entry.alias_of or entry.embedded:
            continue
        for variant in entry.choices or [None]:
            for layout in _layouts(entry):
                yield pytest.param(name, variant, layout, id="-".join(filter(None, (name, variant, layout))))


@functools.lru_cache(maxsize=None)
def _zoo_tree(spec: str, config_json: str) -> dict:
    return ZOO_TREES[spec](json.loads(config_json))


def _spec_layout(entry, component, layout: str) -> str | None:
    """The spec layout the component's files are in when the model's are in `layout` (None: a layout the
    registry does not have, which this component's spec has not either)."""
    names = load_spec(component.spec).layouts
    named = SPEC_LAYOUT.get((entry.family, component.name, layout), layout)
    if named in names:
        return named
    return next(n for n in NATIVE if n in names) if layout in entry.repos else None


def _state(entry, component, layout: str):
    config = entry.config[component.name]
    name = class_name(component.spec, config, CLASS_BY_LAYOUT.get((entry.family, component.name, layout)))
    return saved_state(meta_model(component.spec, config, name), name), name


def _official(spec: str, spec_layout: str, state: dict) -> dict:
    """The official file's tensors; through diffusers' converter, they must give back the diffusers ones."""
    official = OFFICIAL[(spec, spec_layout)](state)
    if spec in CONVERTERS:
        gaps = CONVERTER_GAPS.get(spec, {})
        back = {gaps.get(k, k): v for k, v in table_of(CONVERTERS[spec](dict(official))).items()}
        assert back == table_of(state), f"{spec}: the inverse key map disagrees with diffusers' converter: " \
            + _diff(back, table_of(state))
    return official


def _diff(got: dict, want: dict, limit: int = 12) -> str:
    lines = [f"missing {k} {want[k]}" for k in sorted(want.keys() - got.keys())]
    lines += [f"unexpected {k} {got[k]}" for k in sorted(got.keys() - want.keys())]
    lines += [f"{k}: {got[k]} != {want[k]}" for k in sorted(got.keys() & want.keys()) if got[k] != want[k]]
    return "; ".join(lines[:limit]) + (f" (+{len(lines) - limit} more)" if len(lines) > limit else "")


def _hub_path(component, layout: str, diffusers: bool) -> str:
    """Where the Hub layout keeps the component's weights: its own file name when the registry names one (a
    release among several at a repo's root), else `diffusion_pytorch_model` / `model.safetensors` in its
    folder (a pipeline repo's `<component>/` when the registry names none)."""
    own = component.files(layout)
    folder = component.folder(layout, local=True)
    if own:
        return "/".join(filter(None, (folder, own[0].replace("*", ""))))
    file = "diffusion_pytorch_model.safetensors" if diffusers else "model.safetensors"
    return f"{folder or component.name}/{file}"


def _write(entry, layout: str, root: Path) -> tuple[list[str], dict[str, Path]]:
    """The model's files in `layout`: (components in the model folder, component -> its official single file);
    NO_REAL_CONFIG and NOT_BUILT components are left out."""
    in_folder, single = [], {}
    for component in entry.components.values():
        if component.spec is None or (entry.name, component.name) in NO_REAL_CONFIG:
            continue
        spec_layout = _spec_layout(entry, component, layout)
        if spec_layout is None:
            continue
        state, name = _state(entry, component, layout)
        if {(component.spec, spec_layout, None), (component.spec, spec_layout, name)} & NOT_BUILT.keys():
            continue
        if spec_layout in NATIVE:
            write_header_only(table_of(state), root / "model" / _hub_path(component, layout, is_diffusers(name)))
            in_folder.append(component.name)
        else:
            official = _official(component.spec, spec_layout, state)
            single[component.name] = write_header_only(table_of(official), root / "files" / f"{component.name}.safetensors")
    return in_folder, single


def _check_trees(entry, trees: dict) -> None:
    problems = []
    for name, tree in trees.items():
        config = entry.config[name]
        want = _zoo_tree(entry.components[name].spec, json.dumps(config, sort_keys=True, default=list))
        if tree.shapes() != want:
            problems.append(f"{name}: {_diff(tree.shapes(), want)}")
    assert not problems, "planned trees differ from the zoo modules' own:\n" + "\n".join(problems)


@pytest.fixture
def folder(tmp_path):
    """A scratch folder whose sparse files (tens of GB apparent, no blocks) do not outlive the test."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("model, variant, layout", list(_cases()))
def test_registry_model_at_real_scale(model, variant, layout, folder):
    entry = get_model(model).select(variant) if variant else get_model(model)
    unrecorded = {(model, c) for c, comp in entry.components.items() if comp.spec and c not in entry.config}
    assert unrecorded <= NO_REAL_CONFIG.keys(), f"components without their released config: {sorted(unrecorded)}"
    in_folder, single = _write(entry, layout, folder)
    trees = {}
    if in_folder:
        result = convert_model(model, source=str(folder / "model"), layout=layout, components=tuple(in_folder),
                               variant=variant, check=True)
        trees.update(result.trees)
    for name, path in single.items():
        trees.update(convert_model(model, source=str(path), components=(name,), variant=variant, check=True).trees)
    assert set(trees) == set(in_folder) | set(single)
    _check_trees(entry, trees)


# --- aliases and presets: covered through their base model and their LoRAs ---------------------------------

LORA_RANK = 64  # lightx2v's distilled LoRAs' rank; any rank checks the same shapes of the base


def lora_table(spec: str, state: dict) -> dict:
    """A LoRA at the base DiT's real shapes, in the original-key format (`diffusion_model.` + the official
    names where the spec fixtures have the key map, else diffusers' under `transformer.`): every matrix a
    low-rank pair (`lora_down` / `lora_up`), every bias a `diff_b`, every norm scale a `diff`, every
    modulation table a `diff_m` (lightx2v's full deltas)."""
    official = (spec, "official") in OFFICIAL
    names, prefix = (OFFICIAL[(spec, "official")](state), "diffusion_model.") if official else (state, "transformer.")
    table = {}
    for key, (shape, code) in table_of(names).items():
        module, _, leaf = key.rpartition(".")
        if leaf == "modulation":
            table[f"{prefix}{module}.diff_m"] = (shape, code)
        elif leaf == "weight" and len(shape) == 2:
            table[f"{prefix}{module}.lora_down.weight"] = ((LORA_RANK, shape[1]), code)
            table[f"{prefix}{module}.lora_up.weight"] = ((shape[0], LORA_RANK), code)
        elif leaf == "bias" and len(shape) == 1:
            table[f"{prefix}{module}.diff_b"] = (shape, code)
        elif leaf == "weight" and len(shape) == 1:
            table[f"{prefix}{module}.diff"] = (shape, code)
    return table


def serve_lora(source: str, table: dict, cache: Path, monkeypatch) -> None:
    """A preset's Hub LoRA (`owner/name/file.safetensors`) as a header-only file in an offline Hub cache."""
    import huggingface_hub.constants

    owner, name, file = source.split("=")[0].split("/", 2)
    storage = cache / f"models--{owner}--{name}"
    write_header_only(table, storage / "snapshots" / ("0" * 40) / file)
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))


def _presets():
    for name, entry in load_registry().items():
        if entry.alias_of and entry.loras:
            for layout in _layouts(entry):
                yield pytest.param(name, layout, id=f"{name}-{layout}")


@pytest.mark.parametrize("model, layout", list(_presets()))
def test_preset_at_real_scale_with_its_loras(model, layout, folder, monkeypatch):
    """A preset (an alias: base model + LoRAs + settings) at real size: its base model's files as above and each
    of its LoRAs as a header-only file at the base's shapes, served under the preset's own Hub source; the
    conversion (`vidax-convert PRESET --check`) merges every LoRA tensor and plans the zoo module's tree."""
    entry = get_model(model)
    cache = folder / "hub"
    for option, texts in entry.loras.items():
        component = entry.components[{"lora": "transformer", "lora_2": "transformer_2"}[option]]
        state, _ = _state(entry, component, layout)
        for text in texts:
            serve_lora(text, lora_table(component.spec, state), cache, monkeypatch)
    in_folder, single = _write(entry, layout, folder / "base")
    denoisers = [c for c in ("transformer", "transformer_2") if c in entry.components]
    trees = {}
    if set(denoisers) & set(in_folder):
        trees.update(convert_model(model, source=str(folder / "base" / "model"), layout=layout,
                                   components=tuple(c for c in denoisers if c in in_folder), check=True).trees)
    for name in set(denoisers) & single.keys():
        trees.update(convert_model(model, source=str(single[name]), components=(name,), check=True).trees)
    assert set(trees) == set(denoisers)
    for option, texts in entry.loras.items():
        name = {"lora": "transformer", "lora_2": "transformer_2"}[option]
        records = trees[name].source.checkpoint.records
        lora = lora_table(entry.components[name].spec, _state(entry, entry.components[name], layout)[0])
        deltas = sum(k.endswith((".lora_down.weight", ".diff", ".diff_b", ".diff_m")) for k in lora)  # one per base tensor
        assert [(r["source"], r["applied"], r["ignored"]) for r in records] == [(t, deltas, []) for t in texts]
    _check_trees(entry, trees)


def coverage() -> dict[str, str]:
    """How this module covers each registry name at real size: a model by its own cases (each variant in each
    layout), an alias through its base model (and a preset's LoRAs through `test_preset_at_real_scale_with_its_loras`),
    the embedded model not at all (nothing to convert: tests/embedded runs it)."""
    registry, runs = load_registry(), [p.values[0] for p in _cases()]
    cases, presets = set(runs), {p.values[0] for p in _presets()}
    report = {}
    for name, entry in registry.items():
        if entry.embedded:
            report[name] = "nothing to convert (built locally; tests/embedded runs it)"
        elif entry.alias_of:
            base = f"`{entry.alias_of}`" + (f" (variant {entry.variant})" if entry.variant else "")
            loras = [t for texts in entry.loras.values() for t in texts]
            covered = entry.alias_of in cases and (not loras or name in presets)
            report[name] = (f"covered through its base model {base}" + (f" and its LoRAs ({', '.join(loras)})" if loras else "")
                            if covered else f"NOT covered (its base model {base} is not)")
        else:
            gaps = sorted(c for m, c in NO_REAL_CONFIG if m == name)
            report[name] = (f"covered: {runs.count(name)} case(s)" if name in cases else "NOT covered (no case)") \
                + (f"; not its {', '.join(gaps)} (NO_REAL_CONFIG)" if gaps else "")
    return report


def test_every_registry_name_is_covered():
    """Every name is covered by its own cases or, an alias, through its base model and LoRAs (`pytest -s`
    prints the report)."""
    report = coverage()
    print("\n" + "\n".join(f"{name}: {line}" for name, line in report.items()))
    assert not [name for name, line in report.items() if line.startswith("NOT")]
    assert report["wan2.1-t2v-14b-lightx2v-4step"] == (
        "covered through its base model `wan2.1-t2v-14b` and its LoRAs "
        "(lightx2v/Wan2.1-Distill-Loras/wan2.1_t2v_14b_lora_rank64_lightx2v_4step.safetensors)")
    assert report["ltx-2.5-distilled"] == "covered through its base model `ltx-2.5` (variant distilled)"


def test_exceptions_are_still_needed():
    """The lists of gaps above name only what exists (a stale entry would hide a new gap)."""
    registry = load_registry()
    docs = (Path(__file__).resolve().parents[2] / "conversion_specs" / "README.md").read_text()
    for model, component in NO_REAL_CONFIG:
        assert component in registry[model].components and component not in registry[model].config
        assert f"`{model}` `{component}`" in docs  # named in conversion_specs/README.md, "Real-scale coverage"
    specs = {(c.spec, layout) for e in registry.values() for c in e.all_components.values() if c.spec
             for layout in load_spec(c.spec).layouts}
    assert {(spec, layout) for spec, layout, _ in NOT_BUILT} <= specs


def test_header_only_files_hold_no_data(tmp_path):
    """The files these tests write are their headers and a hole: full size, no data blocks, readable."""
    from vidax.translator.formats.checkpoint import Checkpoint

    path = write_header_only({"w": ((8192, 8192), "BF16"), "b": ((8192,), "BF16")}, tmp_path / "x.safetensors")
    stat = path.stat()
    assert stat.st_size > 8192 * 8192 * 2 and stat.st_blocks * 512 < 1 << 20
    ckpt = Checkpoint([path])
    assert ckpt.info("w").shape == (8192, 8192) and ckpt.info("b").nbytes == 8192 * 2
