"""Tiny CogVideoX references and the test checkpoints of the CogVideoX specs.

Registered with `vidax.translator.testing` (the translator's mutation tests use them) and imported by
this folder's tests: tiny perturbed diffusers models of every variant, saved as the real repos lay
them out, and the tree each must convert to, computed from the diffusers state dict alone (renames,
transposes, splits, stacking), not from the spec. The SAT layout of 1.5 is made by renaming the
diffusers keys with the inverse of THUDM/CogVideo tools/convert_weight_sat2hf.py (no pip-side
converter exists): q/k/v fused, the two blocks' AdaLN halves interleaved into one [12 D] matrix.

Imported by file path (no package) by the translator tests: absolute imports only.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from vidax.translator.testing import SpecCase, register_spec_fixture

from tests import oracle
from tests.oracle import build_perturbed, rename, save_state, split_leaves, stack_layers, state_of, to_np, torch_leaf, tree_path

TEXT_DIM = 20
TEXT_LEN = 7  # the tiny references' max_text_seq_length (226 in the releases)
_BASE = dict(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=24,
             text_embed_dim=TEXT_DIM, num_layers=2, sample_width=8, sample_height=6, sample_frames=9,
             max_text_seq_length=TEXT_LEN)
DIT_VARIANTS = {
    "2b": dict(_BASE),  # sincos table
    "5b": dict(_BASE, use_rotary_positional_embeddings=True),
    "5b_i2v": dict(_BASE, in_channels=8, use_rotary_positional_embeddings=True, use_learned_positional_embeddings=True),
    "15": dict(_BASE, patch_size_t=2, patch_bias=False, sample_width=12, sample_height=12, sample_frames=17,
               use_rotary_positional_embeddings=True),
    "15_i2v": dict(_BASE, in_channels=8, patch_size_t=2, patch_bias=False, sample_width=12, sample_height=12,
                   sample_frames=17, use_rotary_positional_embeddings=True, ofs_embed_dim=24),
}
SPEC_OF = {"2b": "cogvideox/transformer", "5b": "cogvideox/transformer", "5b_i2v": "cogvideox/transformer",
           "15": "cogvideox/transformer15", "15_i2v": "cogvideox/transformer15"}

TINY_VAE = dict(block_out_channels=(8, 16, 16, 16), latent_channels=4, layers_per_block=1, norm_num_groups=4,
                sample_height=48, sample_width=64)


def dit_reference(variant: str, seed: int = 0, **overrides):
    from diffusers import CogVideoXTransformer3DModel

    return build_perturbed(CogVideoXTransformer3DModel, {**DIT_VARIANTS[variant], **overrides}, seed)


def vae_reference(seed: int = 3, **overrides):
    from diffusers import AutoencoderKLCogVideoX

    return build_perturbed(AutoencoderKLCogVideoX, {**TINY_VAE, **overrides}, seed)


def config_json(module) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dict(module.config).items()}


# --- SAT layout (1.5) ------------------------------------------------------------------------

_SAT_RENAMES = [  # diffusers (full match) -> SAT, the inverse of convert_weight_sat2hf's renames
    (r"time_embedding\.linear_([12])\.(\w+)", lambda m: f"time_embed.{2 * int(m[1]) - 2}.{m[2]}"),
    (r"ofs_embedding\.linear_([12])\.(\w+)", lambda m: f"ofs_embed.{2 * int(m[1]) - 2}.{m[2]}"),
    (r"patch_embed\.(proj|text_proj)\.(\w+)", r"mixins.patch_embed.\1.\2"),
    (r"norm_final\.(\w+)", r"transformer.final_layernorm.\1"),
    (r"norm_out\.norm\.(\w+)", r"mixins.final_layer.norm_final.\1"),
    (r"norm_out\.linear\.(\w+)", r"mixins.final_layer.adaLN_modulation.1.\1"),
    (r"proj_out\.(\w+)", r"mixins.final_layer.linear.\1"),
    (r"transformer_blocks\.(\d+)\.attn1\.to_out\.0\.(\w+)", r"transformer.layers.\1.attention.dense.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"transformer.layers.\1.mlp.dense_h_to_4h.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"transformer.layers.\1.mlp.dense_4h_to_h.\2"),
    (r"transformer_blocks\.(\d+)\.norm1\.norm\.(\w+)", r"transformer.layers.\1.input_layernorm.\2"),
    (r"transformer_blocks\.(\d+)\.norm2\.norm\.(\w+)", r"transformer.layers.\1.post_attention_layernorm.\2"),
    (r"transformer_blocks\.(\d+)\.attn1\.norm_q\.(\w+)", r"mixins.adaln_layer.query_layernorm_list.\1.\2"),
    (r"transformer_blocks\.(\d+)\.attn1\.norm_k\.(\w+)", r"mixins.adaln_layer.key_layernorm_list.\1.\2"),
]


def sat_state(state: dict) -> dict:
    """diffusers state dict -> the SAT checkpoint's keys (`model.diffusion_model.` prefix)."""
    import torch

    state = dict(state)
    out = {}
    layers = sorted({int(m[1]) for k in state if (m := re.match(r"transformer_blocks\.(\d+)\.", k))})
    for i in layers:
        block = f"transformer_blocks.{i}."
        for leaf in ("weight", "bias"):
            qkv = [state.pop(f"{block}attn1.to_{p}.{leaf}") for p in "qkv"]
            out[f"transformer.layers.{i}.attention.query_key_value.{leaf}"] = torch.cat(qkv, 0)
            n1 = state.pop(f"{block}norm1.linear.{leaf}").chunk(2, 0)  # (video, text) halves
            n2 = state.pop(f"{block}norm2.linear.{leaf}").chunk(2, 0)
            out[f"mixins.adaln_layer.adaLN_modulations.{i}.1.{leaf}"] = torch.cat([n1[0], n2[0], n1[1], n2[1]], 0)
    out.update({rename(k, _SAT_RENAMES): v for k, v in state.items()})
    return {f"model.diffusion_model.{k}": v for k, v in out.items()}


def save_sat(state: dict, folder: Path, task: str = "t2v") -> Path:
    """THUDM/CogVideoX1.5-5B-SAT's layout: `transformer_<task>/1000/mp_rank_00_model_states.pt`,
    a DeepSpeed state whose weights sit under `module`."""
    import torch

    path = folder / f"transformer_{task}" / "1000" / "mp_rank_00_model_states.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"module": sat_state(state)}, path)
    (folder / f"transformer_{task}" / "latest").write_text("1000")
    return folder


# --- expected trees --------------------------------------------------------------------------


def expected_dit_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted DiT tree from the diffusers state dict alone: renames, transposes, halves, stacks."""
    leaves = []
    for key, tensor in state.items():
        value = to_np(tensor)  # diffusers keeps the learned table's buffer in float64
        module = key.rpartition(".")[0]
        if re.fullmatch(r"transformer_blocks\.\d+\.norm[12]\.linear", module):  # (video, text) halves
            leaves += split_leaves(module, value, ("video", "text"))
        else:
            leaves.append(torch_leaf(key, value))
    return stack_layers(leaves, {"transformer_blocks": "blocks"})


def expected_dit_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """`expected_dit_tree`'s leaf shapes from the diffusers state dict's shapes alone (no memory:
    for the released sizes)."""
    flat, layers = {}, {}
    for key, shape in shapes.items():
        module, _, param = key.rpartition(".")
        leaves = {}
        if key == "patch_embed.pos_embedding":
            leaves[key.replace(".", "/")] = tuple(shape)
        elif re.fullmatch(r"transformer_blocks\.\d+\.norm[12]\.linear", module):
            half = (shape[1], shape[0] // 2) if len(shape) == 2 else (shape[0] // 2,)
            name = "kernel" if len(shape) == 2 else "bias"
            leaves.update({f"{tree_path(module)}_{s}/{name}": half for s in ("video", "text")})
        elif param == "bias":
            leaves[f"{tree_path(module)}/bias"] = tuple(shape)
        elif len(shape) == 1:
            leaves[f"{tree_path(module)}/scale"] = tuple(shape)
        elif len(shape) == 2:
            leaves[f"{tree_path(module)}/kernel"] = tuple(shape[::-1])
        else:
            leaves[f"{tree_path(module)}/kernel"] = (shape[2], shape[3], shape[1], shape[0])
        for leaf, leaf_shape in leaves.items():
            block = re.fullmatch(r"transformer_blocks_(\d+)/(.*)", leaf)
            if block:
                layers.setdefault(f"blocks/{block[2]}", set()).add((int(block[1]), leaf_shape))
            else:
                flat[leaf] = leaf_shape
    for leaf, entries in layers.items():
        (shape,) = {s for _, s in entries}
        flat[leaf] = (len(entries), *shape)
    return flat


@register_spec_fixture("cogvideox/transformer")
def transformer_cases(tmp_path: Path) -> list[SpecCase]:
    cases = []
    for variant in ("2b", "5b_i2v"):  # the I2V one carries the learned table (an optional rule)
        state = state_of(dit_reference(variant))
        root = tmp_path / variant
        save_state(state, root / "transformer")
        cases.append(SpecCase(f"diffusers-{variant}", root, expected_dit_tree(state)))
    return cases


@register_spec_fixture("cogvideox/transformer15")
def transformer15_cases(tmp_path: Path) -> list[SpecCase]:
    state = state_of(dit_reference("15_i2v"))  # the ofs embedding is I2V-only
    expected = expected_dit_tree(state)
    save_state(state, tmp_path / "diffusers" / "transformer")
    return [
        SpecCase("diffusers-15_i2v", tmp_path / "diffusers", expected),
        SpecCase("sat-15_i2v", save_sat(state, tmp_path / "sat", "i2v"), expected),
    ]


# --- VAE -------------------------------------------------------------------------------------

_SAT_VAE_RENAMES = [  # diffusers (full match) -> SAT's 3d-vae.pt, the inverse of convert_weight_sat2hf's
    (r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.conv_shortcut\.(\w+)", r"encoder.down.\1.block.\2.nin_shortcut.\3"),
    (r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", r"encoder.down.\1.block.\2.\3"),
    (r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.(.+)", r"encoder.down.\1.downsample.\2"),
    (r"(encoder|decoder)\.mid_block\.resnets\.(\d+)\.(.+)", lambda m: f"{m[1]}.mid.block_{int(m[2]) + 1}.{m[3]}"),
    (r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.conv_shortcut\.(\w+)",
     lambda m: f"decoder.up.{3 - int(m[1])}.block.{m[2]}.nin_shortcut.{m[3]}"),
    (r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", lambda m: f"decoder.up.{3 - int(m[1])}.block.{m[2]}.{m[3]}"),
    (r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.+)", lambda m: f"decoder.up.{3 - int(m[1])}.upsample.{m[2]}"),
    (r"(encoder|decoder)\.(conv_in|conv_out|norm_out)\.(.+)", r"\1.\2.\3"),
]


def sat_vae_state(state: dict) -> dict:
    """diffusers VAE state dict -> the SAT `3d-vae.pt` keys, plus a discriminator weight the spec drops."""
    import torch

    out = {}
    for key, value in state.items():
        for pattern, repl in _SAT_VAE_RENAMES:  # first match wins (shortcut renames come first)
            if re.fullmatch(pattern, key):
                out[re.sub(pattern, repl, key)] = value
                break
        else:
            raise KeyError(f"{key}: no SAT name")
    out["loss.discriminator.main.0.weight"] = torch.zeros(2, 3, 4, 4)
    return out


def save_sat_vae(state: dict, folder: Path) -> Path:
    """`vae/3d-vae.pt`: a Lightning-style checkpoint with the weights under `state_dict`."""
    import torch

    (folder / "vae").mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": sat_vae_state(state)}, folder / "vae" / "3d-vae.pt")
    return folder


def expected_vae_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted VAE tree from the diffusers state dict alone (conv kernels permuted, norms renamed)."""
    return oracle.expected_tree(state)


def expected_vae_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """`expected_vae_tree`'s leaf shapes from the state dict's shapes alone (released sizes)."""
    flat = {}
    for key, shape in shapes.items():
        module, _, param = key.rpartition(".")
        if param == "bias" or len(shape) == 1:
            flat[f"{tree_path(module)}/{'bias' if param == 'bias' else 'scale'}"] = tuple(shape)
        else:
            flat[f"{tree_path(module)}/kernel"] = (*shape[2:], shape[1], shape[0])
    return flat


@register_spec_fixture("cogvideox/vae")
def vae_cases(tmp_path: Path) -> list[SpecCase]:
    state = state_of(vae_reference())
    expected = expected_vae_tree(state)
    save_state(state, tmp_path / "diffusers" / "vae")
    return [
        SpecCase("diffusers", tmp_path / "diffusers", expected),
        SpecCase("sat", save_sat_vae(state, tmp_path / "sat"), expected),
    ]
