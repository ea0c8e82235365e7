"""SigLIP vision tower (transformers `SiglipVisionModel`) and its preprocessing.

HunyuanVideo-1.5 I2V takes `last_hidden_state` (post-normed, 729 tokens for so400m-patch14-384).
No class token, no pre-norm, a biased patch convolution and a multihead-attention pooling head
(`vision_use_head`) whose output is `pooled`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from vidax.zoo.parts.encoders.common import ENCODER_SHARDING_RULES, pick_fields
from vidax.zoo.parts.encoders.vision import VisionConfig, VisionTransformer

SHARDING_RULES = ENCODER_SHARDING_RULES

SIGLIP_MEAN = (0.5, 0.5, 0.5)
SIGLIP_STD = (0.5, 0.5, 0.5)


def siglip_vision_config(hf: Mapping[str, Any]) -> VisionConfig:
    """`VisionConfig` from a transformers `SiglipVisionConfig` dict (a full `SiglipConfig`'s vision part too)."""
    hf = hf.get("vision_config", hf)
    return VisionConfig(**pick_fields(VisionConfig, {"hidden_act": "gelu_pytorch_tanh", **hf},
                                                   read=("vision_use_head",)), class_token=False,
                        pre_norm=False, patch_bias=True, post_norm_tokens=True,
                        pooling_head=bool(hf.get("vision_use_head", True)), projection_dim=None)


def SiglipVisionModel(config: VisionConfig, dtype: Any = np.float32) -> VisionTransformer:  # noqa: N802
    """The SigLIP image encoder: `model.apply(params, pixel_values [B, 3, H, W])` -> `VisionOutput`.

    Args:
      config: from `siglip_vision_config`.
      dtype: compute dtype.
    """
    return VisionTransformer(config, dtype)


def siglip_preprocess(images, size: int = 384, mean=SIGLIP_MEAN, std=SIGLIP_STD) -> np.ndarray:
    """transformers `SiglipImageProcessor`: resize to `size`×`size` (bicubic), rescale, normalise.

    Args:
      images: one uint8 `[H, W, 3]` RGB array or a list of them.
      size: the square output size (384 for so400m-patch14-384).
      mean, std: per-channel normalisation statistics.

    Returns:
      float32 `[B, 3, size, size]` pixel values.
    """
    from PIL import Image

    images = [images] if isinstance(images, np.ndarray) and images.ndim == 3 else list(images)
    out = []
    for image in images:
        image = np.asarray(Image.fromarray(np.asarray(image, np.uint8)).resize((size, size), Image.BICUBIC))
        image = (image.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        out.append(image.transpose(2, 0, 1))
    return np.stack(out)
