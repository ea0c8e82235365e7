"""Configs of the HunyuanVideo 1.0 transformer and VAE, read field by field from diffusers' config.json."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, ClassVar, Mapping

from vidax.zoo.parts.configs import pick_fields
from vidax.zoo.parts.dual_stream import DualStreamConfig, shared_sizes

IMAGE_CONDITION_TYPES = (None, "latent_concat", "token_replace")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig(DualStreamConfig):
    """Follows diffusers `HunyuanVideoTransformer3DModel`'s constructor arguments and defaults (the 13B T2V)."""

    where: ClassVar[str] = "HunyuanVideo transformer"
    in_channels: int = 16
    out_channels: int = 16
    num_attention_heads: int = 24
    num_layers: int = 20
    num_single_layers: int = 40
    patch_size: int = 2
    guidance_embeds: bool = True
    text_embed_dim: int = 4096
    pooled_projection_dim: int = 768
    image_condition_type: str | None = None

    def __post_init__(self):
        super().__post_init__()
        where = self.where
        if self.image_condition_type not in IMAGE_CONDITION_TYPES:
            raise ValueError(f"{where}: image_condition_type {self.image_condition_type!r} is not one of "
                             f"{IMAGE_CONDITION_TYPES}")
        if self.mlp_ratio != 4.0:
            # The token refiner hard-codes 4 (diffusers `HunyuanVideoTokenRefiner`), and the official
            # single-block `linear1` [3D + 4D, D] is read as 7 equal parts (conversion_specs/hunyuan_video).
            raise ValueError(f"{where}: mlp_ratio {self.mlp_ratio} is not supported (the released models use 4)")

    @cached_property
    def mlp_chunks(self) -> int:
        """The single blocks' MLP is kept as this many column blocks of width `inner_dim` (see transformer.py)."""
        return int(self.mlp_ratio)

    @cached_property
    def token_replace(self) -> bool:
        return self.image_condition_type == "token_replace"

    @classmethod
    def from_param_shapes(cls, shapes: Mapping[str, tuple[int, ...]], **fixed: Any) -> "TransformerConfig":
        """Sizes read off a converted tree (the official checkpoint ships no config.json: its sizes are
        hyvideo's `HUNYUAN_VIDEO_CONFIG["HYVideo-T/2-cfgdistill"]`, code, not data).

        RoPE axes/theta and the image-condition type are not visible in shapes: they keep the
        shipped defaults unless `fixed` says otherwise (I2V: `image_condition_type="token_replace"`).
        """
        sizes = dict(
            shared_sizes(shapes),
            num_single_layers=shapes["single_blocks/attn/norm_q/scale"][0],
            guidance_embeds="time_text_embed/guidance_embedder/linear_1/kernel" in shapes,
            pooled_projection_dim=shapes["time_text_embed/text_embedder/linear_1/kernel"][0],
        )
        return cls(**{**sizes, **fixed})


@dataclasses.dataclass(frozen=True, kw_only=True)
class VAEConfig:
    """Follows diffusers `AutoencoderKLHunyuanVideo`'s constructor arguments and defaults."""

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 16
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    act_fn: str = "silu"
    norm_num_groups: int = 32
    scaling_factor: float = 0.476986
    spatial_compression_ratio: int = 8
    temporal_compression_ratio: int = 4
    mid_block_add_attention: bool = True
    # Tiling as diffusers' `AutoencoderKLHunyuanVideo.__init__` sets it (pixels and frames); spatial tiles
    # are used after `enable_tiling()`, temporal tiles always (`use_framewise_decoding/encoding` default on).
    tile_sample_min_size: int = 256
    tile_sample_stride: int = 192
    tile_sample_min_num_frames: int = 16
    tile_sample_stride_num_frames: int = 12

    IGNORED: ClassVar[Mapping[str, str]] = {
        "down_block_types": "one block kind only: diffusers accepts nothing but HunyuanVideoDownBlock3D (hyvideo's "
                            "DownEncoderBlockCausal3D is the same block); the count follows block_out_channels",
        "up_block_types": "one block kind only: diffusers accepts nothing but HunyuanVideoUpBlock3D (hyvideo's "
                          "UpDecoderBlockCausal3D is the same block); the count follows block_out_channels",
        "sample_size": "hyvideo's training tile size (pixels); tiling here follows diffusers' tile_sample_* values",
        "sample_tsize": "hyvideo's training tile length (frames); tiling here follows diffusers' tile_sample_* values",
    }

    def __post_init__(self):
        if self.temporal_compression_ratio != 4:
            raise ValueError(f"HunyuanVideo VAE: temporal_compression_ratio {self.temporal_compression_ratio} "
                             "is not supported (diffusers' decoder takes only 4)")
        if self.act_fn != "silu":
            raise ValueError(f"HunyuanVideo VAE: act_fn {self.act_fn!r} is not supported (only 'silu')")

    @cached_property
    def tile_latent_min_size(self) -> int:
        return self.tile_sample_min_size // self.spatial_compression_ratio

    @cached_property
    def tile_latent_stride(self) -> int:
        return self.tile_sample_stride // self.spatial_compression_ratio

    @cached_property
    def tile_latent_min_num_frames(self) -> int:
        return self.tile_sample_min_num_frames // self.temporal_compression_ratio

    @cached_property
    def tile_latent_stride_num_frames(self) -> int:
        return self.tile_sample_stride_num_frames // self.temporal_compression_ratio

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "VAEConfig":
        """Build from a diffusers `vae/config.json` dict, or the official one (hyvideo's `AutoencoderKLCausal3D`:
        `time_compression_ratio`, the other sizes under diffusers' names)."""
        return cls(**pick_fields(cls, hf, {"time_compression_ratio": "temporal_compression_ratio"}))
