"""Sharding rules of the HunyuanVideo-1.5 components.

The DiT uses the shared table: Megatron column -> row on "heads" / "mlp" (q/k/v, FFN in; output
projections and FFN out row-parallel, their bias added once after the reduction by GSPMD), and
DeepSpeed-Ulysses on "seq": the video tokens are split after the patch embedding
(`transformer.VIDEO_AXES`), the joint text tokens stay whole on every device ("text_seq" is not in
the table), `joint_attention` regroups heads and the head gathers the sequence back. The VAE is
convolutional: weights replicated, batch on "data".
"""

from __future__ import annotations

from vidax.zoo.compute.sharding import TRANSFORMER_RULES, VAE_RULES

DIT_RULES = TRANSFORMER_RULES
VAE_SHARDING_RULES = VAE_RULES
