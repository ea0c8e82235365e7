"""LTX-2 DiT LoRAs merged by the translator against diffusers' `LTX2LoraLoaderMixin`, weight by weight.

diffusers reads LTX-2 LoRAs in its own (PEFT) format and in the original one (`diffusion_model.` + ltx_core's
module names, `lora_A/B` or `lora_down/up`), which its `_convert_non_diffusers_ltx2_lora_to_diffusers` renames;
the reference is `load_lora_weights` + `set_adapters` + `fuse_lora` on a pipeline holding the tiny perturbed DiT.
It refuses an `alpha` tensor ("all LoRA param names contain 'lora'"), so the alpha-carrying formats (original
with `.alpha`, kohya) are checked against a hand merge. Every LoRA covers video and audio modules and the renamed
top-level ones, and merges into both base layouts: the diffusers folder and the official single file
(`model.diffusion_model.` + ltx_core's names).
"""

from __future__ import annotations

import copy

import pytest
import torch
from diffusers import LTX2Pipeline
from safetensors.torch import save_file

from tests.lora.formats import hand_merge, low_rank_factors, write_peft
from tests.lora.ltx2_formats import ltx2_modules, write_ltx2_kohya, write_ltx2_original
from tests.lora.fused import assert_merged_close, diffusers_fused
from tests.ltx2.references.ltx2_spec_fixtures import dit_reference, official_dit_state
from tests.oracle import save_state, state_of
from vidax.translator import convert
from vidax.translator.lora import LoraError, resolve_adapter

SPEC = "ltx2/transformer"
BASES = ("diffusers", "official")


@pytest.fixture(scope="module")
def dit(tmp_path_factory):
    """(model, state, {base layout: source}, factors) of an LTX-2.3 DiT (LTX-2.0's modules and its prompt AdaLN and
    gated attention; the LTX-2.0 pipeline test covers 2.0)."""
    root = tmp_path_factory.mktemp("ltx2_lora")
    model = dit_reference("2.3")
    state = state_of(model)
    save_state(state, root / "diffusers" / "transformer", dict(model.config))
    (root / "official").mkdir()
    save_file(official_dit_state(state), root / "official" / "ltx-2.safetensors")
    factors = low_rank_factors(state, ltx2_modules(state), 4, seed=17)
    return model, state, {"diffusers": root / "diffusers", "official": root / "official"}, factors


def _assert_both_streams_close(ours: dict, expected: dict, base: dict) -> None:
    moved = assert_merged_close(ours, expected, base)
    assert any("audio" in p for p in moved) and any("audio" not in p for p in moved), moved


@pytest.mark.parametrize("fmt", ["peft", "original_A_B"])
def test_ltx2_lora_matches_diffusers(dit, tmp_path, fmt):
    model, state, sources, factors = dit
    writers = {"peft": lambda p: write_peft(p, factors, alpha=8.0),
               "original_A_B": lambda p: write_ltx2_original(p, factors)}
    lora = writers[fmt](tmp_path / f"{fmt}.safetensors")
    expected = diffusers_fused(LTX2Pipeline, model, tmp_path, SPEC, {"x": (lora, -0.6)})
    for base in BASES:
        plain = convert(SPEC, sources[base], dtype="float32")
        merged = convert(SPEC, sources[base], dtype="float32", loras=[resolve_adapter(f"{lora}=-0.6")])
        _assert_both_streams_close(merged, expected, plain)


@pytest.mark.parametrize("fmt, alpha", [("original_down_up", None), ("original_alpha", 2.0), ("kohya", 6.0)])
def test_ltx2_lora_diffusers_cannot_read_matches_a_hand_merge(dit, tmp_path, fmt, alpha):
    """`lora_down/up` and `alpha`: scale alpha / rank (none: 1). diffusers 0.42 cannot read these LTX-2 files: an
    `alpha` fails its "names contain 'lora'" check, `lora_down/up` without alpha its rank lookup (IndexError)."""
    from diffusers import LTX2Pipeline

    model, state, sources, factors = dit
    lora = tmp_path / f"{fmt}.safetensors"
    if fmt == "kohya":
        write_ltx2_kohya(lora, factors, alpha)
    else:
        write_ltx2_original(lora, factors, alpha=alpha, names=("lora_down", "lora_up"))
        parts = {name: None for name in LTX2Pipeline._get_signature_keys(LTX2Pipeline)[0]}
        with pytest.raises((ValueError, IndexError)):
            LTX2Pipeline(**{**parts, "transformer": copy.deepcopy(model)}).load_lora_weights(str(lora))
    merged = hand_merge(state, factors, 1.5 * (alpha or 4) / 4)
    hand = save_state({k: torch.from_numpy(v) for k, v in merged.items()}, tmp_path / "hand" / "transformer").parent
    expected = convert(SPEC, hand, dtype="float32")
    for base in BASES:
        plain = convert(SPEC, sources[base], dtype="float32")
        _assert_both_streams_close(convert(SPEC, sources[base], dtype="float32", loras=[resolve_adapter(f"{lora}=1.5")]),
                      expected, plain)


def test_a_connectors_lora_is_refused_in_one_line(dit, tmp_path):
    """A LoRA of the text connectors (diffusers loads it into `connectors`) fits no DiT module: one error naming it."""
    _, state, sources, factors = dit
    module = next(iter(factors))
    a, b = factors[module]
    lora = tmp_path / "connectors.safetensors"
    save_file({"text_embedding_projection.aggregate_embed.lora_A.weight": a,
               "text_embedding_projection.aggregate_embed.lora_B.weight": b}, lora)
    with pytest.raises(LoraError, match=r"does not fit ltx2/transformer \(2 tensor\(s\)\).*aggregate_embed"):
        convert(SPEC, sources["diffusers"], dtype="float32", loras=[resolve_adapter(str(lora))])
