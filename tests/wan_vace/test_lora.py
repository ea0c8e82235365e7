"""LoRAs on Wan VACE merged by the translator against diffusers' own loader (`WanVACEPipeline`'s), weight by weight.

A LoRA of the main blocks (the usual Wan DiT LoRA) and one that also touches the VACE branch (`vace_blocks`,
block 0's `proj_in`), in diffusers' PEFT layout and in the official names ComfyUI writes, merged while the tiny
VACE DiT converts, in either checkpoint layout.
"""

from __future__ import annotations

import diffusers
import pytest

from tests.lora.formats import low_rank_factors, write_original, write_peft
from tests.lora.fused import assert_merged_close, diffusers_fused
from tests.oracle import state_of
from tests.wan_vace import vace_spec_fixtures as fixtures
from vidax.translator import convert
from vidax.translator.lora import resolve_adapter

SPEC = "wan/vace_transformer"
MAIN = ["blocks.1.attn1.to_q", "blocks.2.ffn.net.0.proj", "blocks.0.attn2.to_out.0"]
VACE = ["vace_blocks.1.attn1.to_v", "vace_blocks.0.proj_in", "vace_blocks.1.proj_out", "vace_blocks.0.ffn.net.2"]


@pytest.fixture(scope="module")
def vace(tmp_path_factory):
    root = tmp_path_factory.mktemp("vace_lora")
    model = fixtures.build_reference(fixtures.tiny_config())
    for layout in ("diffusers", "official"):
        fixtures.save_reference(model, root / layout, layout)
    state = state_of(model)
    files = {"main": write_peft(root / "main.safetensors", low_rank_factors(state, MAIN, rank=2, seed=1)),
             "vace": write_peft(root / "vace.safetensors", low_rank_factors(state, MAIN + VACE, rank=2, seed=2),
                                alpha=4.0)}
    return model, root, files


@pytest.mark.parametrize("layout", ["diffusers", "official"])
@pytest.mark.parametrize("name, strength", [("main", 1.0), ("vace", 0.6)])
def test_merges_as_diffusers_does(vace, tmp_path, layout, name, strength):
    model, root, files = vace
    expected = diffusers_fused(diffusers.WanVACEPipeline, model, tmp_path, SPEC, {name: (files[name], strength)})
    base = convert(SPEC, root / layout, dtype="float32")
    ours = convert(SPEC, root / layout, dtype="float32", loras=[resolve_adapter(f"{files[name]}={strength}")])
    moved = assert_merged_close(ours, expected, base)
    assert any(p.startswith("vace_") for p in moved) == (name == "vace")
