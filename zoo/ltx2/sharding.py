"""Sharding of the LTX-2 components: the shared tables, and where LTX-2 differs in what they split.

The DiT uses the shared table (`vidax.zoo.compute.sharding.TRANSFORMER_RULES`): Megatron column -> row on
"heads" / "mlp" for all six attentions of a block and both FFNs (the per-head gates follow their
heads), DeepSpeed-Ulysses on "seq" for the video tokens only. The audio stream ("audio_seq": ~126
tokens for 5 s) and the text stay whole on every device, so a2v attention keeps its video queries
sequence-split against whole audio keys, and v2a gathers the video keys once per block. CFG and
the other guidance passes run on "batch" -> "data". The VAEs, audio VAE and vocoder are
convolutional: `VAE_RULES` (weights replicated, batch on data); the connectors and Gemma are text
encoders (`ENCODER_SHARDING_RULES`).
"""

from __future__ import annotations

from collections.abc import Mapping

from jax.sharding import Mesh

from vidax.zoo.ltx2.transformer import LTX2Transformer
from vidax.zoo.compute.sharding import TRANSFORMER_RULES, VAE_RULES, place

DIT_RULES = TRANSFORMER_RULES
VAE_SHARDING_RULES = VAE_RULES


def place_transformer(model: LTX2Transformer, host_tree: Mapping, mesh: Mesh) -> dict:
    """Put a converted DiT tree on `mesh` in one placement under `DIT_RULES`.

    Args:
      model: the transformer whose logical specs say how each leaf is split.
      host_tree: the translator's flat (or nested) tree.
      mesh: from `vidax.zoo.compute.mesh.make_mesh`; video and audio heads must divide by tp * sp.
    """
    return place(host_tree, model.logical_specs(), DIT_RULES, mesh)
