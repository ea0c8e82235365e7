"""Wan VACE: the Wan DiT with a control branch (follows diffusers `WanVACETransformer3DModel`).

VACE adds to the Wan DiT (`vidax.zoo.wan.transformer`, whose embedder, blocks and head it reuses):

- `vace_patch_embedding`: the control latents (`vace_in_channels`: inactive + reactive VAE latents and
  the 8x8-folded mask, 96 in the released models) patchified like the video, zero-padded to its tokens;
  `vace_blocks.0.proj_in` maps them and adds the video tokens (diffusers' block 0 does this first).
- `vace_blocks`: one Wan block per entry of `vace_layers`, run in order on the control stream; each
  returns a hint `proj_out(control)`.
- the main `blocks`: after block `vace_layers[k]`, hint k times `control_hidden_states_scale[k]` is added
  to the hidden state.

The two block kinds are two block groups (`vidax.zoo.parts.dit`): "vace_blocks" carries `VaceState` (video,
control, the hints so far, the next hint's index), "blocks" carries `MainState` (video, hints, the layer
index), so scanning, offload and sharding treat them like any stacked blocks. `vace_blocks.0.proj_in` is
an embed module (`vace_blocks_0/proj_in`): every stacked VACE block then has the same parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from vidax.zoo.parts.dit import BlockGroup, Params
from vidax.zoo.compute.layers import Dense, PatchEmbed
from vidax.zoo.compute.sharding import VIDEO_AXES, constrain
from vidax.zoo.wan.config import WanConfigError, WanTransformerConfig
from vidax.zoo.wan.rope import rope_tables
from vidax.zoo.wan.transformer import MOD_AXES, Context, Embedder, WanBlock, WanTransformer

HINT_AXES = (None, "batch", "seq", "act_embed")  # [vace layer, B, S, D]: hints follow their tokens
VACE_KEYS = ("vace_layers", "vace_in_channels", "vace_in_dim")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WanVACEConfig(WanTransformerConfig):
    """diffusers `WanVACETransformer3DModel`'s arguments: the Wan DiT's plus the control branch's.

    Args:
      vace_layers: main blocks after which a hint is added, ascending, starting at 0.
      vace_in_channels: channels of the control latents (official `vace_in_dim`).
    """

    vace_layers: tuple[int, ...] = (0, 5, 10, 15, 20, 25, 30, 35)
    vace_in_channels: int = 96

    def __post_init__(self):
        super().__post_init__()
        if self.has_image:  # no VACE release has one, and the spec `wan/vace_transformer` has no rules for it
            raise WanConfigError("Wan VACE: a CLIP image branch (image_dim) is not supported")
        layers = self.vace_layers
        if not layers or layers[0] != 0 or list(layers) != sorted(set(layers)):
            raise WanConfigError(f"Wan VACE: vace_layers must be ascending, distinct and start at 0, got {list(layers)}")
        if layers[-1] >= self.num_layers:
            raise WanConfigError(f"Wan VACE: vace_layers {list(layers)} exceed the {self.num_layers} transformer layers")

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any], param_shapes: Mapping[str, tuple] | None = None) -> "WanVACEConfig":
        """From a diffusers `WanVACETransformer3DModel` or an official `VaceWanModel` config.json."""
        official = "dim" in hf and "num_heads" in hf
        base = WanTransformerConfig.from_hf_config({k: v for k, v in hf.items() if k not in VACE_KEYS}, param_shapes)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(WanTransformerConfig)}
        if official:  # VaceWanModel's defaults: every other layer, the latent channels
            layers = hf.get("vace_layers", list(range(0, base.num_layers, 2)))
            in_channels = hf.get("vace_in_dim", base.in_channels)
        else:
            layers = hf.get("vace_layers", cls.vace_layers)
            in_channels = hf.get("vace_in_channels", cls.vace_in_channels)
        return cls(**fields, vace_layers=tuple(int(i) for i in layers), vace_in_channels=int(in_channels))

    @property
    def hint_slots(self) -> tuple[int, ...]:
        """Per main layer: the index of the hint added after it, or -1."""
        return tuple(self.vace_layers.index(i) if i in self.vace_layers else -1 for i in range(self.num_layers))


@struct.dataclass
class VaceContext(Context):
    """The Wan blocks' context plus the per-sample scale of each hint."""

    vace_scale: jax.Array | None = None  # [B, len(vace_layers)] fp32


@struct.dataclass
class VaceState:
    """The hidden state of the "vace_blocks" group."""

    hidden: jax.Array  # [B, S, D] the video tokens (read by nothing here; carried to the main blocks)
    control: jax.Array  # [B, S, D] the control stream
    hints: jax.Array  # [len(vace_layers), B, S, D] proj_out of each VACE block so far
    index: jax.Array  # int32: the next VACE block's index


@struct.dataclass
class MainState:
    """The hidden state of the main "blocks" group."""

    hidden: jax.Array  # [B, S, D]
    hints: jax.Array  # [len(vace_layers), B, S, D]
    index: jax.Array  # int32: the next main block's index


class ProjIn(nn.Module):
    """diffusers `WanVACETransformerBlock.proj_in` of block 0: `proj_in(control) + hidden`."""

    dim: int

    @nn.compact
    def __call__(self, control: jax.Array, hidden: jax.Array) -> jax.Array:
        return Dense(self.dim, axes=("embed", None), name="proj_in")(control) + hidden


class VaceEmbedder(Embedder):
    """The Wan embedder, then the control tokens: `vace_patch_embedding`, zero padding, block 0's `proj_in`."""

    @nn.compact
    def __call__(self, latents, timestep, text, image=None, control=None, control_scale=None):
        cfg = self.cfg  # control_scale: the forward's argument, read by the blocks (through the context)
        video, temb, proj, text, image = super().__call__(latents, timestep, text, image)
        tokens = PatchEmbed(cfg.inner_dim, cfg.patch_size, name="vace_patch_embedding")(control.astype(self.dtype))
        pad = video.shape[1] - tokens.shape[1]  # diffusers pads short control latents with zero tokens
        tokens = jnp.pad(tokens, ((0, 0), (0, pad), (0, 0)))
        control = ProjIn(cfg.inner_dim, name="vace_blocks_0")(tokens, video.astype(tokens.dtype))
        return video, temb, proj, text, image, constrain(control.astype(self.residual_dtype), VIDEO_AXES)


class VaceBlock(WanBlock):
    """diffusers `WanVACETransformerBlock` after block 0's `proj_in`: a Wan block on the control stream,
    then `proj_out` makes the hint."""

    @nn.compact
    def __call__(self, state: VaceState, ctx: VaceContext) -> VaceState:
        control = super().__call__(state.control, ctx)
        hint = Dense(self.cfg.inner_dim, axes=("embed", None), name="proj_out")(control.astype(self.dtype))
        hints = jax.lax.dynamic_update_index_in_dim(state.hints, hint.astype(state.hints.dtype), state.index, 0)
        return VaceState(state.hidden, control, constrain(hints, HINT_AXES), state.index + 1)


class VaceMainBlock(WanBlock):
    """diffusers `WanTransformerBlock`, then (after a VACE layer) `hidden + hint * scale`."""

    @nn.compact
    def __call__(self, state: MainState, ctx: VaceContext) -> MainState:
        hidden = super().__call__(state.hidden, ctx)
        slot = jnp.asarray(self.cfg.hint_slots, jnp.int32)[state.index]
        k = jnp.maximum(slot, 0)
        hint = jax.lax.dynamic_index_in_dim(state.hints, k, 0, keepdims=False).astype(jnp.float32)
        scale = jax.lax.dynamic_index_in_dim(ctx.vace_scale, k, 1, keepdims=False)[:, None, None]
        added = (hidden.astype(jnp.float32) + hint * scale).astype(hidden.dtype)
        hidden = constrain(jnp.where(slot >= 0, added, hidden), VIDEO_AXES)
        return MainState(hidden, state.hints, state.index + 1)


class WanVACETransformer(WanTransformer):
    """The Wan VACE DiT in the `vidax.zoo.parts.dit.StackedDiT` shape (two block groups).

    Args:
      cfg: `WanVACEConfig.from_hf_config(config_json)`.
      dtype: activation dtype (matmul inputs); weights are cast to it.
      residual_dtype: dtype of the hidden and control streams between blocks.
    """

    embed_modules = ("patch_embedding", "condition_embedder", "vace_patch_embedding", "vace_blocks_0")

    def __init__(self, cfg: WanVACEConfig, dtype: Any = jnp.float32, residual_dtype: Any = jnp.float32):
        super().__init__(cfg, dtype, residual_dtype)
        self.embedder = VaceEmbedder(cfg, dtype, residual_dtype)
        self.vace_block = VaceBlock(cfg, dtype)
        self.block = VaceMainBlock(cfg, dtype)

    @property
    def block_groups(self) -> tuple[BlockGroup, ...]:
        return (BlockGroup("vace_blocks", self.vace_block), BlockGroup("blocks", self.block))

    def num_blocks(self, group: str) -> int:
        return len(self.cfg.vace_layers) if group == "vace_blocks" else self.cfg.num_layers

    def embed(self, params: Params, latents, timestep, text, image=None, control=None,
              control_scale=None) -> tuple[VaceState, VaceContext]:
        """Tokens and context from `WanVACETransformer3DModel.forward`'s inputs.

        Args:
          params: the full parameter tree (only the embedders are read).
          latents, timestep, text, image: as `WanTransformer.embed`.
          control: `control_hidden_states` `[B, vace_in_channels, F, H, W]` (at most the latents' tokens).
          control_scale: `control_hidden_states_scale` `[B, len(vace_layers)]` (None: ones).
        """
        cfg = self.cfg
        grid = self._check_inputs(latents, timestep, text, image)
        b, n = latents.shape[0], len(cfg.vace_layers)
        if control is None or control.ndim != 5 or control.shape[:2] != (b, cfg.vace_in_channels):
            got = None if control is None else control.shape
            raise ValueError(f"Wan VACE takes control latents [{b}, {cfg.vace_in_channels}, F, H, W], got {got}")
        scale = jnp.ones((b, n), jnp.float32) if control_scale is None else jnp.asarray(control_scale, jnp.float32)
        if scale.shape != (b, n):
            raise ValueError(f"Wan VACE takes one conditioning scale per VACE layer [{b}, {n}], got {scale.shape}")
        sub = self.subtree(params, self.embed_modules)
        video, temb, proj, text, image, control = self.embedder.apply(
            {"params": sub}, latents, timestep, text, image, control)
        cos, sin = rope_tables(cfg.rope_dims, grid)
        image = image if cfg.has_image else None
        ctx = VaceContext(constrain(proj, MOD_AXES), temb, text, image, jnp.asarray(cos), jnp.asarray(sin), grid,
                          vace_scale=scale)
        hints = jnp.zeros((n, *video.shape), self.dtype)
        return VaceState(video, control, constrain(hints, HINT_AXES), jnp.int32(0)), ctx

    def between_groups(self, name: str, hidden: Any, ctx: Any) -> Any:
        if name == "vace_blocks":
            return MainState(hidden.hidden, hidden.hints, jnp.int32(0))
        return hidden

    def head(self, params: Params, hidden: MainState, ctx: Context) -> jax.Array:
        return super().head(params, hidden.hidden, ctx)

    def head_inputs(self, hidden: MainState, ctx: Context) -> tuple:
        return hidden.hidden, ctx.temb

    def memory_sizes(self, **widths: Any) -> Any:
        """The planner's sizes (`StackedTransformer.memory_sizes`), corrected for VACE: a block of either group has
        one MLP (the generic count reads the two groups' [dim, ffn] matrices as one block's two pathways), and the
        blocks carry the hints `[len(vace_layers), B, S, D]` from the first VACE block to the last main block, and
        the video stream beside the control stream while the VACE blocks run."""
        sizes = super().memory_sizes(**widths)
        return dataclasses.replace(sizes, mlp_inputs=1, mlp_outputs=1, carried_activations=len(self.cfg.vace_layers),
                                   carried_streams=1)

    def dummy_inputs(self, batch: int = 1):
        cfg = self.cfg
        latents, timestep, text, image = super().dummy_inputs(batch)
        control = jnp.zeros((batch, cfg.vace_in_channels, *cfg.patch_size), jnp.float32)
        return latents, timestep, text, image, control, jnp.ones((batch, len(cfg.vace_layers)), jnp.float32)

