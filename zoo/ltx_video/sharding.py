"""Sharding rules of the LTX-Video components, and placement of their host trees.

The DiT uses the shared table (`vidax.zoo.compute.sharding.TRANSFORMER_RULES`): Megatron column -> row on
"heads" / "mlp" (q/k/v and their across-heads RMS-norm scales, the FFN input split by heads or hidden
features; `to_out_0` and `ff/net_2` row-parallel, their bias added once after the reduction),
DeepSpeed-Ulysses on "seq": the packed video tokens are split after `proj_in`
(`transformer.VIDEO_AXES`), per-token modulation and the RoPE tables follow them (`MOD_AXES`,
`ROPE_AXES`: the tables are also split by width under tp, as q/k are), the caption stays whole on
every device, self-attention regroups heads through the attention entry point and the head gathers
the sequence back. CFG's two branches run on "batch" -> "data". The VAE and the latent upsampler are
convolutional: weights replicated, batch on "data" (the shared VAE table).
"""

from __future__ import annotations

from collections.abc import Mapping

from jax.sharding import Mesh

from vidax.zoo.ltx_video.transformer import LTXVideoTransformer
from vidax.zoo.compute.sharding import TRANSFORMER_RULES, VAE_RULES, place

DIT_RULES = TRANSFORMER_RULES
VAE_SHARDING_RULES = VAE_RULES


def place_transformer(model: LTXVideoTransformer, host_tree: Mapping, mesh: Mesh) -> dict:
    """Put a converted DiT tree on `mesh` in one placement under `DIT_RULES`.

    Args:
      model: the transformer whose logical specs say how each leaf is split.
      host_tree: the translator's flat (or nested) tree.
      mesh: from `vidax.zoo.compute.mesh.make_mesh`; the heads must divide by tp * sp.
    """
    return place(host_tree, model.logical_specs(), DIT_RULES, mesh)
