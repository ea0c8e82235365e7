"""A tiny Wan-shaped DiT for runtime tests: AdaLN self-attention, cross-attention, AdaLN MLP.

Built from `zoo/compute/layers.py` and following `zoo/parts/dit.py`'s contract (embed / block / head, blocks
stacked). Follows diffusers `WanTransformerBlock` in structure (no RoPE: that is family code).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.compute.attention import attention
from vidax.zoo.compute.layers import Dense, LayerNorm, RMSNorm, gelu_tanh, logical_param
from vidax.zoo.compute.sharding import constrain, logical_specs, stack_specs


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    in_channels: int = 4
    dim: int = 32
    heads: int = 8
    ffn_dim: int = 64
    text_dim: int = 16
    layers: int = 2


class Attention(nn.Module):
    """diffusers `WanAttention`: q/k/v column-parallel, RMSNorm over all heads, row-parallel out."""

    dim: int
    heads: int

    @nn.compact
    def __call__(self, x, context=None, kv_mask=None):
        context = x if context is None else context
        b = x.shape[0]
        q = RMSNorm(name="norm_q")(Dense(self.dim, ("embed", "heads"), name="to_q")(x))
        k = RMSNorm(name="norm_k")(Dense(self.dim, ("embed", "heads"), name="to_k")(context))
        v = Dense(self.dim, ("embed", "heads"), name="to_v")(context)
        split = lambda t: t.reshape(b, t.shape[1], self.heads, -1)  # [B, S, H, Dh]
        out = attention(split(q), split(k), split(v), kv_mask=kv_mask)
        return Dense(self.dim, ("heads", "embed"), name="to_out_0")(out.reshape(b, -1, self.dim))


class Block(nn.Module):
    cfg: TinyConfig

    @nn.compact
    def __call__(self, x, ctx):
        temb, text, text_mask = ctx
        cfg = self.cfg
        table = logical_param(self, "scale_shift_table", (1, 6, cfg.dim), (None, None, "embed"))
        shift, scale, gate, c_shift, c_scale, c_gate = jnp.split(table + temb, 6, axis=1)  # each [B, 1, D]
        # 1. self-attention on the modulated stream
        h = LayerNorm(use_scale=False, use_bias=False, name="norm1")(x) * (1 + scale) + shift
        x = x + Attention(cfg.dim, cfg.heads, name="attn1")(h) * gate
        # 2. cross-attention to the text tokens
        x = x + Attention(cfg.dim, cfg.heads, name="attn2")(LayerNorm(name="norm2")(x), text, text_mask)
        # 3. modulated feed-forward
        h = LayerNorm(use_scale=False, use_bias=False, name="norm3")(x) * (1 + c_scale) + c_shift
        h = gelu_tanh(Dense(cfg.ffn_dim, ("embed", "mlp"), name="ffn_net_0_proj")(h))
        x = x + Dense(cfg.dim, ("mlp", "embed"), name="ffn_net_2")(h) * c_gate
        return constrain(x, ("batch", "seq", "act_embed"))


class Embed(nn.Module):
    cfg: TinyConfig

    @nn.compact
    def __call__(self, latents, t, text):
        cfg = self.cfg
        x = Dense(cfg.dim, ("conv_in", "embed"), name="patch_embedding")(latents)
        freqs = jnp.exp(-jnp.arange(cfg.dim // 2) / (cfg.dim // 2) * np.log(1e4))
        sincos = jnp.concatenate([jnp.cos(t[:, None] * freqs), jnp.sin(t[:, None] * freqs)], -1)
        temb = Dense(6 * cfg.dim, ("embed", "mlp"), name="time_projection")(sincos).reshape(-1, 6, cfg.dim)
        text = Dense(cfg.dim, (None, "embed"), name="text_embedder")(text)
        return constrain(x, ("batch", "seq", "act_embed")), temb, text


class Head(nn.Module):
    cfg: TinyConfig

    @nn.compact
    def __call__(self, x):
        return Dense(self.cfg.in_channels, ("embed", "conv_out"), name="proj_out")(LayerNorm(name="norm_out")(x))


class TinyDiT:
    """`zoo.parts.dit.StackedDiT`: params {"embed", "blocks" (stacked), "head"}."""

    def __init__(self, cfg: TinyConfig):
        self.cfg = cfg
        self.block = Block(cfg)
        self._embed, self._head = Embed(cfg), Head(cfg)

    def embed(self, params, latents, t, text, text_mask):
        x, temb, text = self._embed.apply({"params": params["embed"]}, latents, t, text)
        return x, (temb, text, text_mask)

    def head(self, params, hidden, ctx):
        return self._head.apply({"params": params["head"]}, hidden)

    def example_inputs(self, batch: int, seq: int, text_len: int):
        c = self.cfg
        return (
            jax.ShapeDtypeStruct((batch, seq, c.in_channels), jnp.float32),
            jax.ShapeDtypeStruct((batch,), jnp.float32),
            jax.ShapeDtypeStruct((batch, text_len, c.text_dim), jnp.float32),
            jax.ShapeDtypeStruct((batch, text_len), jnp.bool_),
        )

    def specs(self, batch: int = 2, seq: int = 8, text_len: int = 4):
        """Logical PartitionSpecs of the whole tree (blocks with their leading "layers" axis)."""
        latents, t, text, mask = self.example_inputs(batch, seq, text_len)
        hidden = jax.ShapeDtypeStruct((batch, seq, self.cfg.dim), jnp.float32)
        temb = jax.ShapeDtypeStruct((batch, 6, self.cfg.dim), jnp.float32)
        text_h = jax.ShapeDtypeStruct((batch, text_len, self.cfg.dim), jnp.float32)
        return {
            "embed": logical_specs(self._embed, latents, t, text),
            "blocks": stack_specs(logical_specs(self.block, hidden, (temb, text_h, mask))),
            "head": logical_specs(self._head, hidden),
        }

    def random_host_tree(self, seed: int = 0) -> dict:
        """Perturbed random params as a host tree (every bias and table non-zero)."""
        rng = np.random.default_rng(seed)
        shapes = jax.eval_shape(lambda: self._init_all())
        return jax.tree.map(lambda s: rng.normal(0.0, 0.2, s.shape).astype(np.float32), shapes)

    def _init_all(self):
        latents, t, text, mask = (jnp.zeros(s.shape, s.dtype) for s in self.example_inputs(2, 8, 4))
        key = jax.random.key(0)
        embed = self._embed.init(key, latents, t, text)["params"]
        x, temb, text_h = self._embed.apply({"params": embed}, latents, t, text)
        block = nn.unbox(self.block.init(key, x, (temb, text_h, mask))["params"])
        blocks = jax.tree.map(lambda a: jnp.stack([a] * self.cfg.layers), block)
        head = self._head.init(key, x)["params"]
        return nn.unbox({"embed": embed, "blocks": blocks, "head": head})
