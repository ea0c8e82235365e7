"""Sharding of the Cosmos-Predict2.5 DiT: the shared table.

Megatron column -> row on "heads" / "mlp" (q/k/v and the FFN input column-parallel; `to_out_0` and
`ff/net_2` row-parallel; the DiT has no biases there), DeepSpeed-Ulysses on "seq": the video tokens
are split after the patch embedding (`transformer.VIDEO_AXES`), the per-frame AdaLN-LoRA modulation
is broadcast to each device's own tokens, the Reason1 text stays whole ("text_seq" is not in the
table), self-attention regroups heads through the attention entry point, cross-attention keeps its
queries split, and the head gathers the sequence back. CFG's two branches run on "batch" -> "data".
The Wan2.1 VAE keeps `vidax.zoo.wan`'s table.
"""

from __future__ import annotations

from vidax.zoo.compute.sharding import TRANSFORMER_RULES

DIT_RULES = TRANSFORMER_RULES
