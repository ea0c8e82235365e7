"""LAION's aesthetic predictor v1 (`sa_0_4_vit_l_14_linear.pth`): one linear layer on L2-normalised CLIP
ViT-L/14 image features, a score near 1-10 (VBench divides it by 10)."""

from __future__ import annotations

import jax.numpy as jnp


def aesthetic_score(params, image_features):
    """`image_features [N, 768]` (CLIP ViT-L/14's, not yet normalised) -> scores `[N]`."""
    norm = jnp.linalg.norm(image_features, axis=-1, keepdims=True)
    x = image_features / jnp.maximum(norm, 1e-12)  # torch F.normalize's eps
    return (jnp.matmul(x, params["kernel"], precision="highest") + params["bias"])[:, 0]
