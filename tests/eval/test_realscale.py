"""The metric networks at their real sizes, without weights: each reference built at its published
configuration on the meta device, its state dict written as a header-only safetensors file (a sparse hole
where the data would be), converted through the spec with the JAX module's own parameter shapes as
`expected`: every tensor used, every leaf produced with its shape (the translator's strict accounting)."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "references"))
import tiny  # noqa: E402
from standins import oracles  # noqa: E402

from vidax.eval.networks import clip as clip_net
from vidax.eval.networks import dino as dino_net
from vidax.eval.networks.i3d import InceptionI3d
from vidax.translator import convert
from vidax.zoo.parts.encoders.clip import CLIPVisionModelWithProjection
from vidax.zoo.parts.encoders.clip_text import CLIPTextModel

# clip.model.CLIP(embed_dim, image_resolution, vision_layers, vision_width, vision_patch_size, context_length,
# vocab_size, transformer_width, transformer_heads, transformer_layers), as build_model reads OpenAI's files
CLIP_REAL = {"ViT-B-32": (512, 224, 12, 768, 32, 77, 49408, 512, 8, 12),
             "ViT-L-14": (768, 224, 24, 1024, 14, 77, 49408, 768, 12, 12)}


def _header_only(state: dict, path: Path) -> Path:
    header, offset = {}, 0
    for key, value in state.items():
        size = value.numel() * 4
        header[key] = {"dtype": "F32", "shape": list(value.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return path


def _flat_shapes(params, prefix: str = "") -> dict[str, tuple[int, ...]]:
    from flax.traverse_util import flatten_dict

    return {prefix + path: leaf.shape for path, leaf in flatten_dict(dict(params), sep="/").items()}


def _init_shapes(module, *inputs) -> dict:
    import flax.linen as nn

    return nn.unbox(jax.eval_shape(lambda: module.init(jax.random.key(0), *inputs))["params"])


@pytest.mark.parametrize("name", CLIP_REAL)
def test_clip_at_real_size(name, tmp_path):
    with torch.device("meta"):
        model = oracles().clip_model.CLIP(*CLIP_REAL[name])
    path = _header_only({k: v for k, v in model.state_dict().items()}, tmp_path / f"{name}.safetensors")
    embed, image, layers, width, patch, context, vocab, text_width, text_heads, text_layers = CLIP_REAL[name]
    vision = clip_net.VisionConfig(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
                                   num_attention_heads=width // 64, image_size=image, patch_size=patch,
                                   projection_dim=embed)
    text = clip_net.CLIPTextConfig(vocab_size=vocab, hidden_size=text_width, intermediate_size=4 * text_width,
                                   num_hidden_layers=text_layers, num_attention_heads=text_heads,
                                   max_position_embeddings=context)
    expected = _flat_shapes(_init_shapes(CLIPVisionModelWithProjection(vision), jnp.zeros((1, 3, image, image))), "visual/")
    expected |= _flat_shapes(_init_shapes(CLIPTextModel(text), jnp.zeros((1, context), jnp.int32)), "textual/")
    expected["textual/text_projection/kernel"] = (text_width, embed)
    tree = convert("eval/clip", path, expected=expected, lazy=True)
    sizes = clip_net.clip_sizes({p: jax.ShapeDtypeStruct(s, jnp.float32) for p, s in tree.shapes().items()})
    assert (sizes.vision.num_attention_heads, sizes.text.num_attention_heads, sizes.embed_dim) == (width // 64, text_heads, embed)


def test_dino_vit_b16_at_real_size(tmp_path):
    with torch.device("meta"):
        from transformers import ViTConfig, ViTModel

        model = ViTModel(ViTConfig(layer_norm_eps=1e-6, qkv_bias=True), add_pooling_layer=False)  # 768, 12 x 12, patch 16
    path = _header_only(tiny.dino_hub_state(model), tmp_path / "dino.safetensors")
    config = dino_net.VisionConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                   image_size=224, patch_size=16, hidden_act="gelu", layer_norm_eps=1e-6, pre_norm=False,
                                   patch_bias=True)
    expected = _flat_shapes(_init_shapes(dino_net.DinoViT(config), jnp.zeros((1, 3, 224, 224))))
    tree = convert("eval/dino", path, expected=expected, lazy=True)
    assert dino_net.dino_config({p: jax.ShapeDtypeStruct(s, jnp.float32) for p, s in tree.shapes().items()}) == config


def test_i3d_and_aesthetic_head_at_real_size(tmp_path):
    from cdfvd.third_party.i3d.pytorch_i3d import InceptionI3d as Reference

    with torch.device("meta"):
        i3d, head = Reference(400, in_channels=3), torch.nn.Linear(768, 1)
    path = _header_only(dict(i3d.state_dict()), tmp_path / "i3d.safetensors")
    expected = _flat_shapes(_init_shapes(InceptionI3d(), jnp.zeros((1, 16, 224, 224, 3))))
    convert("eval/i3d", path, expected=expected, lazy=True)
    convert("eval/aesthetic", _header_only(dict(head.state_dict()), tmp_path / "head.safetensors"),
            expected={"kernel": (768, 1), "bias": (1,)}, lazy=True)
