"""CLIP vision tower with projection (transformers `CLIPVisionModelWithProjection`) and its preprocessing.

Wan I2V feeds `hidden_states[-2]` (the penultimate layer's output, 257 tokens for ViT-H/14 at 224)
to its DiT; the official Wan code computes the same thing by running all blocks but the last.
"""

from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.common import ENCODER_SHARDING_RULES, pick_fields
from vidax.zoo.parts.encoders.vision import VisionConfig, VisionOutput, VisionTransformer
from vidax.zoo.compute.layers import Dense

SHARDING_RULES = ENCODER_SHARDING_RULES

# transformers CLIPImageProcessor defaults (OpenAI CLIP statistics)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def clip_vision_config(hf: Mapping[str, Any]) -> VisionConfig:
    """`VisionConfig` from a transformers `CLIPVisionConfig` dict (a full `CLIPConfig`'s vision part too)."""
    hf = hf.get("vision_config", hf)
    fields = {**pick_fields(VisionConfig, hf), "class_token": True, "pre_norm": True, "patch_bias": False,
              "post_norm_tokens": False, "pooling_head": False}
    return VisionConfig(**fields)


# The visual tower of Wan's official `models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth`
# (Wan-Video/Wan2.1 wan/modules/clip.py `clip_xlm_roberta_vit_h_14`: width 1280, 32 layers, 16 heads,
# mlp ratio 4, patch 14 at 224 px, exact GELU, eps 1e-5, token pooling to 1024). The file carries no
# config, and the head count is not visible in its shapes.
WAN_CLIP_VISION = VisionConfig(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                               image_size=224, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-5,
                               projection_dim=1024)


class CLIPVisionModelWithProjection(nn.Module):
    """The CLIP image encoder.

    `__call__(pixel_values [B, 3, H, W])` returns a `VisionOutput`: `hidden_states[-2]` is what
    Wan I2V uses; `image_embeds` is the projected, post-normed class token.

    Attributes:
      config: sizes; `projection_dim` must be set when `with_projection`.
      dtype: compute dtype.
      with_projection: False for a checkpoint of transformers' `CLIPVisionModel` (what diffusers'
        Wan I2V repos ship): no `visual_projection`, `image_embeds` is None.
    """

    config: VisionConfig
    dtype: Any = jnp.float32
    with_projection: bool = True

    @nn.compact
    def __call__(self, pixel_values) -> VisionOutput:
        out = VisionTransformer(self.config, self.dtype, name="vision_model")(pixel_values)
        if not self.with_projection:
            return out
        projection = Dense(self.config.projection_dim, axes=("embed", None), use_bias=False, name="visual_projection")
        embeds = projection(out.pooled)
        return out._replace(image_embeds=embeds)


def _resize_shortest_edge(image: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    h, w = image.shape[:2]
    short, long = (h, w) if h <= w else (w, h)
    new_long = int(size * long / short)
    new_h, new_w = (size, new_long) if h <= w else (new_long, size)
    return np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BICUBIC))


def _center_crop(image: np.ndarray, size: int) -> np.ndarray:
    h, w = image.shape[:2]
    top, left = (h - size) // 2, (w - size) // 2
    return image[top:top + size, left:left + size]


def clip_preprocess(images, size: int = 224, mean=CLIP_MEAN, std=CLIP_STD) -> np.ndarray:
    """transformers `CLIPImageProcessor`: shortest edge -> `size` (bicubic), centre crop, rescale, normalise.

    Args:
      images: one uint8 `[H, W, 3]` array or a list of them (RGB).
      size: the shortest-edge resize and crop size (224 for ViT-H/14).
      mean, std: per-channel normalisation statistics.

    Returns:
      float32 `[B, 3, size, size]` pixel values.
    """
    images = [images] if isinstance(images, np.ndarray) and images.ndim == 3 else list(images)
    out = []
    for image in images:
        image = _center_crop(_resize_shortest_edge(np.asarray(image, np.uint8), size), size)
        image = (image.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        out.append(image.transpose(2, 0, 1))
    return np.stack(out)
