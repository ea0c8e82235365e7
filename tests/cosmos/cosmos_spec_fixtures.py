"""Test checkpoints of the Cosmos-Predict2.5 transformer spec, for the translator's mutation test and ours.

A tiny perturbed diffusers `CosmosTransformer3DModel` (cross-attention projection and learned
position embedding on, so every optional rule fires) saved in both layouts: the diffusers folder,
and the official `.pt` state dict (`net.` keys, TransformerEngine `_extra_state` and the RoPE buffers
the converters drop). The official names are the diffusers keys renamed with the inverse of diffusers'
COSMOS_2_0 rename table (`DIT_TO_OFFICIAL`); tests/cosmos/test_transformer.py checks that diffusers'
own single-file converter maps them back. The expected tree is computed from the diffusers state dict
alone (names, transposes, stacking), not from the spec.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from vidax.translator.testing import SpecCase, register_spec_fixture

from tests import oracle
from tests.oracle import build_perturbed, save_state

TINY_DIT = dict(
    in_channels=5, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2, mlp_ratio=2.0,
    text_embed_dim=16, adaln_lora_dim=8, max_size=(16, 32, 32), patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0),
    concat_padding_mask=True, extra_pos_embed_type="learnable", use_crossattn_projection=True,
    crossattn_proj_in_channels=24, encoder_hidden_states_channels=16,
)

# diffusers key (full match) -> official key (without the `net.` prefix), inverting
# scripts/convert_cosmos_to_diffusers.py's TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0.
DIT_TO_OFFICIAL = [
    (r"patch_embed\.proj\.weight", r"x_embedder.proj.1.weight"),
    (r"time_embed\.t_embedder\.(linear_[12])\.weight", r"t_embedder.1.\1.weight"),
    (r"time_embed\.norm\.weight", r"t_embedding_norm.weight"),
    (r"learnable_pos_embed\.(pos_emb_[thw])", r"extra_pos_embedder.\1"),
    (r"transformer_blocks\.(\d+)\.norm1\.linear_([12])\.weight", r"blocks.\1.adaln_modulation_self_attn.\2.weight"),
    (r"transformer_blocks\.(\d+)\.norm2\.linear_([12])\.weight", r"blocks.\1.adaln_modulation_cross_attn.\2.weight"),
    (r"transformer_blocks\.(\d+)\.norm3\.linear_([12])\.weight", r"blocks.\1.adaln_modulation_mlp.\2.weight"),
    (r"transformer_blocks\.(\d+)\.attn1\.to_([qkv])\.weight", r"blocks.\1.self_attn.\2_proj.weight"),
    (r"transformer_blocks\.(\d+)\.attn2\.to_([qkv])\.weight", r"blocks.\1.cross_attn.\2_proj.weight"),
    (r"transformer_blocks\.(\d+)\.attn1\.to_out\.0\.weight", r"blocks.\1.self_attn.output_proj.weight"),
    (r"transformer_blocks\.(\d+)\.attn2\.to_out\.0\.weight", r"blocks.\1.cross_attn.output_proj.weight"),
    (r"transformer_blocks\.(\d+)\.attn1\.norm_([qk])\.weight", r"blocks.\1.self_attn.\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn2\.norm_([qk])\.weight", r"blocks.\1.cross_attn.\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.0\.proj\.weight", r"blocks.\1.mlp.layer1.weight"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.2\.weight", r"blocks.\1.mlp.layer2.weight"),
    (r"norm_out\.linear_([12])\.weight", r"final_layer.adaln_modulation.\1.weight"),
    (r"proj_out\.weight", r"final_layer.linear.weight"),
    (r"crossattn_proj\.0\.(weight|bias)", r"crossattn_proj.0.\1"),
]


def dit_reference(seed: int = 0, **overrides):
    from diffusers import CosmosTransformer3DModel

    return build_perturbed(CosmosTransformer3DModel, {**TINY_DIT, **overrides}, seed)


def official_state_dict(state: dict) -> dict:
    """The official `.pt` state dict of a diffusers one: renamed, `net.` prefixed, with the buffers,
    counters and TransformerEngine extra states the official file carries and the converters drop."""
    out = {}
    for key, value in state.items():
        for pattern, repl in DIT_TO_OFFICIAL:
            if re.fullmatch(pattern, key):
                out["net." + re.sub(pattern, repl, key)] = value.clone()
                break
        else:
            raise KeyError(f"no official name for {key}")
    out["net.pos_embedder.seq"] = torch.arange(8, dtype=torch.float32)
    out["net.pos_embedder.dim_spatial_range"] = torch.arange(0, 4, 2, dtype=torch.float32)
    out["net.pos_embedder.dim_temporal_range"] = torch.arange(0, 8, 2, dtype=torch.float32)
    out["net.accum_iteration"] = torch.tensor([7])
    out["net.blocks.0.self_attn.q_proj._extra_state"] = torch.zeros(3, dtype=torch.uint8)
    return out


def save_official(state: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(official_state_dict(state), path)
    return path


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted tree of a diffusers state dict under the project's naming conventions."""
    return oracle.expected_tree(state, {"transformer_blocks": "blocks"})


@register_spec_fixture("cosmos/transformer")
def cosmos_transformer_cases(tmp_path):
    state = dit_reference().state_dict()
    root = save_state(state, tmp_path / "diffusers" / "transformer").parent
    official = save_official(state, tmp_path / "official" / "base" / "post-trained" / "tiny_ema_bf16.pt")
    expected = expected_tree(state)
    return [SpecCase("diffusers", root, expected), SpecCase("official", official.parents[2], expected)]
