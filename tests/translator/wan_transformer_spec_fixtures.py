"""Tiny Wan transformers in both layouts, with their expected trees computed without the spec.

Registered for the spec `wan/transformer`; used by test_translator_wan.py and the mutation test.
The official layout is made by inverting diffusers' single-file converter (renames below) and is
checked to map back exactly through diffusers' own `convert_wan_transformer_to_diffusers`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from tests import oracle
from tests.oracle import build_perturbed, state_of
from vidax.translator.testing import SpecCase, register_spec_fixture

BASE = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, out_channels=3, text_dim=24,
            freq_dim=12, ffn_dim=40, num_layers=2, cross_attn_norm=True)
CONFIGS = {
    "t2v": dict(BASE, in_channels=4),
    "i2v": dict(BASE, in_channels=7, image_dim=20, added_kv_proj_dim=16),
    "flf2v": dict(BASE, in_channels=7, image_dim=20, added_kv_proj_dim=16, pos_embed_seq_len=10),
}

# diffusers module path -> official module path (the inverse of diffusers' rename table)
_TO_OFFICIAL = [
    (r"condition_embedder\.time_embedder\.linear_1", "time_embedding.0"),
    (r"condition_embedder\.time_embedder\.linear_2", "time_embedding.2"),
    (r"condition_embedder\.text_embedder\.linear_1", "text_embedding.0"),
    (r"condition_embedder\.text_embedder\.linear_2", "text_embedding.2"),
    (r"condition_embedder\.time_proj", "time_projection.1"),
    (r"condition_embedder\.image_embedder\.norm1", "img_emb.proj.0"),
    (r"condition_embedder\.image_embedder\.ff\.net\.0\.proj", "img_emb.proj.1"),
    (r"condition_embedder\.image_embedder\.ff\.net\.2", "img_emb.proj.3"),
    (r"condition_embedder\.image_embedder\.norm2", "img_emb.proj.4"),
    (r"condition_embedder\.image_embedder\.pos_embed", "img_emb.emb_pos"),
    (r"(blocks\.\d+)\.attn1\.", r"\1.self_attn."),
    (r"(blocks\.\d+)\.attn2\.", r"\1.cross_attn."),
    (r"\.to_q\.", ".q."), (r"\.to_k\.", ".k."), (r"\.to_v\.", ".v."), (r"\.to_out\.0\.", ".o."),
    (r"\.add_k_proj\.", ".k_img."), (r"\.add_v_proj\.", ".v_img."), (r"\.norm_added_k\.", ".norm_k_img."),
    (r"(blocks\.\d+)\.norm2\.", r"\1.norm3."),
    (r"(blocks\.\d+)\.ffn\.net\.0\.proj\.", r"\1.ffn.0."),
    (r"(blocks\.\d+)\.ffn\.net\.2\.", r"\1.ffn.2."),
    (r"(blocks\.\d+)\.scale_shift_table", r"\1.modulation"),
    (r"^proj_out\.", "head.head."),
    (r"^scale_shift_table$", "head.modulation"),
]


def official_key(key: str) -> str:
    for pattern, repl in _TO_OFFICIAL:
        key = re.sub(pattern, repl, key)
    return key


def reference_state_dict(variant: str, seed: int = 0) -> dict:
    """A perturbed tiny WanTransformer3DModel's state dict (torch tensors, fp32)."""
    from diffusers import WanTransformer3DModel

    return state_of(build_perturbed(WanTransformer3DModel, CONFIGS[variant], None, init_seed=seed))


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted tree computed from the diffusers state dict alone: renames, transposes, stacks."""
    return oracle.expected_tree(state, {"blocks": "blocks"})


def save_diffusers(state: dict, root: Path, shards: int = 1) -> Path:
    """The diffusers repo layout: transformer/diffusion_pytorch_model*.safetensors (+ index when sharded)."""
    from safetensors.torch import save_file

    folder = root / "transformer"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"_class_name": "WanTransformer3DModel"}))
    if shards == 1:
        save_file(state, folder / "diffusion_pytorch_model.safetensors")
        return root
    keys = list(state)
    weight_map = {}
    for i in range(shards):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: state[k] for k in keys[i::shards]}
        save_file(part, folder / name)
        weight_map.update({k: name for k in part})
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    return root


def save_official(state: dict, root: Path) -> Path:
    """The official repo layout: diffusion_pytorch_model.safetensors at the root, official key names."""
    from safetensors.torch import save_file

    root.mkdir(parents=True)
    save_file({official_key(k): v for k, v in state.items()}, root / "diffusion_pytorch_model.safetensors")
    return root


@register_spec_fixture("wan/transformer")
def wan_transformer_cases(tmp_path: Path) -> list[SpecCase]:
    cases = []
    for variant in CONFIGS:
        state = reference_state_dict(variant)
        expected = expected_tree(state)
        shards = 2 if variant == "i2v" else 1
        cases.append(SpecCase(f"diffusers-{variant}", save_diffusers(state, tmp_path / f"d-{variant}", shards), expected))
        cases.append(SpecCase(f"official-{variant}", save_official(state, tmp_path / f"o-{variant}"), expected))
    return cases
