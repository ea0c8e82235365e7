"""HunyuanVideo 1.0 LoRAs merged by the translator against diffusers' loader, weight by weight, both layouts.

The official DiT fuses q/k/v (`img_attn_qkv`, `txt_attn_qkv`, the refiner's `self_attn_qkv`) and the single
blocks' q/k/v/MLP (`linear1`); diffusers splits them. A LoRA of the fused layer is split by rows over the
parts (as diffusers' converter does: one A, B cut into row blocks), and a LoRA of a part adds to its rows
of the fused layer. diffusers' converter hard-codes the 13B model's width (3072) for `linear1` and splits the
refiner's `self_attn_qkv` A as well as B, so those two are checked against a hand merge instead.
"""

from __future__ import annotations


import diffusers
import pytest
import torch
from safetensors.torch import save_file

from tests.hunyuan_video.hunyuan_video_spec_fixtures import dit_reference, save_official_dit
from tests.lora.formats import low_rank_factors
from tests.lora.fused import assert_merged_close, diffusers_fused
from tests.oracle import save_state, state_of
from vidax.translator import convert
from vidax.translator.lora import resolve_adapter

SPEC = "hunyuan_video/transformer"
FUSED_OFFICIAL = [f"double_blocks.{i}.{m}" for i in range(2) for m in ("img_attn_qkv", "txt_attn_qkv")]
PLAIN_OFFICIAL = [f"double_blocks.{i}.{m}" for i in range(2) for m in ("img_attn_proj", "img_mlp.fc1", "txt_mod.linear")] \
    + [f"single_blocks.{i}.{m}" for i in range(2) for m in ("linear2", "modulation.linear")] + ["final_layer.linear"]
SPLIT_DIFFUSERS = [f"transformer_blocks.0.attn.{m}" for m in ("to_q", "to_v", "add_k_proj")] \
    + [f"single_transformer_blocks.1.{m}" for m in ("attn.to_k", "proj_mlp")] + ["transformer_blocks.1.ff_context.net.2"]


def _official_shapes(state: dict) -> dict:
    """Weight shapes by official module name (fused layers included)."""
    from tests.hunyuan_video.hunyuan_video_spec_fixtures import official_dit_state

    return {k[: -len(".weight")]: v for k, v in official_dit_state(state).items() if k.endswith(".weight")}


@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory):
    root = tmp_path_factory.mktemp("hunyuan_lora")
    model = dit_reference(0)
    state = state_of(model)
    save_state(state, root / "diffusers" / "transformer", dict(model.config))
    save_official_dit(state, root / "official")
    return model, state, root


def _factors(weights: dict, modules: list[str], rank: int, seed: int) -> dict:
    return low_rank_factors({m + ".weight": weights[m] for m in modules}, modules, rank, seed)


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_original_keys_with_fused_qkv_match_diffusers(hunyuan, tmp_path, layout):
    model, state, root = hunyuan
    factors = _factors(_official_shapes(state), FUSED_OFFICIAL + PLAIN_OFFICIAL, rank=4, seed=21)
    tensors = {}
    for module, (a, b) in factors.items():
        tensors[f"diffusion_model.{module}.lora_A.weight"] = a
        tensors[f"diffusion_model.{module}.lora_B.weight"] = b
    path = tmp_path / "original.safetensors"
    save_file(tensors, path)
    expected = diffusers_fused(diffusers.HunyuanVideoPipeline, model, tmp_path, SPEC, {"x": (path, 0.9)})
    base = convert(SPEC, root / layout, dtype="float32")
    assert_merged_close(convert(SPEC, root / layout, dtype="float32", loras=[resolve_adapter(f"{path}=0.9")]), expected, base)


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_diffusers_keys_on_split_layers_match_diffusers(hunyuan, tmp_path, layout):
    """A PEFT LoRA of some of the split parts (q and v but not k, one MLP part): on the official base each
    adds to its rows of the fused layer."""
    model, state, root = hunyuan
    factors = _factors({k[: -len(".weight")]: v for k, v in state.items()}, SPLIT_DIFFUSERS, rank=2, seed=22)
    tensors = {f"transformer.{m}.lora_{n}.weight": t for m, (a, b) in factors.items() for n, t in (("A", a), ("B", b))}
    path = tmp_path / "peft.safetensors"
    save_file(tensors, path)
    expected = diffusers_fused(diffusers.HunyuanVideoPipeline, model, tmp_path, SPEC, {"x": (path, -0.6)})
    base = convert(SPEC, root / layout, dtype="float32")
    assert_merged_close(convert(SPEC, root / layout, dtype="float32", loras=[resolve_adapter(f"{path}=-0.6")]), expected, base)


def test_fused_linear1_and_refiner_qkv_match_a_hand_merge(hunyuan, tmp_path):
    """musubi-tuner's kohya names with alphas on the fused single-block `linear1` and refiner `self_attn_qkv`,
    and a `.diff_b` on `linear1`: merged into the official fused tensors by hand, vs vidax on either layout."""
    from tests.hunyuan_video.hunyuan_video_spec_fixtures import official_dit_state

    _, state, root = hunyuan
    official = official_dit_state(state)
    modules = ["single_blocks.0.linear1", "single_blocks.1.linear1", "txt_in.individual_token_refiner.blocks.1.self_attn_qkv"]
    factors = _factors(_official_shapes(state), modules, rank=4, seed=23)
    diff_b = torch.randn(official["single_blocks.1.linear1.bias"].shape, generator=torch.Generator().manual_seed(24)) * 0.1
    tensors = {"lora_unet_single_blocks_1_linear1.diff_b": diff_b}
    hand = {k: v.clone() for k, v in official.items()}
    for module, (a, b) in factors.items():
        name = "lora_unet_" + module.replace(".", "_")
        tensors.update({f"{name}.lora_down.weight": a, f"{name}.lora_up.weight": b, f"{name}.alpha": torch.tensor(8.0)})
        hand[module + ".weight"] += 1.5 * 8.0 / 4 * (b @ a)
    hand["single_blocks.1.linear1.bias"] += 1.5 * diff_b
    path = tmp_path / "musubi.safetensors"
    save_file(tensors, path)
    hand_root = tmp_path / "hand" / "transformers" / "mp_rank_00_model_states.pt"
    hand_root.parent.mkdir(parents=True)
    torch.save({"module": hand}, hand_root)
    expected = convert(SPEC, tmp_path / "hand", dtype="float32")
    base = convert(SPEC, root / "official", dtype="float32")
    for layout in ("diffusers", "official"):
        assert_merged_close(convert(SPEC, root / layout, dtype="float32", loras=[resolve_adapter(f"{path}=1.5")]), expected, base)


@pytest.mark.parametrize("layout", ["diffusers", "official"])
def test_a_converted_folder_takes_a_lora_in_its_target_layout(hunyuan, tmp_path, layout):
    """The fused and split layers' deltas carried through the spec's splits and stacks into a converted
    folder equal the merge done while converting."""
    from vidax.translator import convert_model
    from vidax.zoo.weights.source import WeightsSource

    _, state, root = hunyuan
    factors = _factors(_official_shapes(state), FUSED_OFFICIAL + ["single_blocks.1.linear1"], rank=4, seed=25)
    tensors = {f"diffusion_model.{m}.lora_{n}.weight": t for m, (a, b) in factors.items() for n, t in (("A", a), ("B", b))}
    path = tmp_path / "fused.safetensors"
    save_file(tensors, path)
    adapter = resolve_adapter(f"{path}=1.2")
    out = tmp_path / "converted"
    source = root / layout if layout == "diffusers" else root / layout / "transformers" / "mp_rank_00_model_states.pt"
    convert_model("hunyuanvideo", source=str(source), out=out, components=("transformer",), dtype="float32")
    ours = WeightsSource("converted", out).load("transformer", SPEC, loras=[adapter])
    expected = convert(SPEC, root / layout, dtype="float32", loras=[adapter])
    assert_merged_close(ours, expected, convert(SPEC, root / layout, dtype="float32"))
