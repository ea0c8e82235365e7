"""Configs of the CogVideoX 1.0 / 1.5 transformer and VAE, read field by field from config.json.

The diffusers `CogVideoXTransformer3DModel` / `AutoencoderKLCogVideoX` config names are the
canonical fields (every released repo ships the diffusers layout). The authors' SAT configs
(`sat/configs/cogvideox*.yaml` of THUDM/CogVideo: `network_config.params`) are translated into them
by `from_sat_config`, as `tools/convert_weight_sat2hf.py` of that repository maps them.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, ClassVar, Mapping

from vidax.translator import VidaxError
from vidax.zoo.parts.configs import pick_fields


class CogVideoXConfigError(VidaxError, ValueError):
    """A CogVideoX config that vidax cannot run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CogVideoXTransformerConfig:
    """Follows diffusers `CogVideoXTransformer3DModel`'s constructor arguments and defaults.

    1.0 (2B, 5B, 5B-I2V): `patch_size_t` None, a Conv2d patch embedding; 1.5: `patch_size_t` 2, a
    Linear one. Position information: sincos table (2B), 3D RoPE (5B, 1.5), and for 5B-I2V a learned
    table added on top of the RoPE (`use_learned_positional_embeddings`). 1.5 I2V adds the ofs
    embedding (`ofs_embed_dim`).
    """

    num_attention_heads: int = 30
    attention_head_dim: int = 64
    in_channels: int = 16
    out_channels: int = 16
    flip_sin_to_cos: bool = True
    freq_shift: int = 0
    time_embed_dim: int = 512
    ofs_embed_dim: int | None = None
    text_embed_dim: int = 4096
    num_layers: int = 30
    attention_bias: bool = True
    sample_width: int = 90
    sample_height: int = 60
    sample_frames: int = 49
    patch_size: int = 2
    patch_size_t: int | None = None
    temporal_compression_ratio: int = 4
    max_text_seq_length: int = 226
    activation_fn: str = "gelu-approximate"
    timestep_activation_fn: str = "silu"
    norm_elementwise_affine: bool = True
    norm_eps: float = 1e-5
    spatial_interpolation_scale: float = 1.875
    temporal_interpolation_scale: float = 1.0
    use_rotary_positional_embeddings: bool = False
    use_learned_positional_embeddings: bool = False
    patch_bias: bool = True

    IGNORED: ClassVar[Mapping[str, str]] = {"dropout": "training only: attention and feed-forward dropout"}

    def __post_init__(self):
        problems = []
        if self.use_learned_positional_embeddings and not self.use_rotary_positional_embeddings:
            problems.append("learned positional embeddings without RoPE exist in no released checkpoint "
                            "(diffusers refuses them too)")
        if self.activation_fn != "gelu-approximate":
            problems.append(f"activation_fn {self.activation_fn!r} (only 'gelu-approximate')")
        if self.timestep_activation_fn != "silu":
            problems.append(f"timestep_activation_fn {self.timestep_activation_fn!r} (only 'silu')")
        if not self.norm_elementwise_affine:
            problems.append("norm_elementwise_affine False (every release has affine norms)")
        if self.ofs_embed_dim not in (None, self.time_embed_dim):
            problems.append(f"ofs_embed_dim {self.ofs_embed_dim} must equal time_embed_dim {self.time_embed_dim} "
                            "(the ofs embedding is added to the time embedding)")
        if self.patch_size_t not in (None, 1, 2, 3, 4):
            problems.append(f"patch_size_t {self.patch_size_t}")
        if self.use_rotary_positional_embeddings and sum(self.rope_dims) != self.attention_head_dim:
            problems.append(f"attention_head_dim {self.attention_head_dim} does not split into the reference's "
                            f"3D RoPE parts {self.rope_dims}")
        if not self.use_rotary_positional_embeddings and self.inner_dim % 16:
            problems.append(f"model width {self.inner_dim} must be a multiple of 16 for the 3D sincos table")
        if problems:
            raise CogVideoXConfigError("CogVideoX transformer: unsupported " + "; ".join(problems))

    @cached_property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @cached_property
    def ff_inner_dim(self) -> int:
        return 4 * self.inner_dim  # diffusers `FeedForward(dim)`: mult 4

    @cached_property
    def patch(self) -> tuple[int, int, int]:
        """(t, h, w) patch; 1.0 patches each frame on its own."""
        return (self.patch_size_t or 1, self.patch_size, self.patch_size)

    @cached_property
    def rope_dims(self) -> tuple[int, int, int]:
        """Head-dim split into (t, h, w) rotary parts (diffusers `get_3d_rotary_pos_embed`)."""
        d = self.attention_head_dim
        return (d // 4, d // 8 * 3, d // 8 * 3)

    @cached_property
    def has_positional_table(self) -> bool:
        """A table is added to the joint sequence (2B: sincos; 5B-I2V: learned), so text is 226 tokens."""
        return self.use_learned_positional_embeddings or not self.use_rotary_positional_embeddings

    @cached_property
    def sample_latent_frames(self) -> int:
        """Latent frames of the learned table (`sample_frames` counts pixel frames; see diffusers)."""
        return (self.sample_frames - 1) // self.temporal_compression_ratio + 1

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "CogVideoXTransformerConfig":
        """Build from a diffusers `transformer/config.json` dict."""
        fields = pick_fields(cls, hf)
        if fields.get("out_channels") is None:
            fields.pop("out_channels", None)
        return cls(**fields)

    @classmethod
    def from_sat_config(cls, params: Mapping[str, Any]) -> "CogVideoXTransformerConfig":
        """Build from a SAT config's `model.network_config.params` (THUDM/CogVideo `sat/configs/*.yaml`).

        Follows `tools/convert_weight_sat2hf.py`: heads, layers and channels from the yaml; 1.5
        (`patch_size` a [t, h, w] list) gets the released 1.5 transformer config's values (`patch_bias`
        False, sample 300 x 300 latents, 81 frames), 1.0 the yaml's latent size and frame count.
        """
        hidden, heads = int(params["hidden_size"]), int(params["num_attention_heads"])
        patch = params.get("patch_size", 2)
        modules = params.get("modules", {})
        pos_target = str(modules.get("pos_embed_config", {}).get("target", ""))
        rotary = "Rotary3D" in pos_target
        pos_params = modules.get("pos_embed_config", {}).get("params", {})
        fields: dict[str, Any] = dict(
            num_attention_heads=heads,
            attention_head_dim=hidden // heads,
            in_channels=int(params.get("in_channels", 16)),
            out_channels=int(params.get("out_channels", 16)),
            time_embed_dim=int(params.get("time_embed_dim", 512)),
            ofs_embed_dim=params.get("ofs_embed_dim"),
            num_layers=int(params["num_layers"]),
            use_rotary_positional_embeddings=rotary,
            use_learned_positional_embeddings=bool(rotary and pos_params.get("learnable_pos_embed", False)),
            text_embed_dim=int(modules.get("patch_embed_config", {}).get("params", {}).get("text_hidden_size", 4096)),
        )
        if isinstance(patch, (list, tuple)):  # 1.5: [t, h, w]
            fields.update(patch_size_t=int(patch[0]), patch_size=int(patch[1]), patch_bias=False,
                          sample_height=300, sample_width=300, sample_frames=81)
        else:
            fields.update(patch_size=int(patch), sample_height=int(params.get("latent_height", 60)),
                          sample_width=int(params.get("latent_width", 90)),
                          sample_frames=int(params.get("num_frames", 49)))
        if not rotary:  # 2B: Basic3DPositionEmbeddingMixin's interpolation factors
            fields["spatial_interpolation_scale"] = float(pos_params.get("height_interpolation", 1.875))
        return cls(**fields)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CogVideoXVAEConfig:
    """Follows diffusers `AutoencoderKLCogVideoX`'s constructor arguments and defaults.

    `scaling_factor` is 1.15258426 for 2B and 0.7 for 5B and 1.5; `invert_scale_latents` (1.5)
    makes the I2V pipeline *divide* the image latents by it (diffusers: the team forgot the
    scaling during training). Decoding always divides the DiT's latents by `scaling_factor`.
    """

    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple[int, ...] = (128, 256, 256, 512)
    latent_channels: int = 16
    layers_per_block: int = 3
    act_fn: str = "silu"
    norm_eps: float = 1e-6
    norm_num_groups: int = 32
    temporal_compression_ratio: int = 4
    sample_height: int = 480
    sample_width: int = 720
    scaling_factor: float = 1.15258426
    shift_factor: float | None = None
    latents_mean: tuple[float, ...] | None = None
    latents_std: tuple[float, ...] | None = None
    use_quant_conv: bool = False
    use_post_quant_conv: bool = False
    invert_scale_latents: bool = False
    down_block_types: tuple[str, ...] = ("CogVideoXDownBlock3D",) * 4
    up_block_types: tuple[str, ...] = ("CogVideoXUpBlock3D",) * 4

    IGNORED: ClassVar[Mapping[str, str]] = {
        "force_upcast": "diffusers' hint to run a half-precision VAE in fp32 (vidax picks the VAE dtype itself)"}

    def __post_init__(self):
        problems = []
        if self.act_fn != "silu":
            problems.append(f"act_fn {self.act_fn!r} (only 'silu')")
        if self.use_quant_conv or self.use_post_quant_conv:
            # diffusers sizes these convs by out_channels, not the latent width: no release uses them
            problems.append("quant / post-quant convs")
        if self.shift_factor is not None or self.latents_mean is not None or self.latents_std is not None:
            problems.append("latent shift or mean/std (the CogVideoX pipelines never apply them)")
        if set(self.down_block_types) != {"CogVideoXDownBlock3D"} or set(self.up_block_types) != {"CogVideoXUpBlock3D"}:
            problems.append(f"block types {self.down_block_types} / {self.up_block_types}")
        if len(self.down_block_types) != len(self.block_out_channels) or len(self.up_block_types) != len(self.block_out_channels):
            problems.append("one down and one up block per block_out_channels entry")
        if 2 ** self.temporal_levels != self.temporal_compression_ratio:
            problems.append(f"temporal_compression_ratio {self.temporal_compression_ratio} (a power of 2)")
        if problems:
            raise CogVideoXConfigError("CogVideoX VAE: unsupported " + "; ".join(problems))

    @cached_property
    def spatial_compression(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    @cached_property
    def temporal_levels(self) -> int:
        """Down/up blocks that also halve/double time (the first `log2(ratio)` of each)."""
        return max(int(self.temporal_compression_ratio).bit_length() - 1, 0)

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "CogVideoXVAEConfig":
        """Build from a diffusers `vae/config.json` dict."""
        return cls(**pick_fields(cls, hf))
