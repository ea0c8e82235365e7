"""Configs of the LTX-2.x components, read field by field from the shipped config.json files.

Each dataclass follows the constructor arguments (names and defaults) of the diffusers class it
mirrors, so `from_hf_config(config_json)` is a filter plus a few checks. `from_official_config`
reads the `config` metadata that Lightricks' single-file checkpoints carry (ltx_core's
`model_configurator` names) where they differ.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property
from typing import Any, ClassVar, Mapping

from vidax.zoo.parts.configs import ConfigError, check_known, pick_fields

ROPE_TYPES = ("interleaved", "split")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """Follows diffusers `LTX2VideoTransformer3DModel`'s constructor arguments and defaults.

    LTX-2.0 ships `rope_type="split"` and a caption projection inside the DiT
    (`use_prompt_embeddings`); LTX-2.3 adds gated attention (`gated_attn`), prompt AdaLN
    (`cross_attn_mod`) and moves the caption projections into the connectors; LTX-2.5 drops the
    video FFN biases (`ff_bias=False`) and the timestep-dependent prompt AdaLN
    (`use_prompt_adaln_single=False`).
    """

    in_channels: int = 128
    out_channels: int | None = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    cross_attention_dim: int = 4096
    vae_scale_factors: tuple[int, int, int] = (8, 32, 32)
    pos_embed_max_pos: int = 20
    base_height: int = 2048
    base_width: int = 2048
    gated_attn: bool = False
    cross_attn_mod: bool = False
    audio_in_channels: int = 128
    audio_out_channels: int | None = 128
    audio_patch_size: int = 1
    audio_patch_size_t: int = 1
    audio_num_attention_heads: int = 32
    audio_attention_head_dim: int = 64
    audio_cross_attention_dim: int = 2048
    audio_scale_factor: int = 4
    audio_pos_embed_max_pos: int = 20
    audio_sampling_rate: int = 16000
    audio_hop_length: int = 160
    audio_gated_attn: bool = False
    audio_cross_attn_mod: bool = False
    num_layers: int = 48
    activation_fn: str = "gelu-approximate"
    qk_norm: str = "rms_norm_across_heads"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 3840
    attention_bias: bool = True
    attention_out_bias: bool = True
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    causal_offset: int = 1
    timestep_scale_multiplier: int = 1000
    cross_attn_timestep_scale_multiplier: int = 1000
    rope_type: str = "interleaved"
    use_prompt_embeddings: bool = True
    perturbed_attn: bool = False
    ff_bias: bool = True
    audio_ff_bias: bool = True
    use_prompt_adaln_single: bool = True
    use_keyframes_abs_pos_embedding: bool = False

    def __post_init__(self):
        where = "LTX-2 transformer"
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"{where}: rope_type {self.rope_type!r} is not one of {ROPE_TYPES}")
        if self.qk_norm != "rms_norm_across_heads":
            raise ValueError(f"{where}: qk_norm {self.qk_norm!r} is not supported (only 'rms_norm_across_heads')")
        if self.activation_fn != "gelu-approximate":
            raise ValueError(f"{where}: activation_fn {self.activation_fn!r} is not supported (only 'gelu-approximate')")
        if self.norm_elementwise_affine:
            raise ValueError(f"{where}: norm_elementwise_affine=True is not supported (every release ships False)")
        if self.patch_size != 1 or self.patch_size_t != 1 or self.audio_patch_size != 1 or self.audio_patch_size_t != 1:
            raise ValueError(f"{where}: patch sizes other than 1 are not supported (the pipeline packs 1x1x1 tokens)")
        for name, dim in (("video", self.inner_dim), ("audio", self.audio_inner_dim),
                          ("cross-modal", self.audio_cross_attention_dim)):
            if dim % 2:
                raise ValueError(f"{where}: the {name} RoPE width {dim} must be even")

    @cached_property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @cached_property
    def audio_inner_dim(self) -> int:
        return self.audio_num_attention_heads * self.audio_attention_head_dim

    @cached_property
    def video_out_channels(self) -> int:
        return self.out_channels or self.in_channels

    @cached_property
    def audio_channels_out(self) -> int:
        return self.audio_out_channels or self.audio_in_channels

    @cached_property
    def video_mod_params(self) -> int:
        return 9 if self.cross_attn_mod else 6

    @cached_property
    def audio_mod_params(self) -> int:
        return 9 if self.audio_cross_attn_mod else 6

    @cached_property
    def prompt_modulation(self) -> bool:
        """Per-block prompt (K/V) scale/shift tables exist (LTX-2.3 and later)."""
        return self.cross_attn_mod or self.audio_cross_attn_mod

    @cached_property
    def prompt_adaln(self) -> bool:
        """The prompt modulation depends on the timestep through `prompt_adaln` (LTX-2.3, not 2.5)."""
        return self.prompt_modulation and self.use_prompt_adaln_single

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "TransformerConfig":
        """Build from a diffusers `transformer/config.json` dict."""
        return cls(**pick_fields(cls, hf))

    @classmethod
    def from_official_config(cls, hf: Mapping[str, Any]) -> "TransformerConfig":
        """From the `config` metadata of Lightricks' single-file checkpoint (its `transformer` entry).

        As strict as `from_hf_config`: every key of the table is one the reader takes (`OFFICIAL_KEYS`),
        one ltx_core builds the DiT for only at one value (`OFFICIAL_FIXED`: any other value is refused,
        as ltx_core refuses it) or one that does not change the DiT (`OFFICIAL_IGNORED`, with why).
        Names per ltx_core's `LTXModelConfigurator`; what the table does not carry keeps its default.
        Checkpoints whose caption projection sits before the connectors (LTX-2.3+) set
        `caption_proj_before_connector`.
        """
        t = dict(hf.get("transformer", hf))
        check_known("LTXModel", t, cls.OFFICIAL_KEYS | set(cls.OFFICIAL_FIXED), cls.OFFICIAL_IGNORED)
        for key, only in cls.OFFICIAL_FIXED.items():
            if key in t and t[key] != only:
                raise ConfigError(f"LTX-2 transformer: official {key}={t[key]!r} is not supported "
                                  f"(ltx_core builds the DiT only for {only!r})")
        return cls(**_official_transformer_fields(t))

    # the keys of the header's `transformer` table that ltx_core's `LTXModelConfigurator` (and its
    # caption projection) reads, and `from_official_config` with it
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "in_channels", "out_channels", "num_attention_heads", "attention_head_dim", "cross_attention_dim",
        "num_layers", "norm_eps", "positional_embedding_theta", "positional_embedding_max_pos",
        "timestep_scale_multiplier", "audio_num_attention_heads", "audio_attention_head_dim", "audio_in_channels",
        "audio_out_channels", "audio_cross_attention_dim", "audio_positional_embedding_max_pos",
        "av_ca_timestep_scale_multiplier", "rope_type", "frequencies_precision", "apply_gated_attention",
        "cross_attention_adaln", "use_prompt_adaln_single", "ff_bias", "audio_ff_bias",
        "use_keyframes_abs_pos_embedding", "caption_channels", "caption_proj_before_connector"})
    # keys ltx_core checks (`check_config_value`, and the text encoder's exact caption-projection markers)
    # and builds for at this one value only; vidax implements that value and refuses any other
    OFFICIAL_FIXED: ClassVar[Mapping[str, Any]] = {
        "dropout": 0.0, "attention_bias": True, "num_vector_embeds": None, "activation_fn": "gelu-approximate",
        "num_embeds_ada_norm": 1000, "use_linear_projection": False, "only_cross_attention": False,
        "cross_attention_norm": True, "double_self_attention": False, "upcast_attention": False,
        "standardization_norm": "rms_norm", "norm_elementwise_affine": False, "qk_norm": "rms_norm",
        "positional_embedding_type": "rope", "use_audio_video_cross_attention": True, "share_ff": False,
        "av_cross_ada_norm": True, "use_middle_indices_grid": True, "caption_projection_first_linear": False,
        "caption_projection_second_linear": False, "caption_proj_input_norm": False}
    # keys the same table carries that do not change the DiT
    OFFICIAL_IGNORED: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys((
            "connector_num_attention_heads", "connector_attention_head_dim", "connector_num_layers",
            "connector_positional_embedding_max_pos", "connector_apply_gated_attention", "connector_ff_bias",
            "audio_connector_num_attention_heads", "audio_connector_attention_head_dim",
            "audio_connector_num_layers"),
            "the text connectors' setting (ltx_core's connector configurators read it from this same table); "
            "it shapes the connectors, not the DiT"),
        **dict.fromkeys(("connector_num_learnable_registers", "connector_learnable_registers_std",
                         "connector_norm_output"),
                        "a text connector's training setting that no ltx_core code reads (the registers are "
                        "weights of the file)"),
        "use_embeddings_connector": "no ltx_core code reads it: every LTX-2 text encoder runs the connectors",
        "text_encoder_norm_type": "no ltx_core code reads it: the text encoder's feature extractor follows "
                                  "caption_proj_before_connector",
        "causal_temporal_positioning": "no ltx_core code reads it from the header: the frames' positions come "
                                       "from the pipeline, not from this key",
        "attention_type": "no ltx_core code reads it: the DiT's blocks have one attention kind",
        "norm_num_groups": "no ltx_core DiT code reads it: the DiT has no group norm (an argument kept from PixArt)",
    }


def _official_transformer_fields(t: Mapping[str, Any]) -> dict[str, Any]:
    """`TransformerConfig` fields from the official `transformer` table (ltx_core's defaults where absent)."""
    max_pos = list(t.get("positional_embedding_max_pos", [20, 2048, 2048]))
    gated = bool(t.get("apply_gated_attention", False))
    adaln = bool(t.get("cross_attention_adaln", False))
    return dict(
        in_channels=t.get("in_channels", 128), out_channels=t.get("out_channels", 128),
        num_attention_heads=t.get("num_attention_heads", 32), attention_head_dim=t.get("attention_head_dim", 128),
        cross_attention_dim=t.get("cross_attention_dim", 4096), num_layers=t.get("num_layers", 48),
        norm_eps=t.get("norm_eps", 1e-6), rope_theta=t.get("positional_embedding_theta", 10000.0),
        pos_embed_max_pos=max_pos[0], base_height=max_pos[1], base_width=max_pos[2],
        audio_num_attention_heads=t.get("audio_num_attention_heads", 32),
        audio_attention_head_dim=t.get("audio_attention_head_dim", 64),
        audio_in_channels=t.get("audio_in_channels", 128), audio_out_channels=t.get("audio_out_channels", 128),
        audio_cross_attention_dim=t.get("audio_cross_attention_dim", 2048),
        audio_pos_embed_max_pos=list(t.get("audio_positional_embedding_max_pos", [20]))[0],
        timestep_scale_multiplier=t.get("timestep_scale_multiplier", 1000),
        cross_attn_timestep_scale_multiplier=t.get("av_ca_timestep_scale_multiplier", 1),
        rope_type=t.get("rope_type", "split"),
        rope_double_precision=t.get("frequencies_precision") == "float64",
        caption_channels=t.get("caption_channels", 3840),
        gated_attn=gated, audio_gated_attn=gated, cross_attn_mod=adaln, audio_cross_attn_mod=adaln,
        use_prompt_embeddings=not t.get("caption_proj_before_connector", False),
        # the official blocks always honour STG's perturbation mask
        perturbed_attn=True,
        use_prompt_adaln_single=t.get("use_prompt_adaln_single", True),
        ff_bias=t.get("ff_bias", True), audio_ff_bias=t.get("audio_ff_bias", True),
        use_keyframes_abs_pos_embedding=t.get("use_keyframes_abs_pos_embedding", False),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConnectorsConfig:
    """Follows diffusers `LTX2TextConnectors`' constructor arguments and defaults."""

    caption_channels: int = 3840
    text_proj_in_factor: int = 49
    video_connector_num_attention_heads: int = 30
    video_connector_attention_head_dim: int = 128
    video_connector_num_layers: int = 2
    video_connector_num_learnable_registers: int | None = 128
    video_gated_attn: bool = False
    audio_connector_num_attention_heads: int = 30
    audio_connector_attention_head_dim: int = 128
    audio_connector_num_layers: int = 2
    audio_connector_num_learnable_registers: int | None = 128
    audio_gated_attn: bool = False
    connector_rope_base_seq_len: int = 4096
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    causal_temporal_positioning: bool = False
    rope_type: str = "interleaved"
    per_modality_projections: bool = False
    video_hidden_dim: int = 4096
    audio_hidden_dim: int = 2048
    proj_bias: bool = False

    def __post_init__(self):
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"LTX-2 connectors: rope_type {self.rope_type!r} is not one of {ROPE_TYPES}")
        if self.causal_temporal_positioning:
            raise ValueError("LTX-2 connectors: causal_temporal_positioning=True is not supported "
                             "(diffusers ignores it too; every release ships False)")

    @cached_property
    def text_dim(self) -> int:
        """Width of the stacked text-encoder features: hidden size x (layers + 1)."""
        return self.caption_channels * self.text_proj_in_factor

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "ConnectorsConfig":
        """Build from a diffusers `connectors/config.json` dict."""
        return cls(**pick_fields(cls, hf))


@dataclasses.dataclass(frozen=True, kw_only=True)
class VideoVAEConfig:
    """Follows diffusers `AutoencoderKLLTX2Video`'s constructor arguments and defaults."""

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (256, 512, 1024, 2048)
    down_block_types: tuple[str, ...] = ("LTX2VideoDownBlock3D",) * 4
    decoder_block_out_channels: tuple[int, ...] = (256, 512, 1024)
    layers_per_block: tuple[int, ...] = (4, 6, 6, 2, 2)
    decoder_layers_per_block: tuple[int, ...] = (5, 5, 5, 5)
    spatio_temporal_scaling: tuple[bool, ...] | bool = (True, True, True, True)
    decoder_spatio_temporal_scaling: tuple[bool, ...] | bool = (True, True, True)
    decoder_inject_noise: tuple[bool, ...] | bool = (False, False, False, False)
    downsample_type: tuple[str, ...] = ("spatial", "temporal", "spatiotemporal", "spatiotemporal")
    upsample_type: tuple[str, ...] = ("spatiotemporal", "spatiotemporal", "spatiotemporal")
    upsample_residual: tuple[bool, ...] | bool = (True, True, True)
    upsample_factor: tuple[int, ...] = (2, 2, 2)
    timestep_conditioning: bool = False
    patch_size: int = 4
    patch_size_t: int = 1
    resnet_norm_eps: float = 1e-6
    scaling_factor: float = 1.0
    encoder_causal: bool = True
    decoder_causal: bool = True
    encoder_spatial_padding_mode: str = "zeros"
    decoder_spatial_padding_mode: str = "reflect"
    spatial_compression_ratio: int | None = None
    temporal_compression_ratio: int | None = None

    def __post_init__(self):
        where = "LTX-2 video VAE"
        n_enc, n_dec = len(self.layers_per_block), len(self.decoder_layers_per_block)
        fill = lambda v, n: (v,) * n if isinstance(v, bool) else tuple(v)  # noqa: E731
        object.__setattr__(self, "spatio_temporal_scaling", fill(self.spatio_temporal_scaling, n_enc - 1))
        object.__setattr__(self, "decoder_spatio_temporal_scaling", fill(self.decoder_spatio_temporal_scaling, n_dec - 1))
        object.__setattr__(self, "decoder_inject_noise", fill(self.decoder_inject_noise, n_dec))
        object.__setattr__(self, "upsample_residual", fill(self.upsample_residual, n_dec - 1))
        if any(self.decoder_inject_noise):
            raise ValueError(f"{where}: decoder_inject_noise is not supported (no LTX-2 release injects noise)")
        if set(self.down_block_types) != {"LTX2VideoDownBlock3D"}:
            raise ValueError(f"{where}: down_block_types {self.down_block_types} are not supported")
        bad = set(self.downsample_type) - {"conv", "spatial", "temporal", "spatiotemporal"}
        bad |= set(self.upsample_type) - {"spatial", "temporal", "spatiotemporal"}
        bad |= {m for m in (self.encoder_spatial_padding_mode, self.decoder_spatial_padding_mode)
                if m not in ("zeros", "reflect")}
        if bad:
            raise ValueError(f"{where}: unsupported sampling or padding modes {sorted(bad)}")

    def _stride_product(self, axis: int) -> int:
        strides = {"conv": (2, 2, 2), "spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
        blocks = range(len(self.block_out_channels))  # the encoder reads the lists' first entries only
        return math.prod(strides[self.downsample_type[i]][axis] for i in blocks if self.spatio_temporal_scaling[i])

    @cached_property
    def spatial_ratio(self) -> int:
        """Pixels per latent along H and W (from the downsamplers; the config's value when it has one)."""
        return self.spatial_compression_ratio or self.patch_size * self._stride_product(1)

    @cached_property
    def temporal_ratio(self) -> int:
        """Frames per latent frame after the first."""
        return self.temporal_compression_ratio or self.patch_size_t * self._stride_product(0)

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "VideoVAEConfig":
        """Build from a diffusers `vae/config.json` dict."""
        return cls(**pick_fields(cls, hf))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AudioVAEConfig:
    """Follows diffusers `AutoencoderKLLTX2Audio`'s constructor arguments (the decoder's share)."""

    base_channels: int = 128
    output_channels: int = 2
    ch_mult: tuple[int, ...] = (1, 2, 4)
    num_res_blocks: int = 2
    attn_resolutions: tuple[int, ...] | None = None
    in_channels: int = 2
    resolution: int = 256
    latent_channels: int = 8
    norm_type: str = "pixel"
    causality_axis: str | None = "height"
    dropout: float = 0.0
    mid_block_add_attention: bool = False
    sample_rate: int = 16000
    mel_hop_length: int = 160
    is_causal: bool = True
    mel_bins: int | None = 64
    double_z: bool = True

    def __post_init__(self):
        where = "LTX-2 audio VAE"
        if self.attn_resolutions or self.mid_block_add_attention:
            raise ValueError(f"{where}: attention blocks are not supported (no release has them)")
        if self.norm_type not in ("pixel", "group"):
            raise ValueError(f"{where}: norm_type {self.norm_type!r} is not supported")
        if self.causality_axis not in ("none", "width", "height", "width-compatibility"):
            raise ValueError(f"{where}: causality_axis {self.causality_axis!r} is not supported")

    # diffusers hard-codes both compressions (LATENT_DOWNSAMPLE_FACTOR)
    temporal_compression_ratio: int = dataclasses.field(default=4, init=False)
    mel_compression_ratio: int = dataclasses.field(default=4, init=False)

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "AudioVAEConfig":
        return cls(**pick_fields(cls, hf))


@dataclasses.dataclass(frozen=True, kw_only=True)
class VocoderConfig:
    """Follows diffusers `LTX2Vocoder` (LTX-2.0) and `LTX2VocoderWithBWE` (LTX-2.3+: a second
    generator on the first one's re-analysed mel spectrogram, at 3x the sample rate)."""

    in_channels: int = 128
    hidden_channels: int = 1024
    out_channels: int = 2
    upsample_kernel_sizes: tuple[int, ...] = (16, 15, 8, 4, 4)
    upsample_factors: tuple[int, ...] = (6, 5, 2, 2, 2)
    resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    act_fn: str = "leaky_relu"
    leaky_relu_negative_slope: float = 0.1
    antialias: bool = False
    antialias_ratio: int = 2
    antialias_kernel_size: int = 12
    final_act_fn: str | None = "tanh"
    final_bias: bool = True
    output_sampling_rate: int = 24000
    # LTX2VocoderWithBWE only (`bwe` is None for the plain vocoder)
    bwe: "VocoderConfig | None" = None
    filter_length: int = 512
    hop_length: int = 80
    window_length: int = 512
    num_mel_channels: int = 64
    input_sampling_rate: int = 16000

    def __post_init__(self):
        if self.act_fn not in ("leaky_relu", "snake", "snakebeta"):
            raise ValueError(f"LTX-2 vocoder: act_fn {self.act_fn!r} is not supported")
        if self.final_act_fn not in ("tanh", "clamp", None):
            raise ValueError(f"LTX-2 vocoder: final_act_fn {self.final_act_fn!r} is not supported")

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "VocoderConfig":
        """A `vocoder/config.json` of either class (`bwe_*` entries make the BWE vocoder)."""
        hf = dict(hf)
        if not any(k.startswith("bwe_") for k in hf):
            return cls(**pick_fields(cls, {k: v for k, v in hf.items() if k != "bwe"}))
        bwe = {k[4:]: v for k, v in hf.items() if k.startswith("bwe_")}
        bwe["output_sampling_rate"] = hf.get("output_sampling_rate", 48000)
        first = {k: v for k, v in hf.items() if not k.startswith("bwe_")}
        first["output_sampling_rate"] = hf.get("input_sampling_rate", 16000)
        defaults = dict(hidden_channels=1536, upsample_kernel_sizes=(11, 4, 4, 4, 4, 4),
                        upsample_factors=(5, 2, 2, 2, 2, 2), act_fn="snakebeta", antialias=True, final_act_fn=None,
                        final_bias=False)  # LTX2VocoderWithBWE's own defaults
        bwe_defaults = dict(in_channels=128, hidden_channels=512, upsample_kernel_sizes=(12, 11, 4, 4, 4),
                            upsample_factors=(6, 5, 2, 2, 2), act_fn="snakebeta", antialias=True,
                            final_act_fn=None, final_bias=False, out_channels=2)
        stage2 = cls(**{**bwe_defaults, **pick_fields(cls, bwe)})
        return cls(**{**defaults, **pick_fields(cls, first), "bwe": stage2})


@dataclasses.dataclass(frozen=True, kw_only=True)
class DiffusionDecoderConfig:
    """Follows diffusers `LTX2VideoDiffusionDecoderModel`'s constructor arguments and defaults (LTX-2.5)."""

    out_channels: int = 3
    latent_channels: int = 128
    patch_size: int = 4
    scaling_factor: float = 1.0
    decoder_head_dim: int = 64
    decoder_stage_channels: tuple[int, ...] = (2048, 1024, 512, 512, 256)
    decoder_stage_depths: tuple[int, ...] = (4, 6, 4, 2, 8)
    decoder_stage_kernels: tuple[tuple[int, int, int], ...] = ((3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5))
    decoder_upsample_strides: tuple[tuple[int, int, int], ...] = ((1, 2, 2), (2, 1, 1), (2, 2, 2), (2, 2, 2))
    decoder_upsample_channel_reductions: tuple[int, ...] = (2, 2, 1, 2)
    decoder_stage5_kernel: tuple[int, int, int] = (11, 11, 11)
    decoder_t_emb_dim: int = 384
    decoder_timestep_scale_multiplier: float = 1000.0
    decoder_model_output_type: str = "x0"
    decoder_num_inference_steps: int = 1
    spatial_compression_ratio: int = 32
    temporal_compression_ratio: int = 8

    def __post_init__(self):
        where = "LTX-2.5 diffusion decoder"
        if self.decoder_model_output_type not in ("x0", "v"):
            raise ValueError(f"{where}: model output type {self.decoder_model_output_type!r} is not 'x0' or 'v'")
        n = len(self.decoder_upsample_strides)
        if len(self.decoder_stage_kernels) != n or len(self.decoder_stage_depths) != n + 1:
            raise ValueError(f"{where}: {n} upsamples need {n} stage kernels and {n + 1} stage depths")
        for i, r in enumerate(self.decoder_upsample_channel_reductions):
            if self.decoder_stage_channels[i + 1] != self.decoder_stage_channels[i] // r:
                raise ValueError(f"{where}: stage_channels[{i + 1}] must be stage_channels[{i}] // {r}")
        if self.decoder_head_dim % 8:
            raise ValueError(f"{where}: head_dim must be a multiple of 8")

    @cached_property
    def trailing_pad(self) -> int:
        """Latent frames replicated at the end for NATTEN's inward-shifted border window."""
        return (self.decoder_stage_kernels[0][0] // 2) * 2

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "DiffusionDecoderConfig":
        return cls(**pick_fields(cls, hf))
