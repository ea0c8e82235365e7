"""DINO's ViT-B/16 (`dino_vitb16`, what VBench's subject consistency loads through torch.hub): the class token
after the final LayerNorm.

A pre-norm ViT as vidax's vision tower builds it (`VisionEncoder`: fused q/k/v split by the spec, exact
GELU, LayerNorm eps 1e-6), with DINO's own embeddings: a biased patch convolution, a class token, and
position embeddings resized to the frame's patch grid the way DINO's `interpolate_pos_encoding` does it
(bicubic with the scale factor `(grid + 0.1) / trained grid` per axis, so its taps differ slightly from a
resize to a size). VBench resizes frames' shorter side to 224 without cropping, so a 16:9 clip runs on a
14 x 24 grid. Tree: `embeddings/...`, `encoder/layers/...` (stacked), `post_layernorm`.
"""

from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vidax.eval.resize import interpolation_matrix
from vidax.zoo.compute.layers import LayerNorm, logical_param
from vidax.zoo.parts.encoders.vision import VisionConfig, VisionEncoder

MEAN = (0.485, 0.456, 0.406)  # ImageNet statistics (VBench's dino_transform)
STD = (0.229, 0.224, 0.225)
HEAD_WIDTH = 64


def dino_config(tree: Mapping[str, np.ndarray]) -> VisionConfig:
    """Sizes from the converted tree (ViT-B/16: 768 wide, 12 layers, 12 heads, patch 16, 14 x 14 positions)."""
    patch, _, channels, width = tree["embeddings/patch_embedding/kernel"].shape
    layers, _, mlp = tree["encoder/layers/mlp/fc1/kernel"].shape
    grid = int(round((tree["embeddings/position_embedding"].shape[0] - 1) ** 0.5))
    return VisionConfig(hidden_size=width, intermediate_size=mlp, num_hidden_layers=layers,
                        num_attention_heads=max(width // HEAD_WIDTH, 1), num_channels=channels, image_size=grid * patch,
                        patch_size=patch, hidden_act="gelu", layer_norm_eps=1e-6, class_token=True, pre_norm=False,
                        patch_bias=True)


def position_matrices(trained_grid: int, grid_h: int, grid_w: int) -> tuple[np.ndarray, np.ndarray] | None:
    """DINO's bicubic resize of the position grid as row and column matrices (None: no resize needed)."""
    if (grid_h, grid_w) == (trained_grid, trained_grid):
        return None
    rows = interpolation_matrix(trained_grid, grid_h, "bicubic", scale=(grid_h + 0.1) / trained_grid)
    cols = interpolation_matrix(trained_grid, grid_w, "bicubic", scale=(grid_w + 0.1) / trained_grid)
    return rows.astype(np.float32), cols.astype(np.float32)


class DinoViT(nn.Module):
    """`__call__(pixels [B, 3, H, W])` (ImageNet-normalised; H, W multiples of the patch) -> `[B, width]`."""

    config: VisionConfig

    @nn.compact
    def __call__(self, pixels):
        c = self.config
        b, ch, h, w = pixels.shape
        p = c.patch_size
        gh, gw = h // p, w // p
        patches = pixels[:, :, :gh * p, :gw * p].reshape(b, ch, gh, p, gw, p)
        patches = patches.transpose(0, 2, 4, 3, 5, 1).reshape(b, gh * gw, p * p * ch)  # [B, N, p*p*C]
        x = _Embeddings(c, name="embeddings")(patches, gh, gw)
        last, _ = VisionEncoder(c, name="encoder")(x)
        return LayerNorm(c.layer_norm_eps, name="post_layernorm")(last[:, 0])


class _PatchEmbedding(nn.Module):
    """A stride-p, size-p convolution with a bias as a matmul over flattened patches; kernel `[p, p, C, D]`."""

    config: VisionConfig

    @nn.compact
    def __call__(self, patches):
        c = self.config
        kernel = logical_param(self, "kernel", (c.patch_size, c.patch_size, c.num_channels, c.hidden_size),
                               (None, None, "conv_in", "embed"))
        bias = logical_param(self, "bias", (c.hidden_size,), ("embed",), nn.initializers.zeros)
        y = jnp.matmul(patches, kernel.reshape(-1, c.hidden_size).astype(patches.dtype), precision="highest")
        return y + bias.astype(y.dtype)


class _Embeddings(nn.Module):
    """DINO `VisionTransformer.prepare_tokens`: patches, the class token, position embeddings for this grid."""

    config: VisionConfig

    @nn.compact
    def __call__(self, patches, grid_h: int, grid_w: int):
        c = self.config
        x = _PatchEmbedding(c, name="patch_embedding")(patches)  # [B, N, D]
        cls = logical_param(self, "class_embedding", (c.hidden_size,), ("embed",))
        x = jnp.concatenate([jnp.broadcast_to(cls.astype(x.dtype), (x.shape[0], 1, c.hidden_size)), x], axis=1)
        table = logical_param(self, "position_embedding", (c.num_positions, c.hidden_size), (None, "embed"))
        trained = c.image_size // c.patch_size
        resize = position_matrices(trained, grid_h, grid_w)
        if resize is not None:
            grid = table[1:].reshape(trained, trained, c.hidden_size)
            grid = jnp.einsum("hH,HWd->hWd", resize[0], grid, precision="highest")
            grid = jnp.einsum("wW,hWd->hwd", resize[1], grid, precision="highest")
            table = jnp.concatenate([table[:1], grid.reshape(grid_h * grid_w, c.hidden_size)], axis=0)
        return x + table.astype(x.dtype)[None]
