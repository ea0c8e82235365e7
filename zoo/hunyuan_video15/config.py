"""Configs of the HunyuanVideo-1.5 transformer and VAE, read field by field from diffusers' config.json
(or, for the transformer, the official repo's; its keys are checked against `OFFICIAL_KEYS` and
`OFFICIAL_IGNORED`)."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, ClassVar, Mapping

from vidax.zoo.parts.configs import check_known, pick_fields
from vidax.zoo.parts.dual_stream import DualStreamConfig, shared_sizes


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig(DualStreamConfig):
    """Follows diffusers `HunyuanVideo15Transformer3DModel`'s constructor arguments and defaults."""

    where: ClassVar[str] = "HunyuanVideo-1.5 transformer"
    in_channels: int = 65
    out_channels: int = 32
    num_attention_heads: int = 16
    num_layers: int = 54
    patch_size: int = 1
    text_embed_dim: int = 3584
    text_embed_2_dim: int = 1472
    image_embed_dim: int = 1152
    target_size: int = 640
    task_type: str = "i2v"
    use_meanflow: bool = False

    # the official `HunyuanVideo_1_5_DiffusionTransformer` config keys `from_official_config` reads
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "hidden_size", "heads_num", "mm_double_blocks_depth", "mlp_width_ratio", "patch_size", "text_states_dim",
        "text_states_dim_2", "rope_theta", "rope_dim_list", "use_meanflow"})
    # the rest of its constructor's arguments (its config.json is that constructor's `register_to_config`)
    OFFICIAL_IGNORED: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("in_channels", "out_channels", "concat_condition", "is_reshape_temporal_channels"),
                        "the released 1.5 models' channel layout, which diffusers' defaults restate (65 in: "
                        "latent, condition, mask; 32 out) and vidax keeps"),
        **dict.fromkeys(("mm_single_blocks_depth", "qkv_bias", "qk_norm", "guidance_embed", "glyph_byT5_v2",
                         "vision_projection", "vision_states_dim", "use_cond_type_embedding", "text_projection"),
                        "a module that has weights: the converted tree carries exactly the weights of diffusers' "
                        "architecture, so a release with other modules is refused on load"),
        **dict.fromkeys(("mlp_act_type", "qk_norm_type", "use_attention_mask", "text_pool_type"),
                        "fixed by diffusers' HunyuanVideo15Transformer3DModel (gelu-tanh MLP, RMS q/k norm, "
                        "masked text, no pooled text), which vidax follows"),
        **dict.fromkeys(("attn_mode", "attn_param"), "torch runtime switch (which attention kernel runs)"),
        **dict.fromkeys(("ideal_resolution", "ideal_task"), "a recommendation for the official sampler's "
                        "defaults; the registry entry states the release's resolution and task"),
    }

    @cached_property
    def byt5_hidden(self) -> int:
        # diffusers hard-codes the ByT5 projection's hidden width.
        return 2048

    @classmethod
    def from_official_config(cls, hf: Mapping[str, Any]) -> "TransformerConfig":
        """Sizes from the official repo's `transformer/<variant>/config.json` (hyvideo's
        `HunyuanVideo_1_5_DiffusionTransformer` arguments); channels keep the shipped defaults."""
        check_known("HunyuanVideo_1_5_DiffusionTransformer", hf, cls.OFFICIAL_KEYS, cls.OFFICIAL_IGNORED)
        pt, _, p = (list(hf.get("patch_size", [1, 1, 1])) + [1, 1, 1])[:3]
        sizes = dict(num_attention_heads=hf["heads_num"], attention_head_dim=hf["hidden_size"] // hf["heads_num"],
                     num_layers=hf.get("mm_double_blocks_depth", cls.num_layers),
                     mlp_ratio=hf.get("mlp_width_ratio", cls.mlp_ratio), patch_size=p, patch_size_t=pt,
                     text_embed_dim=hf.get("text_states_dim", cls.text_embed_dim),
                     text_embed_2_dim=hf.get("text_states_dim_2", cls.text_embed_2_dim),
                     rope_theta=hf.get("rope_theta", cls.rope_theta),
                     rope_axes_dim=tuple(hf.get("rope_dim_list", cls.rope_axes_dim)),
                     use_meanflow=bool(hf.get("use_meanflow", False)))
        return cls(**sizes)

    @classmethod
    def from_param_shapes(cls, shapes: Mapping[str, tuple[int, ...]], **fixed: Any) -> "TransformerConfig":
        """Sizes read off a converted tree (either layout's checkpoint gives the same tree).

        RoPE axes and theta are not visible in shapes: they keep the shipped defaults unless `fixed`
        says otherwise.
        """
        sizes = dict(
            shared_sizes(shapes),
            mlp_ratio=shapes["blocks/ff/net_0/proj/kernel"][-1] / shapes["x_embedder/proj/kernel"][-1],
            text_embed_2_dim=shapes["context_embedder_2/norm/scale"][0],
            image_embed_dim=shapes["image_embedder/norm_in/scale"][0],
            use_meanflow="time_embed/timestep_embedder_r/linear_1/kernel" in shapes,
        )
        return cls(**{**sizes, **fixed})


@dataclasses.dataclass(frozen=True, kw_only=True)
class VAEConfig:
    """Follows diffusers `AutoencoderKLHunyuanVideo15`'s constructor arguments and defaults."""

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 32
    block_out_channels: tuple[int, ...] = (128, 256, 512, 1024, 1024)
    layers_per_block: int = 2
    spatial_compression_ratio: int = 16
    temporal_compression_ratio: int = 4
    downsample_match_channel: bool = True
    upsample_match_channel: bool = True
    scaling_factor: float = 1.03682
    # Tiling as diffusers' `enable_tiling()` defaults it (pixels; the latent tile is this / 16).
    tile_sample_min_size: int = 256
    tile_overlap_factor: float = 0.25

    IGNORED: ClassVar[Mapping[str, str]] = {
        "sample_size": "hyvideo's training tile size (pixels); tiling here follows diffusers' enable_tiling() values",
        "sample_tsize": "hyvideo's training tile length (frames); tiling here follows diffusers' values",
    }

    @cached_property
    def tile_latent_min_size(self) -> int:
        return self.tile_sample_min_size // self.spatial_compression_ratio

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "VAEConfig":
        """Build from a diffusers `vae/config.json` dict."""
        return cls(**pick_fields(cls, hf))
