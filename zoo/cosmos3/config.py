"""The Cosmos3 transformer's config, read field by field from diffusers' `transformer/config.json`.

Two released backbones share the architecture (nvidia/Cosmos3-Nano: a Qwen3-VL text tower, SwiGLU
MLPs, q/k norms on both pathways; nvidia/Cosmos3-Edge: a dense Nemotron tower, `relu2` MLPs
`down(relu(up(x))^2)`, no q/k norm on the text pathway but `k_norm_und_for_gen` on the text keys the
generation pathway reads). Both checkpoints also carry sound and/or action heads; vidax generates
video only and leaves those weights unconverted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

from vidax.translator import VidaxError
from vidax.zoo.parts.configs import pick_fields

ACTIVATIONS = ("silu", "relu2")  # the two diffusers accepts


class Cosmos3ConfigError(VidaxError, ValueError):
    """A Cosmos3 transformer config that vidax cannot run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cosmos3TransformerConfig:
    """Follows diffusers `Cosmos3OmniTransformer`'s constructor arguments and defaults."""

    attention_bias: bool = False
    head_dim: int = 128
    hidden_size: int = 4096
    intermediate_size: int = 12288
    base_fps: int = 24
    enable_fps_modulation: bool = True
    latent_channel: int = 48
    unified_3d_mrope_reset_spatial_ids: bool = True
    unified_3d_mrope_temporal_modality_margin: int = 15000
    latent_patch_size: int = 2
    num_attention_heads: int = 32
    num_hidden_layers: int = 36
    num_key_value_heads: int = 8
    patch_latent_dim: int = 192
    rms_norm_eps: float = 1e-6
    rope_theta: float = 5000000.0
    timestep_scale: float = 0.001
    vocab_size: int = 151936
    hidden_act: str = "silu"
    qk_norm_for_text: bool = True
    use_und_k_norm_for_gen: bool = False
    rope_axes_dim: tuple[int, int, int] = (24, 20, 20)
    # heads vidax does not run (their weights are left out of the converted tree)
    sound_gen: bool = False
    action_gen: bool = False

    IGNORED: ClassVar[Mapping[str, str]] = {
        "attention_dropout": "training only: attention dropout",
        "sound_dim": "sound head (sound_gen): vidax generates video only",
        "sound_latent_fps": "sound head (sound_gen): vidax generates video only",
        "action_dim": "action head (action_gen): vidax generates video only",
        "num_embodiment_domains": "action head (action_gen): vidax generates video only",
    }

    def __post_init__(self):
        if self.hidden_act not in ACTIVATIONS:
            raise Cosmos3ConfigError(f"Cosmos3 transformer: hidden_act {self.hidden_act!r} is not one of {ACTIVATIONS}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise Cosmos3ConfigError("Cosmos3 transformer: num_attention_heads must be a multiple of num_key_value_heads")
        if sum(self.rope_axes_dim) != self.head_dim // 2:
            raise Cosmos3ConfigError(f"Cosmos3 transformer: rope_axes_dim {self.rope_axes_dim} must sum to "
                                     f"head_dim / 2 = {self.head_dim // 2}")
        if self.patch_latent_dim != self.latent_channel * self.latent_patch_size**2:
            raise Cosmos3ConfigError("Cosmos3 transformer: patch_latent_dim must be latent_channel * latent_patch_size^2")

    @cached_property
    def gated_mlp(self) -> bool:
        """SwiGLU (gate, up, down) for silu; two projections for relu2."""
        return self.hidden_act == "silu"

    @cached_property
    def und_k_norm_for_gen(self) -> bool:
        """diffusers builds `k_norm_und_for_gen` only when the text pathway has no q/k norm."""
        return self.use_und_k_norm_for_gen and not self.qk_norm_for_text

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> Cosmos3TransformerConfig:
        """Build from a diffusers `transformer/config.json` dict (`rope_axes_dim` falls back to
        `rope_scaling.mrope_section`, then (24, 20, 20), as the reference does; the released configs'
        `temporal_compression_factor`, which the pipeline's positions use, must be the VAE's 4)."""
        fields = pick_fields(cls, hf, read=("rope_scaling", "temporal_compression_factor"))
        if hf.get("temporal_compression_factor", 4) != 4:  # the positions' fps scale (`rope.py`) assumes the VAE's 4
            raise Cosmos3ConfigError(f"Cosmos3 transformer: temporal_compression_factor "
                                     f"{hf['temporal_compression_factor']} is not supported (only 4, the Wan2.2 VAE's)")
        if fields.get("rope_axes_dim") is None:
            fields["rope_axes_dim"] = tuple((hf.get("rope_scaling") or {}).get("mrope_section", (24, 20, 20)))
        return cls(**fields)
