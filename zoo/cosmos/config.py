"""The Cosmos-Predict2.5 DiT's config, read field by field from diffusers' `transformer/config.json`.

The official release (`nvidia/Cosmos-Predict2.5-2B` / `-14B`, `base/post-trained/<uuid>_ema_bf16.pt`)
ships no config.json: its sizes are the experiment's, which diffusers' `convert_cosmos_to_diffusers.py`
writes down as `Cosmos-2.5-Predict-Base-{2B,14B}`. `from_param_shapes` reads them back off a
converted tree, so an official checkpoint runs without guessing a preset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

from vidax.translator import VidaxError
from vidax.zoo.parts.configs import HeadsConfig, pick_fields


class CosmosConfigError(VidaxError, ValueError):
    """A Cosmos-Predict2.5 transformer config that vidax cannot run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CosmosTransformerConfig(HeadsConfig):
    """Follows diffusers `CosmosTransformer3DModel`'s constructor arguments and defaults.

    `in_channels` counts the latent channels plus the conditioning-mask channel (17 for Predict2.5);
    with `concat_padding_mask` the patch embedding reads one more (the padding mask).
    """

    in_channels: int = 16
    out_channels: int = 16
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    num_layers: int = 28
    mlp_ratio: float = 4.0
    text_embed_dim: int = 1024
    adaln_lora_dim: int = 256
    max_size: tuple[int, int, int] = (128, 240, 240)
    patch_size: tuple[int, int, int] = (1, 2, 2)
    rope_scale: tuple[float, float, float] = (2.0, 1.0, 1.0)
    concat_padding_mask: bool = True
    extra_pos_embed_type: str | None = "learnable"
    use_crossattn_projection: bool = False
    crossattn_proj_in_channels: int = 1024
    encoder_hidden_states_channels: int = 1024
    controlnet_block_every_n: int | None = None
    img_context_dim_in: int | None = None

    IGNORED: ClassVar[Mapping[str, str]] = {
        "img_context_dim_out": "size of the image-context cross-attention (Transfer2.5), which only "
                               "img_context_dim_in switches on and vidax refuses",
        "img_context_num_tokens": "size of the image-context cross-attention (Transfer2.5), which only "
                                  "img_context_dim_in switches on and vidax refuses",
    }

    def __post_init__(self):
        if self.extra_pos_embed_type not in (None, "learnable"):
            raise CosmosConfigError(f"Cosmos transformer: extra_pos_embed_type {self.extra_pos_embed_type!r} is "
                                    "not supported (None or 'learnable')")
        if self.img_context_dim_in:
            raise CosmosConfigError("Cosmos transformer: image-context cross-attention (Transfer2.5) is not supported")
        if self.controlnet_block_every_n is not None:
            raise CosmosConfigError("Cosmos transformer: ControlNet residuals (Transfer2.5) are not supported")
        if len(self.patch_size) != 3 or len(self.max_size) != 3 or len(self.rope_scale) != 3:
            raise CosmosConfigError("Cosmos transformer: patch_size, max_size and rope_scale are (t, h, w) triples")
        if self.use_crossattn_projection and self.encoder_hidden_states_channels != self.text_embed_dim:
            raise CosmosConfigError(
                f"Cosmos transformer: the cross-attention projection writes {self.encoder_hidden_states_channels} "
                f"channels but the blocks read text_embed_dim={self.text_embed_dim}")

    @cached_property
    def patch_in_channels(self) -> int:
        """Channels the patch embedding reads: latents, condition mask and (optionally) padding mask."""
        return self.in_channels + 1 if self.concat_padding_mask else self.in_channels

    @cached_property
    def text_in_dim(self) -> int:
        """Width of the text features the model takes (Reason1's 28 layers x 3584 = 100352 for Predict2.5)."""
        return self.crossattn_proj_in_channels if self.use_crossattn_projection else self.text_embed_dim

    @cached_property
    def max_grid(self) -> tuple[int, int, int]:
        """The largest post-patch (frames, height, width) the position tables cover."""
        return tuple(m // p for m, p in zip(self.max_size, self.patch_size))

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> CosmosTransformerConfig:
        """Build from a diffusers `transformer/config.json` dict."""
        return cls(**pick_fields(cls, hf))

    @classmethod
    def from_param_shapes(cls, shapes: Mapping[str, tuple[int, ...]], **fixed: Any) -> CosmosTransformerConfig:
        """Sizes read off a converted tree (an official `.pt` carries no config).

        RoPE scaling, `max_size` and `concat_padding_mask` are not visible in shapes: they keep the
        Predict2.5 values (rope_scale (1, 3, 3), padding mask on) unless `fixed` says otherwise.
        """
        head_dim = shapes["blocks/attn1/norm_q/scale"][-1]
        inner = shapes["patch_embed/proj/kernel"][1]
        pt, ph, pw = fixed.get("patch_size", cls.patch_size)
        padding = fixed.get("concat_padding_mask", True)
        patch_in = shapes["patch_embed/proj/kernel"][0] // (pt * ph * pw)
        sizes = dict(
            in_channels=patch_in - 1 if padding else patch_in,
            out_channels=shapes["proj_out/kernel"][1] // (pt * ph * pw),
            num_attention_heads=inner // head_dim,
            attention_head_dim=head_dim,
            num_layers=shapes["blocks/attn1/to_q/kernel"][0],
            mlp_ratio=shapes["blocks/ff/net_0/proj/kernel"][-1] / inner,
            text_embed_dim=shapes["blocks/attn2/to_k/kernel"][1],
            adaln_lora_dim=shapes["blocks/norm1/linear_1/kernel"][-1],
            rope_scale=(1.0, 3.0, 3.0),
            concat_padding_mask=padding,
            extra_pos_embed_type="learnable" if "learnable_pos_embed/pos_emb_t" in shapes else None,
            use_crossattn_projection="crossattn_proj_0/kernel" in shapes,
        )
        if sizes["use_crossattn_projection"]:
            sizes["crossattn_proj_in_channels"], sizes["encoder_hidden_states_channels"] = shapes[
                "crossattn_proj_0/kernel"]
        return cls(**{**sizes, **fixed})
