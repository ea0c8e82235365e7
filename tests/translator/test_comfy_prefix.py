"""A plain (fp32 or bf16) single-file DiT saved with ComfyUI's `model.diffusion_model.` prefix reads in every
family, at every single-file entry point, to the same tree as the same file without the prefix (issue 51).

Per family: the spec fixtures' own tiny reference (a real perturbed diffusers model's state dict, in the layout
single files of that family are published in: the official keys, or diffusers' for families whose single
files carry those) saved once without and once with the prefix, converted through `convert` (the library),
`convert_model(source=FILE)` (`vidax-convert MODEL --source FILE`), `convert_model(transformer=FILE)`
(`vidax-convert --transformer FILE`) and a pipeline's `load_tree` (`vidax-gen --transformer FILE`); Wan2.2
A14B's `--transformer-2` on both CLIs; an fp8 file with scales under the prefix too. The tiny references are
built once per module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from vidax.translator import SourceError, convert, convert_model
from vidax.translator.formats.comfy_prefix import COMFY_PREFIX
from vidax.translator.testing import discover, mismatches

FIXTURES = discover(Path(__file__).resolve().parent.parent)

# spec -> (its fixture case whose checkpoint is re-saved, a registry model whose transformer reads that spec)
FAMILIES = {
    "wan/transformer": ("official-t2v", "wan2.1-t2v-1.3b"),
    "hunyuan_video/transformer": ("official", "hunyuanvideo"),
    "hunyuan_video15/transformer": ("official", "hunyuanvideo-1.5"),
    "ltx_video/transformer": ("official", "ltx-video-2b"),
    "ltx2/transformer": ("official-2.0", "ltx-2"),
    "cosmos/transformer": ("official", "cosmos-predict2.5-2b"),
    "cosmos3/transformer": ("nano", "cosmos3-nano"),
    "cogvideox/transformer": ("diffusers-2b", "cogvideox-2b"),
    "cogvideox/transformer15": ("diffusers-15_i2v", "cogvideox1.5-5b-i2v"),
}
# the wrappers a release puts around the DiT's own keys, which ComfyUI's files do not carry (LTX's single
# files: `model.diffusion_model.` beside `vae.`; Cosmos' `.pt`: `net.`)
WRAPPERS = (COMFY_PREFIX, "net.")


def _state(source: Path) -> dict[str, torch.Tensor]:
    """The DiT state dict a fixture saved (one safetensors file or a DeepSpeed / plain `.pt`), its own keys."""
    files = [source] if source.is_file() else sorted(
        p for p in source.rglob("*") if p.suffix in (".safetensors", ".pt") and p.is_file())
    assert len(files) == 1, files
    if files[0].suffix == ".pt":
        state = torch.load(files[0], map_location="cpu", weights_only=True)
        state = state.get("module", state)
    else:
        state = load_file(files[0])
    for wrapper in WRAPPERS:
        if any(k.startswith(wrapper) for k in state):
            state = {k[len(wrapper):]: v for k, v in state.items() if k.startswith(wrapper)}
    return state


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """`files(spec, dtype)`: (plain file, prefixed file, the case's expected tree), built once per spec and dtype."""
    built, cases = {}, {}

    def get(spec: str, dtype: str = "float32"):
        if (spec, dtype) not in built:
            if spec not in cases:
                name = FAMILIES[spec][0]
                found = {c.name: c for c in FIXTURES[spec](tmp_path_factory.mktemp(spec.replace("/", "-")))}
                cases[spec] = found[name]
            state = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v
                     for k, v in _state(cases[spec].source).items()}
            folder = tmp_path_factory.mktemp(f"{spec.replace('/', '-')}-{dtype}")
            plain, prefixed = folder / "plain" / "dit.safetensors", folder / "comfy" / "dit.safetensors"
            for path, keys in ((plain, ""), (prefixed, COMFY_PREFIX)):
                path.parent.mkdir()
                save_file({keys + k: v.contiguous() for k, v in state.items()}, path)
            built[spec, dtype] = plain, prefixed, cases[spec].expected
        return built[spec, dtype]

    return get


def _same(tree, want: dict) -> None:
    assert mismatches({p: np.asarray(tree[p]) for p in tree}, want) == []


@pytest.mark.parametrize("spec", list(FAMILIES))
def test_prefixed_file_converts_as_the_plain_one(files, spec):
    plain, prefixed, expected = files(spec)
    assert all(k.startswith(COMFY_PREFIX) for k in load_file(prefixed))
    _same(convert(spec, plain, dtype="float32"), expected)
    _same(convert(spec, prefixed, dtype="float32"), expected)


@pytest.mark.parametrize("spec", ["wan/transformer", "hunyuan_video15/transformer"])
def test_prefixed_bf16_file_converts_as_the_plain_one(files, spec):
    """bf16 keeps its bits: the spec's own dtype policy on both files, the same tree."""
    plain, prefixed, _ = files(spec, "bfloat16")
    want = convert(spec, plain)
    assert any(np.asarray(want[p]).dtype.name == "bfloat16" for p in want)
    _same(convert(spec, prefixed), dict(want))


@pytest.mark.parametrize("spec", list(FAMILIES))
def test_vidax_convert_source_file(files, spec):
    """`vidax-convert MODEL --source FILE`: the transformer is found in the prefixed file, the rest named."""
    _, prefixed, expected = files(spec)
    result = convert_model(FAMILIES[spec][1], source=str(prefixed), dtype="float32", check=True)
    assert "transformer" in result.trees and "transformer" not in result.skipped
    _same(result.trees["transformer"], expected)


@pytest.mark.parametrize("spec", list(FAMILIES))
def test_vidax_convert_transformer_file(files, spec):
    """`vidax-convert MODEL --transformer FILE`."""
    _, prefixed, expected = files(spec)
    result = convert_model(FAMILIES[spec][1], transformer=prefixed, components=("transformer",), dtype="float32",
                           check=True)
    _same(result.trees["transformer"], expected)


@pytest.mark.parametrize("spec", list(FAMILIES))
def test_vidax_gen_transformer_file(files, spec, tmp_path):
    """`vidax-gen MODEL --transformer FILE`: the family's own `load_tree` reads it (no --weights is read)."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    _, prefixed, expected = files(spec)
    model = FAMILIES[spec][1]
    options = GenerateOptions(model=model, prompt="x", weights=str(tmp_path / "nowhere"), transformer=prefixed)
    _same(make_pipeline(model, options).load_tree("transformer", spec, dtype="float32"), expected)


def test_second_expert_file_on_both_clis(files, tmp_path):
    """Wan2.2 A14B's `--transformer-2 FILE` in vidax-convert and vidax-gen."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    _, prefixed, expected = files("wan/transformer")
    model = "wan2.2-t2v-a14b"
    result = convert_model(model, transformer_2=prefixed, components=("transformer_2",), dtype="float32", check=True)
    _same(result.trees["transformer_2"], expected)
    options = GenerateOptions(model=model, prompt="x", weights=str(tmp_path / "nowhere"), transformer_2=prefixed)
    _same(make_pipeline(model, options).load_tree("transformer_2", "wan/transformer", dtype="float32"), expected)


def test_prefixed_eight_bit_file_converts_as_the_plain_one(files, tmp_path):
    """An fp8 file with scales (ComfyUI's current layout: F8 `.weight` + `.weight_scale`) reads the same with
    the prefix as without it: the scales are consumed first, then the prefix read."""
    plain, _, _ = files("wan/transformer")
    tensors = {}
    for key, value in load_file(plain).items():
        if key.endswith(".weight") and value.ndim == 2:
            scale = value.abs().amax().clamp(min=1e-8) / 448.0
            tensors[key] = (value / scale).to(torch.float8_e4m3fn)
            tensors[key[:-len(".weight")] + ".weight_scale"] = scale.reshape(())
        else:
            tensors[key] = value
    for name, prefix in (("plain", ""), ("comfy", COMFY_PREFIX)):
        save_file({prefix + k: v for k, v in tensors.items()}, tmp_path / f"{name}-fp8.safetensors")
    want = convert("wan/transformer", tmp_path / "plain-fp8.safetensors", dtype="float32")
    assert sum(k.endswith(".weight_scale") for k in tensors) >= 10
    _same(convert("wan/transformer", tmp_path / "comfy-fp8.safetensors", dtype="float32"), dict(want))


def test_prefixed_file_of_another_model_says_both_were_tried(files):
    """A prefixed file no layout reads, with or without the prefix, is still one line naming the spec."""
    _, prefixed, _ = files("cosmos/transformer")
    with pytest.raises(SourceError, match=r"no layout of spec wan/transformer match its keys .*"
                                          r"\(read with and without model\.diffusion_model\.\)"):
        convert("wan/transformer", prefixed)


def test_a_tensor_with_and_without_the_prefix_is_refused(files, tmp_path):
    from vidax.translator import FormatError

    plain, _, _ = files("wan/transformer")
    state = load_file(plain)
    key = next(iter(state))
    save_file({**{COMFY_PREFIX + k: v for k, v in state.items()}, key: state[key].clone()}, tmp_path / "twice.safetensors")
    with pytest.raises(FormatError, match=f"appears twice \\(with and without {COMFY_PREFIX}\\)"):
        convert("wan/transformer", tmp_path / "twice.safetensors")
