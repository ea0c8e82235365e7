"""CogVideoX, LTX-Video and Cosmos-Predict2.5 LoRAs merged by the translator against diffusers' loaders, weight by weight.

diffusers reads CogVideoX and Cosmos-Predict2.5 LoRAs in its own (PEFT) format only, and LTX-Video's in its own format or with the
original `diffusion_model.` prefix (stripped); the reference is `load_lora_weights` + `set_adapters` +
`fuse_lora` on a pipeline holding the tiny perturbed transformer. LTX-Video's official single file (keys under
`model.diffusion_model.`) and Cosmos' official `.pt` (`net.`, MiniTrainDIT names) take the same LoRAs.
"""

from __future__ import annotations

from pathlib import Path

import diffusers
import pytest
from safetensors.torch import save_file

from tests.lora.formats import low_rank_factors
from tests.lora.fused import assert_merged_close, diffusers_fused
from tests.oracle import save_state, state_of
from vidax.translator import convert
from vidax.translator.lora import LoraError, resolve_adapter

BLOCK = ("attn1.to_q", "attn1.to_v", "attn1.to_out.0", "attn2.to_k", "ff.net.0.proj", "ff.net.2")


def _write(path: Path, factors: dict, prefix: str) -> Path:
    save_file({f"{prefix}{m}.lora_{n}.weight": t for m, (a, b) in factors.items() for n, t in (("A", a), ("B", b))}, path)
    return path


@pytest.mark.parametrize("variant, spec", [("5b", "cogvideox/transformer"), ("15", "cogvideox/transformer15")])
def test_cogvideox_peft_lora_matches_diffusers(tmp_path, variant, spec):
    from tests.cogvideox.cogvideox_spec_fixtures import dit_reference

    model = dit_reference(variant)
    state = state_of(model)
    root = save_state(state, tmp_path / "base" / "transformer").parent
    names = ("attn1.to_q", "attn1.to_v", "attn1.to_out.0", "ff.net.0.proj", "ff.net.2")
    modules = [f"transformer_blocks.{i}.{m}" for i in range(2) for m in names] + ["proj_out", "transformer_blocks.1.norm1.linear"]
    path = _write(tmp_path / "cog.safetensors", low_rank_factors(state, modules, 4, 31), "transformer.")
    expected = diffusers_fused(diffusers.CogVideoXPipeline, model, tmp_path, spec, {"x": (path, 0.75)})
    base = convert(spec, root, dtype="float32")
    assert_merged_close(convert(spec, root, dtype="float32", loras=[resolve_adapter(f"{path}=0.75")]), expected, base)


@pytest.fixture(scope="module")
def ltx(tmp_path_factory):
    from tests.ltx_video.references.ltx_spec_fixtures import dit_reference, save_official_file

    root = tmp_path_factory.mktemp("ltx_lora")
    model = dit_reference(0)
    state = state_of(model)
    save_state(state, root / "diffusers" / "transformer", dict(model.config))
    save_official_file(root / "ltxv-tiny.safetensors", dit=model)
    return model, state, root


@pytest.mark.parametrize("prefix", ["transformer.", "diffusion_model."])
@pytest.mark.parametrize("base", ["diffusers", "ltxv-tiny.safetensors"])
def test_ltx_video_lora_matches_diffusers(ltx, tmp_path, prefix, base):
    model, state, root = ltx
    modules = [f"transformer_blocks.{i}.{m}" for i in range(2) for m in BLOCK] + ["proj_in", "time_embed.linear"]
    path = _write(tmp_path / "ltx.safetensors", low_rank_factors(state, modules, 4, 32), prefix)
    expected = diffusers_fused(diffusers.LTXPipeline, model, tmp_path, "ltx_video/transformer", {"x": (path, -1.1)})
    ours = convert("ltx_video/transformer", root / base, dtype="float32", loras=[resolve_adapter(f"{path}=-1.1")])
    assert_merged_close(ours, expected, convert("ltx_video/transformer", root / "diffusers", dtype="float32"))


def test_families_without_a_mapping_refuse_a_lora():
    from vidax.translator.lora import load_mapping

    with pytest.raises(LoraError, match=r"LoRAs are not supported for cosmos3/transformer yet"):
        load_mapping("cosmos3/transformer")


@pytest.mark.parametrize("base", ["diffusers", "official"])
def test_cosmos_peft_lora_matches_diffusers(tmp_path, base):
    from tests.cosmos.cosmos_spec_fixtures import dit_reference, save_official
    from tests.cosmos.reference import NoSafetyChecker
    from tests.tiny_references import wan_pipeline_vae

    model = dit_reference(0)
    state = state_of(model)
    save_state(state, tmp_path / "diffusers" / "transformer", dict(model.config))
    save_official(state, tmp_path / "official" / "base" / "post-trained" / "tiny_ema_bf16.pt")
    names = ("attn1.to_q", "attn1.to_out.0", "attn2.to_k", "ff.net.0.proj", "ff.net.2", "norm1.linear_1", "norm3.linear_2")
    modules = [f"transformer_blocks.{i}.{m}" for i in range(2) for m in names] + ["proj_out", "time_embed.t_embedder.linear_1"]
    path = _write(tmp_path / "cosmos.safetensors", low_rank_factors(state, modules, 4, 33), "transformer.")
    expected = diffusers_fused(diffusers.Cosmos2_5_PredictBasePipeline, model, tmp_path, "cosmos/transformer", {"x": (path, 0.6)},
                       safety_checker=NoSafetyChecker(), vae=wan_pipeline_vae())  # the pipeline reads the VAE's config
    ours = convert("cosmos/transformer", tmp_path / base, dtype="float32", loras=[resolve_adapter(f"{path}=0.6")])
    assert_merged_close(ours, expected, convert("cosmos/transformer", tmp_path / "diffusers", dtype="float32"))
