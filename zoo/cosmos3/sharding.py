"""Sharding of the Cosmos3 DiT: the shared table, and placement of its host tree.

Megatron column -> row on "heads" / "mlp" for both pathways (q/k/v and the MLP inputs column-parallel,
`to_out` / `to_add_out` / `down_proj` row-parallel), DeepSpeed-Ulysses on "seq" for the video stream
(`transformer.VIDEO_AXES`, its RoPE tables alike); the prompt stream stays whole on every device
("text_seq" is not in the table) and its causal attention runs locally on each device's heads. The
video stream's attention to text and video is the joint entry point (text keys whole, video
all-to-all into heads). CFG's two prompts run on "batch" -> "data". The Wan2.2 VAE keeps
`vidax.zoo.wan`'s table.
"""

from __future__ import annotations

from collections.abc import Mapping

from jax.sharding import Mesh
from vidax.zoo.cosmos3.transformer import Cosmos3Transformer
from vidax.zoo.sharding import TRANSFORMER_RULES, place

DIT_RULES = TRANSFORMER_RULES


def place_transformer(model: Cosmos3Transformer, host_tree: Mapping, mesh: Mesh) -> dict:
    """Put a converted DiT tree on `mesh` in one placement under `DIT_RULES` (heads and key/value heads
    must divide by tp; the heads by tp * sp)."""
    return place(host_tree, model.logical_specs(), DIT_RULES, mesh)
