"""Test checkpoints of the HunyuanVideo 1.0 specs, for the translator's mutation test and ours.

Registered with `vidax.translator.testing`: for each spec, tiny perturbed diffusers references (T2V,
and the I2V token_replace DiT) saved in every layout, and the tree each must convert to, computed from
the diffusers state dict alone (renames, transposes, stacks, the single blocks' MLP cut into its
column blocks), not from the spec. The official DiT is the diffusers state dict renamed by the
inverse of diffusers' scripts/convert_hunyuan_video_to_diffusers.py (table below), fused back into
`img_attn_qkv` / `linear1` / `linear2`, and saved as that repo does: `torch.save({"module": sd})`.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests import oracle
from tests.oracle import build_perturbed, perturb, rename, save_state, split_leaves, stack_layers, to_np, torch_leaf, tree_path
from vidax.translator.testing import SpecCase, register_spec_fixture

TINY_DIT = dict(
    in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2,
    num_single_layers=2, num_refiner_layers=2, patch_size=2, patch_size_t=1, text_embed_dim=24,
    pooled_projection_dim=12, rope_axes_dim=(4, 6, 6),
)
TINY_VAE = dict(block_out_channels=(8, 16, 16, 16), latent_channels=4, layers_per_block=1, norm_num_groups=4)
MLP_CHUNKS = 4  # mlp_ratio of every released HunyuanVideo DiT

# diffusers key (full match) -> official key (hyvideo module names), per diffusers' converter script.
DIT_TO_OFFICIAL = [
    (r"x_embedder\.proj\.(\w+)", r"img_in.proj.\1"),
    (r"time_text_embed\.timestep_embedder\.linear_1\.(\w+)", r"time_in.mlp.0.\1"),
    (r"time_text_embed\.timestep_embedder\.linear_2\.(\w+)", r"time_in.mlp.2.\1"),
    (r"time_text_embed\.guidance_embedder\.linear_1\.(\w+)", r"guidance_in.mlp.0.\1"),
    (r"time_text_embed\.guidance_embedder\.linear_2\.(\w+)", r"guidance_in.mlp.2.\1"),
    (r"time_text_embed\.text_embedder\.linear_1\.(\w+)", r"vector_in.in_layer.\1"),
    (r"time_text_embed\.text_embedder\.linear_2\.(\w+)", r"vector_in.out_layer.\1"),
    (r"context_embedder\.time_text_embed\.timestep_embedder\.linear_1\.(\w+)", r"txt_in.t_embedder.mlp.0.\1"),
    (r"context_embedder\.time_text_embed\.timestep_embedder\.linear_2\.(\w+)", r"txt_in.t_embedder.mlp.2.\1"),
    (r"context_embedder\.time_text_embed\.text_embedder\.(linear_[12])\.(\w+)", r"txt_in.c_embedder.\1.\2"),
    (r"context_embedder\.proj_in\.(\w+)", r"txt_in.input_embedder.\1"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.(norm[12])\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.\2.\3"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.attn\.to_out\.0\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.self_attn_proj.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.mlp.fc1.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.mlp.fc2.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.norm_out\.linear\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.adaLN_modulation.1.\2"),
    (r"transformer_blocks\.(\d+)\.norm1\.linear\.(\w+)", r"double_blocks.\1.img_mod.linear.\2"),
    (r"transformer_blocks\.(\d+)\.norm1_context\.linear\.(\w+)", r"double_blocks.\1.txt_mod.linear.\2"),
    (r"transformer_blocks\.(\d+)\.attn\.norm_([qk])\.weight", r"double_blocks.\1.img_attn_\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn\.norm_added_([qk])\.weight", r"double_blocks.\1.txt_attn_\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn\.to_out\.0\.(\w+)", r"double_blocks.\1.img_attn_proj.\2"),
    (r"transformer_blocks\.(\d+)\.attn\.to_add_out\.(\w+)", r"double_blocks.\1.txt_attn_proj.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"double_blocks.\1.img_mlp.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"double_blocks.\1.img_mlp.fc2.\2"),
    (r"transformer_blocks\.(\d+)\.ff_context\.net\.0\.proj\.(\w+)", r"double_blocks.\1.txt_mlp.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.ff_context\.net\.2\.(\w+)", r"double_blocks.\1.txt_mlp.fc2.\2"),
    (r"single_transformer_blocks\.(\d+)\.attn\.norm_([qk])\.weight", r"single_blocks.\1.\2_norm.weight"),
    (r"single_transformer_blocks\.(\d+)\.norm\.linear\.(\w+)", r"single_blocks.\1.modulation.linear.\2"),
    (r"single_transformer_blocks\.(\d+)\.proj_out\.(\w+)", r"single_blocks.\1.linear2.\2"),
    (r"proj_out\.(\w+)", r"final_layer.linear.\1"),
]


def official_dit_state(state: dict) -> dict:
    """diffusers state dict -> official names: q/k/v fused (refiner, both streams), single blocks'
    q/k/v/mlp fused into `linear1`, the final AdaLN's halves swapped to (shift, scale)."""
    import torch

    state = dict(state)
    out = {}

    def fuse(prefix: str, names, new: str):
        for leaf in ("weight", "bias"):
            out[f"{new}.{leaf}"] = torch.cat([state.pop(f"{prefix}{n}.{leaf}") for n in names], 0)

    for key in [k for k in state if k.endswith(".attn.to_q.weight")]:
        prefix = key[: -len("to_q.weight")]
        if m := re.fullmatch(r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.attn\.", prefix):
            fuse(prefix, ("to_q", "to_k", "to_v"), f"txt_in.individual_token_refiner.blocks.{m.group(1)}.self_attn_qkv")
        elif m := re.fullmatch(r"transformer_blocks\.(\d+)\.attn\.", prefix):
            fuse(prefix, ("to_q", "to_k", "to_v"), f"double_blocks.{m.group(1)}.img_attn_qkv")
            fuse(prefix, ("add_q_proj", "add_k_proj", "add_v_proj"), f"double_blocks.{m.group(1)}.txt_attn_qkv")
        elif m := re.fullmatch(r"single_transformer_blocks\.(\d+)\.attn\.", prefix):
            i = m.group(1)
            for leaf in ("weight", "bias"):
                parts = [state.pop(f"{prefix}to_{p}.{leaf}") for p in "qkv"]
                parts.append(state.pop(f"single_transformer_blocks.{i}.proj_mlp.{leaf}"))
                out[f"single_blocks.{i}.linear1.{leaf}"] = torch.cat(parts, 0)
    for leaf in ("weight", "bias"):
        scale, shift = state.pop(f"norm_out.linear.{leaf}").chunk(2, 0)
        out[f"final_layer.adaLN_modulation.1.{leaf}"] = torch.cat([shift, scale], 0)
    out.update({rename(k, DIT_TO_OFFICIAL): v for k, v in state.items()})
    return out


def save_official_dit(state: dict, folder: Path) -> Path:
    """The official repo's file: `transformers/mp_rank_00_model_states.pt`, a DeepSpeed `{"module": ...}`."""
    import torch

    path = folder / "transformers" / "mp_rank_00_model_states.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"module": {k: v.detach().clone().contiguous() for k, v in official_dit_state(state).items()}}, path)
    return folder


def _leaves(key: str, value: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """(tree path, array) of one diffusers tensor, blocks not yet stacked."""
    module, _, param = key.rpartition(".")
    if module == "norm_out.linear":  # (scale, shift) halves as two leaves
        return split_leaves(module, value, ("scale", "shift"))
    single = re.fullmatch(r"(single_transformer_blocks\.\d+)\.(proj_mlp|proj_out)", module)
    if single and not (single.group(2) == "proj_out" and param == "bias"):
        prefix = tree_path(single.group(1))
        if single.group(2) == "proj_mlp":  # column blocks of the [D, 4D] kernel
            return split_leaves(f"{single.group(1)}.proj_mlp.chunk", value, tuple(str(c) for c in range(MLP_CHUNKS)))
        rows = np.split(value.T, MLP_CHUNKS + 1, axis=0)  # row blocks of the [5D, D] kernel
        names = ["attn"] + [f"chunk_{c}" for c in range(MLP_CHUNKS)]
        return [(f"{prefix}/proj_out/{n}/kernel", v) for n, v in zip(names, rows)]
    return [torch_leaf(key, value)]


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted DiT tree from the diffusers state dict alone (both layouts)."""
    leaves = [leaf for key, tensor in state.items() for leaf in _leaves(key, to_np(tensor))]
    return stack_layers(leaves, {"transformer_blocks": "blocks", "single_transformer_blocks": "single_blocks"})


def dit_reference(seed: int = 0, **overrides):
    from diffusers import HunyuanVideoTransformer3DModel

    return build_perturbed(HunyuanVideoTransformer3DModel, {**TINY_DIT, **overrides}, seed)


def vae_reference(seed: int = 3):
    from diffusers import AutoencoderKLHunyuanVideo

    return build_perturbed(AutoencoderKLHunyuanVideo, TINY_VAE, seed, init_seed=0)


@register_spec_fixture("hunyuan_video/transformer")
def transformer_cases(tmp_path: Path) -> list[SpecCase]:
    state = dit_reference().state_dict()  # the I2V (token_replace) DiT has the same parameters
    expected = expected_tree(state)
    return [
        SpecCase("diffusers", save_state(state, tmp_path / "diffusers" / "transformer").parent, expected),
        SpecCase("official", save_official_dit(state, tmp_path / "official"), expected),
    ]


def save_official_vae(state: dict, folder: Path) -> Path:
    """The official repo's `vae/pytorch_model.pt`: the same keys, a torch.save of the state dict."""
    import torch

    path = folder / "vae" / "pytorch_model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().clone().contiguous() for k, v in state.items()}, path)
    return folder


@register_spec_fixture("hunyuan_video/vae")
def vae_cases(tmp_path: Path) -> list[SpecCase]:
    state = vae_reference().state_dict()
    expected = oracle.expected_tree(state)
    return [
        SpecCase("diffusers", save_state(state, tmp_path / "diffusers" / "vae").parent, expected),
        SpecCase("official", save_official_vae(state, tmp_path / "official"), expected),
    ]


# ---------------------------------------------------------------------------------------------
# Text towers: CLIP-L text (pooled) and the I2V Llava


TABLES = ("token_embedding", "position_embedding", "embed_tokens")


def expected_encoder_tree(state: dict, prefixes: dict[str, str], ignore: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """A transformers state dict as our encoder trees: `prefixes` maps a key prefix to a tree prefix;
    Linear weights -> kernel (transposed), conv -> kernel, tables -> embedding, 1-D norm weights ->
    scale; `layers.N.` stacked."""
    parts = {p: {} for p in prefixes}
    for key, tensor in state.items():
        if key not in ignore:
            prefix = next(p for p in sorted(prefixes, key=len, reverse=True) if key.startswith(p))
            parts[prefix][key[len(prefix):]] = tensor
    tree = {}
    for prefix, part in parts.items():
        head = f"{prefixes[prefix]}/" if prefixes[prefix] else ""
        tree.update(oracle.expected_tree(part, {r".*layers": r"\g<0>"}, head, TABLES))  # `layers_N` stacked as `layers`
    return tree


def save_transformers(state: dict, folder: Path) -> Path:
    return save_state(state, folder, filename="model.safetensors")


def clip_text_reference(seed: int = 5):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.CLIPTextConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=12, eos_token_id=2)
    return perturb(transformers.CLIPTextModel(config), seed)


def llava_reference(seed: int = 6, bias: bool = False):
    import torch
    import transformers

    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                           image_size=16, patch_size=8)
    text = transformers.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=1, attention_bias=bias, mlp_bias=bias)
    config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=39, pad_token_id=38)
    return perturb(transformers.LlavaForConditionalGeneration(config), seed)


@register_spec_fixture("encoders/clip_text")
def clip_text_cases(tmp_path: Path) -> list[SpecCase]:
    state = clip_text_reference().state_dict()  # transformers 5 names; the Hub's files carry `text_model.`
    expected = expected_encoder_tree(state, {"": "text_model"})
    legacy = {f"text_model.{k}": v for k, v in state.items()}
    return [
        SpecCase("transformers5", save_transformers(state, tmp_path / "t5" / "text_encoder_2").parent, expected),
        SpecCase("transformers4", save_transformers(legacy, tmp_path / "t4" / "text_encoder_2").parent, expected),
    ]


def llava_legacy_names(state: dict) -> dict:
    """transformers 5 Llava names -> the transformers 4 names the Hub's checkpoints carry."""
    renames = (("model.vision_tower.", "vision_tower.vision_model."), ("model.multi_modal_projector.", "multi_modal_projector."),
               ("model.language_model.", "language_model.model."), ("lm_head.", "language_model.lm_head."))
    out = {}
    for key, value in state.items():
        old, new = next((o, n) for o, n in renames if key.startswith(o))
        out[new + key[len(old):]] = value
    return out


@register_spec_fixture("encoders/llava")
def llava_cases(tmp_path: Path) -> list[SpecCase]:
    prefixes = {"model.vision_tower.": "vision_tower/vision_model", "model.multi_modal_projector.": "multi_modal_projector",
                "model.language_model.": "language_model"}
    state, biased = llava_reference().state_dict(), llava_reference(bias=True).state_dict()  # biased: optional rule fires
    return [
        SpecCase("transformers5", save_transformers(state, tmp_path / "t5" / "text_encoder").parent,
                 expected_encoder_tree(state, prefixes, ignore=("lm_head.weight",))),
        SpecCase("transformers4-biased", save_transformers(llava_legacy_names(biased), tmp_path / "t4" / "text_encoder").parent,
                 expected_encoder_tree(biased, prefixes, ignore=("lm_head.weight",))),
    ]
