"""Sharding of the Cosmos3 DiT: the shared table.

Megatron column -> row on "heads" / "mlp" for both pathways (q/k/v and the MLP inputs column-parallel,
`to_out` / `to_add_out` / `down_proj` row-parallel), DeepSpeed-Ulysses on "seq" for the video stream
(`transformer.VIDEO_AXES`, its RoPE tables alike); the prompt stream stays whole on every device
("text_seq" is not in the table) and its causal attention runs locally on each device's heads. The
video stream's attention to text and video is the joint entry point (text keys whole, video
all-to-all into heads). CFG's two prompts run on "batch" -> "data". The Wan2.2 VAE keeps
`vidax.zoo.wan`'s table.
"""

from __future__ import annotations

from vidax.zoo.compute.sharding import TRANSFORMER_RULES

DIT_RULES = TRANSFORMER_RULES
