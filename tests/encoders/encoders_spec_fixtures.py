"""Test checkpoints of the encoder specs for the translator's mutation test (vidax.translator.testing).

Each case is a tiny transformers model saved in a layout its spec reads, with the tree it must
convert to computed here without the spec: CONTRIBUTING.md's naming applied to the state dict
(`.` -> `/`, list index -> `_N`, Linear weight -> kernel transposed, Conv weight -> kernel
permuted, norm weight -> scale, embedding weight -> embedding, `block_N`/`layers_N` stacked).
"""

from __future__ import annotations

import re

import numpy as np
import torch
import transformers

from tests.encoders import test_clip, test_decoder, test_siglip, test_t5
from tests.oracle import perturb, save_state, stack_layers, to_np, torch_leaf, tree_path
from vidax.translator.testing import SpecCase, register_spec_fixture

EMBEDDINGS = ("shared", "embed_tokens", "position_embedding", "relative_attention_bias")
STACKS = {r".*?(?:block|layers)": r"\g<0>"}  # every `block_N` / `layers_N` list, stacked under its own name


def expected_tree(state: dict, strip: str = "", drop: str = r"$^", renames: dict | None = None) -> dict:
    """The converted tree of a transformers state dict under the project's naming conventions."""
    leaves = []
    for key, tensor in state.items():
        if re.fullmatch(drop, key):
            continue
        key, value = key.removeprefix(strip), to_np(tensor)
        module, name = key.rsplit(".", 1)
        if name in ("in_proj_weight", "in_proj_bias"):  # nn.MultiheadAttention's fused q/k/v
            leaves += [(f"{tree_path(module)}/{part}_proj/{'kernel' if chunk.ndim == 2 else 'bias'}", chunk.T)
                       for part, chunk in zip("qkv", np.split(value, 3))]
            continue
        path, value = torch_leaf(key, value, EMBEDDINGS)
        leaves.append(((renames or {}).get(path, path), value))
    return stack_layers(leaves, STACKS)


@register_spec_fixture("encoders/t5")
def t5_cases(tmp_path):
    cases = []
    for name, ff in (("v1_1", "gated-gelu"), ("v1_0", "relu")):
        model = perturb(transformers.T5EncoderModel(transformers.T5Config(**test_t5.SIZES, feed_forward_proj=ff)))
        model.save_pretrained(tmp_path / name / "text_encoder")
        table = "encoder/block_0/layer_0/SelfAttention/relative_attention_bias/embedding"
        expected = expected_tree(model.state_dict(), drop=r"encoder\.embed_tokens\.weight",
                                 renames={table: "encoder/relative_attention_bias/embedding"})
        cases.append(SpecCase(name, tmp_path / name, expected))
        glyph = tmp_path / f"glyph_{name}" / "byt5_model.pt"
        test_t5.glyph_checkpoint(model, glyph, wrapped=name == "v1_1")
        cases.append(SpecCase(f"glyph_{name}", glyph, expected))
    return cases


@register_spec_fixture("encoders/umt5")
def umt5_cases(tmp_path):
    model = perturb(transformers.UMT5EncoderModel(transformers.UMT5Config(**test_t5.SIZES, feed_forward_proj="gated-gelu")))
    model.save_pretrained(tmp_path / "hf" / "text_encoder")
    state = {k: v for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    torch.save(test_t5.to_official(state, test_t5.OFFICIAL_UMT5_NAMES), tmp_path / "models_t5_umt5-xxl-enc-bf16.pth")
    expected = expected_tree(state)
    return [SpecCase("transformers", tmp_path / "hf", expected),
            SpecCase("official", tmp_path / "models_t5_umt5-xxl-enc-bf16.pth", expected)]


@register_spec_fixture("encoders/clip_vision")
def clip_cases(tmp_path):
    model = perturb(transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(**test_clip.HF_CONFIG)))
    model.save_pretrained(tmp_path / "hf" / "image_encoder")
    official = tmp_path / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"
    torch.save(test_clip.to_official(model), official)
    expected = expected_tree(model.state_dict(), drop=r".*position_ids")
    return [SpecCase("transformers", tmp_path / "hf", expected), SpecCase("official", official, expected)]


@register_spec_fixture("encoders/siglip_vision")
def siglip_cases(tmp_path):
    model = perturb(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**test_siglip.HF_CONFIG)))
    state = model.state_dict()
    save_state(state, tmp_path / "v5" / "image_encoder", filename="model.safetensors")
    save_state({"vision_model." + k: v for k, v in state.items()}, tmp_path / "v4" / "image_encoder", filename="model.safetensors")
    expected = expected_tree(state, drop=r".*position_ids")
    return [SpecCase("transformers5", tmp_path / "v5", expected), SpecCase("transformers4", tmp_path / "v4", expected)]


@register_spec_fixture("encoders/decoder")
def decoder_cases(tmp_path):
    cases = []
    for name, build in test_decoder.VARIANTS.items():
        torch.manual_seed(0)
        model = perturb(build())
        model.save_pretrained(tmp_path / name / "text_encoder")
        strip = "model.language_model." if name == "qwen2_5_vl_full" else ""
        expected = expected_tree(model.state_dict(), strip=strip, drop=r"model\.visual\..*|lm_head\.weight")
        cases.append(SpecCase(name, tmp_path / name, expected))
    return cases
