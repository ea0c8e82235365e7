"""A tiny model that follows zoo/parts/dit.py's contract (embed / block / head), for runtime-level tests."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.compute.attention import attention
from vidax.zoo.compute.layers import Dense, LayerNorm, logical_param


class ToyBlock(nn.Module):
    heads: int

    @nn.compact
    def __call__(self, x, ctx):
        b, s, d = x.shape
        table = logical_param(self, "scale_shift_table", (1, 2, d), (None, None, "embed"))
        shift, scale = jnp.split(table + ctx["temb"][:, None], 2, axis=1)
        h = LayerNorm(use_scale=False, use_bias=False)(x) * (1 + scale) + shift
        q, k, v = (Dense(d, ("embed", "heads"), name=n)(h).reshape(b, s, self.heads, -1) for n in ("to_q", "to_k", "to_v"))
        x = x + Dense(d, ("heads", "embed"), name="to_out_0")(attention(q, k, v).reshape(b, s, d))
        h = Dense(2 * d, ("embed", "mlp"), name="fc1")(LayerNorm(name="norm2")(x))
        return x + Dense(d, ("mlp", "embed"), input_activation=jax.nn.gelu, name="fc2")(h)


class ToyEmbed(nn.Module):
    dim: int

    @nn.compact
    def __call__(self, x, t):
        return Dense(self.dim, (None, "embed"), name="proj_in")(x), {"temb": Dense(self.dim, (None, "embed"), name="time")(t)}


class ToyHead(nn.Module):
    out: int

    @nn.compact
    def __call__(self, x):
        return Dense(self.out, ("embed", None), name="proj_out")(LayerNorm(name="norm_out")(x))


@dataclasses.dataclass(frozen=True)
class ToyDiT:
    dim: int = 32
    heads: int = 4
    depth: int = 5
    channels: int = 8

    @property
    def block(self) -> nn.Module:
        return ToyBlock(self.heads)

    def embed(self, params, x, t):
        return ToyEmbed(self.dim).apply({"params": params}, x, t)

    def head(self, params, hidden, ctx):
        return ToyHead(self.channels).apply({"params": params}, hidden)

    def init(self, key, x, t):
        """Random params with every block stacked under "blocks" (nn.Partitioned boxes removed)."""
        k1, k2, k3 = jax.random.split(key, 3)
        embed = ToyEmbed(self.dim).init(k1, x, t)["params"]
        hidden, ctx = ToyEmbed(self.dim).apply({"params": embed}, x, t)
        keys = jax.random.split(k2, self.depth)
        blocks = jax.vmap(lambda k: nn.unbox(self.block.init(k, hidden, ctx)["params"]))(keys)
        head = ToyHead(self.channels).init(k3, hidden)["params"]
        return {**nn.unbox(embed), **nn.unbox(head), "blocks": blocks}


def block_shardings(mesh, blocks):
    """Megatron shardings for the toy's stacked block params (layer axis unsharded)."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    column = {"kernel": P(None, None, "tensor"), "bias": P(None, "tensor")}
    row = {"kernel": P(None, "tensor", None), "bias": P()}
    specs = {"to_q": column, "to_k": column, "to_v": column, "fc1": column, "to_out_0": row, "fc2": row}

    def one(path, _leaf):
        module, name = path[0].key, path[-1].key
        return NamedSharding(mesh, specs[module][name] if module in specs else P())

    return jax.tree_util.tree_map_with_path(one, blocks)
