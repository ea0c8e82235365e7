"""Sharding rules of the Wan DiT.

The DiT uses the shared table (`vidax.zoo.compute.sharding.TRANSFORMER_RULES`): Megatron column -> row on
"heads" / "mlp" (q/k/v, the q/k RMS-norm scales and the FFN input are split by heads or hidden
features; `to_out_0` and `ffn/net_2` are row-parallel, their bias added once after the
reduction), DeepSpeed-Ulysses on "seq": the video tokens are split after the patch embedding
(`transformer.VIDEO_AXES`), per-token TI2V modulation follows them (`MOD_AXES`), the text and
image context stays whole on every device ("text_seq" is not in the table), self-attention
regroups heads through the attention entry point, and the head gathers the sequence back. CFG's
two branches run on "batch" -> "data".
"""

from __future__ import annotations

from vidax.zoo.compute.sharding import TRANSFORMER_RULES

DIT_RULES = TRANSFORMER_RULES
