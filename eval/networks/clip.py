"""CLIP image and text towers in OpenAI's layout (the `clip` package's `CLIP`; open_clip's OpenAI models).

The towers are vidax's encoders (`vidax.zoo.parts.encoders`): OpenAI's ViT is transformers'
`CLIPVisionModelWithProjection` under other names (`conv1` is the patch embedding, `ln_pre`/`ln_post`
the pre- and post-norms, `attn.in_proj` the fused q/k/v, QuickGELU, LayerNorm eps 1e-5), and its text
transformer is `CLIPTextModel` pooled at the largest token id (the end token) followed by
`text_projection` (`x @ text_projection`). Sizes are read from the weights, as `clip.model.build_model`
reads them: widths, layer counts, patch, grid and context from the shapes, 64-wide heads.
Tree: `visual/...` (`CLIPVisionModelWithProjection`'s) and `textual/text_model/...` plus
`textual/text_projection/kernel`.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.clip import CLIP_MEAN, CLIP_STD, CLIPVisionModelWithProjection
from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel
from vidax.zoo.parts.encoders.vision import VisionConfig

HEAD_WIDTH = 64  # OpenAI's CLIP: heads = width // 64
MEAN, STD = CLIP_MEAN, CLIP_STD


@dataclasses.dataclass(frozen=True)
class CLIPSizes:
    vision: VisionConfig
    text: CLIPTextConfig | None
    embed_dim: int

    @property
    def image_size(self) -> int:
        return self.vision.image_size


def clip_sizes(tree: Mapping[str, np.ndarray]) -> CLIPSizes:
    """The towers' sizes from a converted tree's shapes (ViT-B/32: 768 wide, 12 layers, patch 32; ViT-L/14: 1024, 24, 14)."""
    v = "visual/vision_model/"
    patch, _, _, width = tree[v + "embeddings/patch_embedding/kernel"].shape
    positions = tree[v + "embeddings/position_embedding/embedding"].shape[0]
    layers, _, mlp = tree[v + "encoder/layers/mlp/fc1/kernel"].shape
    grid = int(round((positions - 1) ** 0.5))
    vision = VisionConfig(hidden_size=width, intermediate_size=mlp, num_hidden_layers=layers,
                          num_attention_heads=max(width // HEAD_WIDTH, 1), image_size=grid * patch, patch_size=patch,
                          hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=tree["visual/visual_projection/kernel"].shape[1])
    text = None
    if "textual/text_projection/kernel" in tree:
        t = "textual/text_model/"
        vocab, text_width = tree[t + "embeddings/token_embedding/embedding"].shape
        text_layers, _, text_mlp = tree[t + "encoder/layers/mlp/fc1/kernel"].shape
        text = CLIPTextConfig(vocab_size=vocab, hidden_size=text_width, intermediate_size=text_mlp,
                              num_hidden_layers=text_layers, num_attention_heads=max(text_width // HEAD_WIDTH, 1),
                              max_position_embeddings=tree[t + "embeddings/position_embedding/embedding"].shape[0])
    return CLIPSizes(vision, text, vision.projection_dim)


def encode_image(sizes: CLIPSizes, params, pixels):
    """`pixels [B, 3, S, S]` (normalised) -> projected image features `[B, embed]` (not normalised)."""
    return CLIPVisionModelWithProjection(sizes.vision).apply({"params": params["visual"]}, pixels).image_embeds


def encode_text(sizes: CLIPSizes, params, token_ids):
    """`token_ids [B, context]` (start, text, end, zero padding) -> projected text features `[B, embed]`."""
    textual = params["textual"]
    pooled = CLIPTextModel(sizes.text).apply({"params": {"text_model": textual["text_model"]}}, token_ids).pooler_output
    return jnp.matmul(pooled, textual["text_projection"]["kernel"], precision="highest")
