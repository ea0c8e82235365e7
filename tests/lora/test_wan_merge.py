"""Wan LoRAs merged by the translator against diffusers' own loader, weight by weight.

The reference is what a diffusers user runs: `pipe.load_lora_weights(file, adapter_name=...)` for each
LoRA (non-diffusers formats go through diffusers' own converters there), `pipe.set_adapters(names,
strengths)`, `pipe.fuse_lora()`, `pipe.unload_lora_weights()`; the fused transformer, saved and converted
through the spec, is the tree `convert(..., loras=...)` must produce from the untouched base, in either
layout. The deltas diffusers drops (`.diff` on norms and linears, modulation deltas) are checked against a
hand merge (docs/LORA.md lists the difference).
"""

from __future__ import annotations

import copy
from pathlib import Path

import diffusers
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.lora import formats
from tests.lora.formats import biases, low_rank_factors, wan_modules, write_musubi, write_original, write_peft
from tests.lora.fused import assert_merged_close, diffusers_fused
from tests.oracle import build_perturbed, save_state, state_of
from vidax.translator import convert
from vidax.translator.lora import LoraError, resolve_adapter

SPEC = "wan/transformer"
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
              text_dim=24, freq_dim=12, ffn_dim=40, num_layers=2, cross_attn_norm=True)


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    """A perturbed tiny Wan DiT saved in both layouts, and one LoRA file per format."""
    root = tmp_path_factory.mktemp("wan_lora")
    model = build_perturbed(diffusers.WanTransformer3DModel, CONFIG, 0)
    state = state_of(model)
    formats.spec_fixtures_save(state, root)
    blocks = wan_modules(2)
    factors = low_rank_factors(state, wan_modules(2, head=True), rank=4, seed=1)
    in_blocks = {m: factors[m] for m in blocks}
    files = {
        "peft": write_peft(root / "peft.safetensors", factors, alpha=8.0, bias=biases(state, list(factors), 2)),
        "peft_plain": write_peft(root / "peft_plain.safetensors", in_blocks),
        "original_ab": write_original(root / "original_ab.safetensors", in_blocks, names=("lora_A", "lora_B")),
        "original_alpha": write_original(root / "original_alpha.safetensors", in_blocks, alpha=2.0,
                                         diff_b=biases(state, blocks, 3)),
        "musubi": write_musubi(root / "musubi.safetensors", low_rank_factors(state, blocks, rank=2, seed=4), alpha=6.0),
    }
    return model, state, root, files


def _fused(model, root: Path, loras: dict[str, tuple[Path, float]]) -> dict:
    """diffusers' merged weights for `loras` ({name: (file, strength)}), as the spec converts them."""
    return diffusers_fused(diffusers.WanPipeline, model, root, SPEC, loras)


@pytest.mark.parametrize("layout", ["diffusers", "official"])
@pytest.mark.parametrize("fmt, strength", [("peft", 0.7), ("peft_plain", 1.0), ("original_ab", 1.3),
                                           ("original_alpha", 0.8), ("musubi", 1.0)])
def test_each_format_matches_diffusers(wan, tmp_path, layout, fmt, strength):
    model, _, root, files = wan
    expected = _fused(model, tmp_path, {fmt: (files[fmt], strength)})
    base = convert(SPEC, root / layout, dtype="float32")
    ours = convert(SPEC, root / layout, dtype="float32", loras=[resolve_adapter(f"{files[fmt]}={strength}")])
    assert_merged_close(ours, expected, base)


def test_several_loras_add_up_one_negative(wan, tmp_path):
    model, _, root, files = wan
    chosen = {"peft": (files["peft"], 0.6), "original_alpha": (files["original_alpha"], -0.9),
              "musubi": (files["musubi"], 1.2)}
    expected = _fused(model, tmp_path, chosen)
    adapters = [resolve_adapter(f"{path}={strength}") for path, strength in chosen.values()]
    base = convert(SPEC, root / "official", dtype="float32")
    assert_merged_close(convert(SPEC, root / "official", dtype="float32", loras=adapters), expected, base)


def test_the_default_dtype_policy_casts_the_merged_weights(wan):
    _, _, root, files = wan
    merged32 = convert(SPEC, root / "diffusers", dtype="float32", loras=[resolve_adapter(str(files["musubi"]))])
    merged = convert(SPEC, root / "diffusers", loras=[resolve_adapter(str(files["musubi"]))])
    kernel = "blocks/attn1/to_q/kernel"
    assert merged[kernel].dtype.name == "bfloat16" and merged["blocks/norm2/scale"].dtype == np.float32
    np.testing.assert_array_equal(merged[kernel], merged32[kernel].astype(merged[kernel].dtype))


def test_a_lora_for_another_size_is_one_error_naming_what_does_not_fit(wan, tmp_path):
    _, state, root, _ = wan
    wide = {"blocks.0.attn1.to_q": (torch.zeros(4, 32), torch.zeros(16, 4)),
            "blocks.9.attn1.to_k": (torch.zeros(4, 16), torch.zeros(16, 4))}
    path = write_original(tmp_path / "other.safetensors", wide, alpha=4.0)
    with pytest.raises(LoraError) as caught:
        convert(SPEC, root / "diffusers", loras=[resolve_adapter(str(path))])
    message = str(caught.value)
    assert "\n" not in message and "does not fit wan/transformer (4 tensor(s))" in message
    assert "diffusion_model.blocks.0.self_attn.q.lora_down.weight [4, 32]" in message
    assert "blocks.0.attn1.to_q.weight [16, 16]" in message
    assert "diffusion_model.blocks.9.self_attn.k.lora_down.weight [4, 16] (no module blocks.9.self_attn.k" in message


def test_text_encoder_tensors_are_ignored_by_name_and_unknown_names_refused(wan, tmp_path):
    _, state, root, files = wan
    factors = low_rank_factors(state, ["blocks.1.ffn.net.2"], rank=2, seed=5)
    extra = {"text_encoder.encoder.block.0.layer.0.SelfAttention.q.lora_A.weight": torch.zeros(2, 8)}
    path = write_original(tmp_path / "te.safetensors", factors, extra=extra)
    tree = convert(SPEC, root / "diffusers", lazy=True, loras=[resolve_adapter(str(path))])
    record = tree.source.checkpoint.records[0]
    assert record["ignored"] == list(extra) and record["applied"] == 1 and len(record["sha256"]) == 64
    odd = write_original(tmp_path / "odd.safetensors", factors, extra={"diffusion_model.blocks.0.mystery": torch.zeros(2)})
    with pytest.raises(LoraError, match=r"diffusion_model\.blocks\.0\.mystery \[2\] \(not a LoRA or delta tensor name\)"):
        convert(SPEC, root / "diffusers", loras=[resolve_adapter(str(odd))])


def test_strength_parsing_and_sources(wan, tmp_path):
    _, _, root, files = wan
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "x.safetensors").write_bytes(files["musubi"].read_bytes())
    adapter = resolve_adapter(f"{folder}=-0.25")
    assert adapter.path == folder / "x.safetensors" and adapter.strength == -0.25
    assert adapter.sha256 == resolve_adapter(str(files["musubi"])).sha256
    for bad, message in [(f"{files['musubi']}=strong", "must be a number"), (f"{files['musubi']}=nan", "finite"),
                         (str(tmp_path / "none.safetensors"), "no such file"), (str(root), "exactly one")]:
        with pytest.raises(LoraError, match=message):
            resolve_adapter(bad)


# --- deltas diffusers drops, against a hand merge ---------------------------------------------------


def test_full_deltas_merge_as_comfyui_applies_them(wan, tmp_path):
    """`.diff` on norms and linears, `.diff_b` on some modules only (zero for the others), a block's and the
    head's `modulation.diff`, and lightx2v's `.diff_m`: each added at the strength, in either layout."""
    _, state, root, _ = wan
    gen = torch.Generator().manual_seed(7)
    noise = lambda key: torch.randn(state[key].shape, generator=gen) * 0.1  # noqa: E731
    deltas = {  # diffusers key it changes -> (official delta name, delta)
        "blocks.0.norm2.weight": "blocks.0.norm3.diff", "blocks.0.norm2.bias": "blocks.0.norm3.diff_b",
        "blocks.1.attn2.norm_k.weight": "blocks.1.cross_attn.norm_k.diff",
        "blocks.1.ffn.net.2.weight": "blocks.1.ffn.2.diff", "blocks.0.attn1.to_v.bias": "blocks.0.self_attn.v.diff_b",
        "blocks.0.scale_shift_table": "blocks.0.modulation.diff", "blocks.1.scale_shift_table": "blocks.1.diff_m",
        "scale_shift_table": "head.diff_m", "proj_out.weight": "head.head.diff",
        "condition_embedder.time_proj.bias": "time_projection.1.diff_b",
    }
    values = {key: noise(key) for key in deltas}
    path = tmp_path / "deltas.safetensors"
    save_file({f"diffusion_model.{name}": values[key] for key, name in deltas.items()}, path)
    expected_state = {k: v.clone() for k, v in state.items()}
    for key, value in values.items():
        expected_state[key] += -0.6 * value
    expected = convert(SPEC, save_state(expected_state, tmp_path / "hand" / "transformer").parent, dtype="float32")
    base = convert(SPEC, root / "diffusers", dtype="float32")
    for layout in ("diffusers", "official"):
        ours = convert(SPEC, root / layout, dtype="float32", loras=[resolve_adapter(f"{path}=-0.6")])
        assert_merged_close(ours, expected, base)


def test_the_shipped_lightx2v_preset_and_a_malformed_one(tmp_path, monkeypatch):
    from vidax.translator import SpecError, get_model, load_registry

    entry = get_model("wan2.1-t2v-14b-lightx2v-4step")
    assert entry.alias_of == "wan2.1-t2v-14b" and set(entry.components) == {"transformer", "vae", "text_encoder"}
    assert entry.loras["lora"][0].startswith("lightx2v/Wan2.1-Distill-Loras/") and entry.preset_settings["steps"] == 4
    (tmp_path / "bad.toml").write_text('[models."p"]\nalias_of = "wan2.1-t2v-14b"\nlora = "x.safetensors"\n')
    monkeypatch.setenv("VIDAX_MODELS", str(tmp_path / "bad.toml"))
    with pytest.raises(SpecError, match="preset 'p': lora must be a list"):
        load_registry()


def test_what_diffusers_refuses_merges_by_hand(wan, tmp_path):
    """Pins docs/LORA.md: diffusers 0.42 stops on a head LoRA with an alpha, which vidax merges (alpha / rank
    as everywhere); a `.diff_b` given for some LoRA'd modules only is zero for the others on both sides."""
    model, state, root, _ = wan
    factors = low_rank_factors(state, ["blocks.0.attn1.to_q", "blocks.1.ffn.net.0.proj", "proj_out"], rank=2, seed=8)
    partial = biases(state, ["blocks.0.attn1.to_q"], 9)
    path = write_original(tmp_path / "head.safetensors", factors, alpha=3.0, diff_b=partial)
    pipe = diffusers.WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=None,
                                 transformer=copy.deepcopy(model))
    with pytest.raises(ValueError, match="should be empty"):
        pipe.load_lora_weights(str(path), adapter_name="head")
    without_head = write_original(tmp_path / "partial.safetensors", {k: v for k, v in factors.items() if k != "proj_out"},
                                  diff_b=partial)
    base = convert(SPEC, root / "diffusers", dtype="float32")
    ours = convert(SPEC, root / "diffusers", dtype="float32", loras=[resolve_adapter(f"{without_head}=0.7")])
    assert_merged_close(ours, _fused(model, tmp_path, {"partial": (without_head, 0.7)}), base)
    hand = formats.hand_merge(state, factors, scale=0.5 * 3.0 / 2)
    hand["blocks.0.attn1.to_q.bias"] += 0.5 * partial["blocks.0.attn1.to_q"].numpy()
    expected = convert(SPEC, save_state({k: torch.from_numpy(v) for k, v in hand.items()}, tmp_path / "h" / "transformer").parent,
                       dtype="float32")
    assert_merged_close(convert(SPEC, root / "official", dtype="float32", loras=[resolve_adapter(f"{path}=0.5")]),
                        expected, base)


def test_hub_sources_come_from_the_hub_cache(wan, tmp_path, monkeypatch):
    """`owner/name` (a repo holding one .safetensors at its root) and `owner/name/path/file.safetensors`, read through the
    Hugging Face cache as any weights are (offline here), hashed by content."""
    from tests.oracle import hub_cached

    _, _, root, files = wan
    one, many = tmp_path / "one", tmp_path / "many"
    (one).mkdir()
    (many / "loras").mkdir(parents=True)
    (one / "musubi.safetensors").write_bytes(files["musubi"].read_bytes())
    (many / "loras" / "peft.safetensors").write_bytes(files["peft"].read_bytes())
    (many / "other.safetensors").write_bytes(files["musubi"].read_bytes())
    (many / "third.safetensors").write_bytes(files["original_ab"].read_bytes())
    hub_cached(monkeypatch, tmp_path / "cache", "someone/wan-style", one)
    hub_cached(monkeypatch, tmp_path / "cache", "someone/wan-loras", many)
    single = resolve_adapter("someone/wan-style=0.5")
    named = resolve_adapter("someone/wan-loras/loras/peft.safetensors")
    assert single.sha256 == resolve_adapter(str(files["musubi"])).sha256 and single.strength == 0.5
    assert named.sha256 == resolve_adapter(str(files["peft"])).sha256 and named.source == "someone/wan-loras/loras/peft.safetensors"
    with pytest.raises(LoraError, match="exactly one .safetensors"):
        resolve_adapter("someone/wan-loras")
    local = convert(SPEC, root / "diffusers", dtype="float32", loras=[resolve_adapter(f"{files['musubi']}=0.5")])
    hub = convert(SPEC, root / "diffusers", dtype="float32", loras=[single])
    assert all(np.array_equal(local[p], hub[p]) for p in local)


@pytest.mark.parametrize("extra, metadata, message", [
    ({"diffusion_model.blocks.0.self_attn.q.dora_scale": torch.ones(1, 16)}, None, r"dora_scale \[1, 16\] \(DoRA is not supported\)"),
    ({"lora_unet_blocks_0_ffn_0.hada_w1_a": torch.ones(2, 2)}, None, r"LoHa is not supported"),
    ({"diffusion_model.blocks.0.self_attn.q.lora_mid.weight": torch.ones(2, 2, 1, 1)}, None, r"LoCon \(mid weight\)"),
    ({}, {"transformer.use_dora": True}, "DoRA or per-module alpha/rank patterns are not supported"),
    ({}, {"transformer.alpha_pattern": {"blocks.0.attn1.to_q": 8}}, "per-module alpha/rank patterns"),
    ({"diffusion_model.blocks.1.ffn.2.alpha": torch.tensor(4.0)}, None, "an alpha without its LoRA tensors"),
    ({"transformer.blocks.0.attn1.to_q.lora_A.weight": torch.ones(2, 16)}, None, r"the same tensor as (diffusion_model|transformer)\."),
])
def test_adapter_kinds_it_cannot_merge_are_refused_by_name(wan, tmp_path, extra, metadata, message):
    import json

    _, state, root, _ = wan
    factors = low_rank_factors(state, ["blocks.0.attn1.to_q"], rank=2, seed=10)
    tensors = {f"diffusion_model.blocks.0.self_attn.q.lora_{n}.weight": t for n, t in zip("AB", factors["blocks.0.attn1.to_q"])}
    path = tmp_path / "kind.safetensors"
    save_file({**tensors, **extra}, path, metadata={"lora_adapter_metadata": json.dumps(metadata)} if metadata else None)
    with pytest.raises(LoraError, match=message):
        convert(SPEC, root / "diffusers", loras=[resolve_adapter(str(path))])


def test_a_t2v_lora_on_an_i2v_model_matches_diffusers(tmp_path):
    """diffusers pads a T2V LoRA with zero LoRAs on the I2V image projections; vidax leaves them untouched."""
    i2v = build_perturbed(diffusers.WanTransformer3DModel, dict(CONFIG, in_channels=9, image_dim=20, added_kv_proj_dim=16), 0)
    state = state_of(i2v)
    root = save_state(state, tmp_path / "i2v" / "transformer").parent
    path = write_original(tmp_path / "t2v.safetensors", low_rank_factors(state, wan_modules(2), rank=2, seed=11), alpha=1.0)
    expected = _fused(i2v, tmp_path, {"t2v": (path, 0.9)})
    base = convert(SPEC, root, dtype="float32")
    assert_merged_close(convert(SPEC, root, dtype="float32", loras=[resolve_adapter(f"{path}=0.9")]), expected, base)
