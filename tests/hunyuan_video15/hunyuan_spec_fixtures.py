"""Test checkpoints of the HunyuanVideo-1.5 specs, for the translator's mutation test and ours.

Registered with `vidax.translator.testing`: for each spec, a tiny perturbed diffusers reference saved
in both layouts, and the tree it must convert to computed from the diffusers state dict alone
(renames, transposes, stacking), not from the spec. The official layout is made by renaming the
diffusers keys with the inverse of diffusers' scripts/convert_hunyuan_video1_5_to_diffusers.py
(tables below): no pip-side converter exists for this family.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.oracle import build_perturbed, rename, save_state, split_leaves, stack_layers, to_np, torch_leaf, tree_path
from vidax.translator.testing import SpecCase, register_spec_fixture

TINY_DIT = dict(
    in_channels=5, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2,
    num_refiner_layers=2, text_embed_dim=24, text_embed_2_dim=20, image_embed_dim=12,
    rope_axes_dim=(4, 6, 6), use_meanflow=True,
)
TINY_VAE = dict(block_out_channels=(8, 16, 16, 16, 16), latent_channels=4, layers_per_block=1)

# diffusers key (full match) -> official key, per diffusers' converter script.
DIT_TO_OFFICIAL = [
    (r"time_embed\.timestep_embedder\.linear_1\.(\w+)", r"time_in.mlp.0.\1"),
    (r"time_embed\.timestep_embedder\.linear_2\.(\w+)", r"time_in.mlp.2.\1"),
    (r"time_embed\.timestep_embedder_r\.linear_1\.(\w+)", r"time_r_in.mlp.0.\1"),
    (r"time_embed\.timestep_embedder_r\.linear_2\.(\w+)", r"time_r_in.mlp.2.\1"),
    (r"context_embedder\.time_text_embed\.timestep_embedder\.linear_1\.(\w+)", r"txt_in.t_embedder.mlp.0.\1"),
    (r"context_embedder\.time_text_embed\.timestep_embedder\.linear_2\.(\w+)", r"txt_in.t_embedder.mlp.2.\1"),
    (r"context_embedder\.time_text_embed\.text_embedder\.(linear_[12])\.(\w+)", r"txt_in.c_embedder.\1.\2"),
    (r"context_embedder\.proj_in\.(\w+)", r"txt_in.input_embedder.\1"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.(norm[12])\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.\2.\3"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.attn\.to_out\.0\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.self_attn_proj.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.mlp.fc1.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.mlp.fc2.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.norm_out\.linear\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.adaLN_modulation.1.\2"),
    (r"context_embedder_2\.norm\.(\w+)", r"byt5_in.layernorm.\1"),
    (r"context_embedder_2\.linear_(\d)\.(\w+)", r"byt5_in.fc\1.\2"),
    (r"image_embedder\.norm_in\.(\w+)", r"vision_in.proj.0.\1"),
    (r"image_embedder\.linear_1\.(\w+)", r"vision_in.proj.1.\1"),
    (r"image_embedder\.linear_2\.(\w+)", r"vision_in.proj.3.\1"),
    (r"image_embedder\.norm_out\.(\w+)", r"vision_in.proj.4.\1"),
    (r"x_embedder\.proj\.(\w+)", r"img_in.proj.\1"),
    (r"cond_type_embed\.weight", r"cond_type_embedding.weight"),
    (r"transformer_blocks\.(\d+)\.norm1\.linear\.(\w+)", r"double_blocks.\1.img_mod.linear.\2"),
    (r"transformer_blocks\.(\d+)\.norm1_context\.linear\.(\w+)", r"double_blocks.\1.txt_mod.linear.\2"),
    (r"transformer_blocks\.(\d+)\.attn\.to_([qkv])\.(\w+)", r"double_blocks.\1.img_attn_\2.\3"),
    (r"transformer_blocks\.(\d+)\.attn\.norm_([qk])\.weight", r"double_blocks.\1.img_attn_\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn\.to_out\.0\.(\w+)", r"double_blocks.\1.img_attn_proj.\2"),
    (r"transformer_blocks\.(\d+)\.attn\.add_([qkv])_proj\.(\w+)", r"double_blocks.\1.txt_attn_\2.\3"),
    (r"transformer_blocks\.(\d+)\.attn\.norm_added_([qk])\.weight", r"double_blocks.\1.txt_attn_\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn\.to_add_out\.(\w+)", r"double_blocks.\1.txt_attn_proj.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"double_blocks.\1.img_mlp.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"double_blocks.\1.img_mlp.fc2.\2"),
    (r"transformer_blocks\.(\d+)\.ff_context\.net\.0\.proj\.(\w+)", r"double_blocks.\1.txt_mlp.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.ff_context\.net\.2\.(\w+)", r"double_blocks.\1.txt_mlp.fc2.\2"),
    (r"proj_out\.(\w+)", r"final_layer.linear.\1"),
]

VAE_TO_OFFICIAL = [
    (r"(encoder|decoder)\.(conv_in|conv_out)\.conv\.(\w+)", r"\1.\2.conv.\3"),
    (r"(encoder|decoder)\.norm_out\.gamma", r"\1.norm_out.gamma"),
    (r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", r"encoder.down.\1.block.\2.\3"),
    (r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", r"decoder.up.\1.block.\2.\3"),
    (r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.(.+)", r"encoder.down.\1.downsample.\2"),
    (r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.+)", r"decoder.up.\1.upsample.\2"),
    (r"(encoder|decoder)\.mid_block\.resnets\.0\.(.+)", r"\1.mid.block_1.\2"),
    (r"(encoder|decoder)\.mid_block\.resnets\.1\.(.+)", r"\1.mid.block_2.\2"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.norm\.gamma", r"\1.mid.attn_1.norm.gamma"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.to_([qkv])\.(\w+)", r"\1.mid.attn_1.\2.\3"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.proj_out\.(\w+)", r"\1.mid.attn_1.proj_out.\2"),
]


def official_dit_state(state: dict) -> dict:
    """diffusers state dict -> official names: the refiner's q/k/v fused, the final AdaLN's halves swapped."""
    import torch

    state = dict(state)
    out = {}
    refiners = {int(m.group(1)) for k in state if (m := re.match(r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.", k))}
    for i in sorted(refiners):
        prefix = f"context_embedder.token_refiner.refiner_blocks.{i}.attn."
        for leaf in ("weight", "bias"):
            parts = [state.pop(f"{prefix}to_{p}.{leaf}") for p in "qkv"]
            out[f"txt_in.individual_token_refiner.blocks.{i}.self_attn_qkv.{leaf}"] = torch.cat(parts, 0)
    for leaf in ("weight", "bias"):
        scale, shift = state.pop(f"norm_out.linear.{leaf}").chunk(2, 0)
        out[f"final_layer.adaLN_modulation.1.{leaf}"] = torch.cat([shift, scale], 0)
    out.update({rename(k, DIT_TO_OFFICIAL): v for k, v in state.items()})
    return out


def official_vae_state(state: dict) -> dict:
    return {rename(k, VAE_TO_OFFICIAL): v for k, v in state.items()}


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted tree from the diffusers state dict alone (both specs): renames, transposes, stacks."""
    leaves = []
    for key, tensor in state.items():
        value = to_np(tensor)
        if key.startswith("norm_out.linear."):  # (scale, shift) halves as two leaves
            leaves += split_leaves("norm_out.linear", value, ("scale", "shift"))
        elif key.endswith(".gamma"):  # VAE RMS norm, (C, 1, 1, 1)
            leaves.append((tree_path(key), value.reshape(-1)))
        else:
            leaves.append(torch_leaf(key, value, tables=("cond_type_embed",)))
    return stack_layers(leaves, {"transformer_blocks": "blocks"})


def dit_reference(seed: int = 0, **overrides):
    from diffusers import HunyuanVideo15Transformer3DModel

    return build_perturbed(HunyuanVideo15Transformer3DModel, {**TINY_DIT, **overrides}, seed)


def vae_reference(seed: int = 3):
    from diffusers import AutoencoderKLHunyuanVideo15

    return build_perturbed(AutoencoderKLHunyuanVideo15, TINY_VAE, seed, init_seed=0)


@register_spec_fixture("hunyuan_video15/transformer")
def transformer_cases(tmp_path: Path) -> list[SpecCase]:
    state = dit_reference().state_dict()
    expected = expected_tree(state)
    return [
        SpecCase("diffusers", save_state(state, tmp_path / "diffusers" / "transformer").parent, expected),
        SpecCase("official", save_state(official_dit_state(state), tmp_path / "official"), expected),
    ]


@register_spec_fixture("hunyuan_video15/vae")
def vae_cases(tmp_path: Path) -> list[SpecCase]:
    state = vae_reference().state_dict()
    expected = expected_tree(state)
    return [
        SpecCase("diffusers", save_state(state, tmp_path / "diffusers" / "vae").parent, expected),
        SpecCase("official", save_state(official_vae_state(state), tmp_path / "official" / "vae").parent, expected),
    ]
