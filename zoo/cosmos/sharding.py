"""Sharding of the Cosmos-Predict2.5 DiT: the shared table, and placement of its host tree.

Megatron column -> row on "heads" / "mlp" (q/k/v and the FFN input column-parallel; `to_out_0` and
`ff/net_2` row-parallel; the DiT has no biases there), DeepSpeed-Ulysses on "seq": the video tokens
are split after the patch embedding (`transformer.VIDEO_AXES`), the per-frame AdaLN-LoRA modulation
is broadcast to each device's own tokens, the Reason1 text stays whole ("text_seq" is not in the
table), self-attention regroups heads through the attention entry point, cross-attention keeps its
queries split, and the head gathers the sequence back. CFG's two branches run on "batch" -> "data".
The Wan2.1 VAE keeps `vidax.zoo.wan`'s table.
"""

from __future__ import annotations

from collections.abc import Mapping

from jax.sharding import Mesh
from vidax.zoo.cosmos.transformer import CosmosTransformer
from vidax.zoo.sharding import TRANSFORMER_RULES, place

DIT_RULES = TRANSFORMER_RULES


def place_transformer(model: CosmosTransformer, host_tree: Mapping, mesh: Mesh) -> dict:
    """Put a converted DiT tree on `mesh` in one placement under `DIT_RULES`.

    Args:
      model: the transformer whose logical specs say how each leaf is split.
      host_tree: the translator's flat (or nested) tree.
      mesh: from `vidax.zoo.mesh.make_mesh`; the heads must divide by tp * sp.
    """
    return place(host_tree, model.logical_specs(), DIT_RULES, mesh)
