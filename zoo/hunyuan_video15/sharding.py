"""Sharding rules of the HunyuanVideo-1.5 components, and placement of their host trees.

The DiT uses the shared table: Megatron column -> row on "heads" / "mlp" (q/k/v, FFN in; output
projections and FFN out row-parallel, their bias added once after the reduction by GSPMD), and
DeepSpeed-Ulysses on "seq": the video tokens are split after the patch embedding
(`transformer.VIDEO_AXES`), the joint text tokens stay whole on every device ("text_seq" is not in
the table), `joint_attention` regroups heads and the head gathers the sequence back. The VAE is
convolutional: weights replicated, batch on "data".
"""

from __future__ import annotations

from collections.abc import Mapping

from jax.sharding import Mesh

from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer
from vidax.zoo.sharding import TRANSFORMER_RULES, VAE_RULES, place

DIT_RULES = TRANSFORMER_RULES
VAE_SHARDING_RULES = VAE_RULES


def place_transformer(model: HunyuanVideo15Transformer, host_tree: Mapping, mesh: Mesh) -> dict:
    """Put a converted DiT tree on `mesh` in one placement under `DIT_RULES`.

    Args:
        model: the transformer whose logical specs say how each leaf is split.
        host_tree: the translator's flat (or nested) tree.
        mesh: from `vidax.zoo.mesh.make_mesh`; the heads must divide by tp * sp.
    """
    return place(host_tree, model.logical_specs(), DIT_RULES, mesh)
