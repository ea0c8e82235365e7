"""Sharding rules of the CogVideoX components.

The DiT uses the shared table (`vidax.zoo.compute.sharding.TRANSFORMER_RULES`): Megatron column -> row on
"heads" / "mlp" (q/k/v and the feed-forward input are column-parallel, `to_out_0` and `ff/net_2`
row-parallel with their bias added once after the reduction; the text and video tokens share these
weights), DeepSpeed-Ulysses on "seq": the video tokens are split after the patch embedding
(`transformer.VIDEO_AXES`), the 226 text tokens stay whole on every device ("text_seq" is not in the
table), `joint_attention` sends only the video q/k/v through the all-to-all and slices each device's
heads out of the replicated text q/k/v, and the head gathers the sequence back. The AdaLN
projections are replicated (their input is the 512-wide time embedding). tp and sp compose on one
mesh: the heads split over tp * sp. The VAE's table is `vae.VAE_RULES`.
"""

from __future__ import annotations

from vidax.zoo.cogvideox.vae import VAE_RULES
from vidax.zoo.compute.sharding import TRANSFORMER_RULES

DIT_RULES = TRANSFORMER_RULES
VAE_SHARDING_RULES = VAE_RULES
