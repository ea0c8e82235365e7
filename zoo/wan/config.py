"""The Wan DiT's config, read field by field from a diffusers or an official config.json.

Sizes always come from the checkpoint's own config, never from presets. The diffusers
`WanTransformer3DModel` config names are the canonical fields; the official Wan repos' `WanModel`
config (`dim`, `num_heads`, `in_dim`, `model_type`, ...) is translated into them.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, ClassVar, Mapping

from vidax.translator import VidaxError
from vidax.zoo.parts.configs import check_known, pick_fields

ACROSS_HEADS = "rms_norm_across_heads"  # the only q/k norm the released Wan models use

# Official `model_type`s whose checkpoints carry the CLIP image branch (Wan2.1 I2V / FLF2V).
# Wan2.2 I2V-A14B says "i2v" too but has no image branch: pass `param_shapes` to tell them apart.
_IMAGE_TYPES = ("i2v", "flf2v")
CLIP_IMAGE_DIM = 1280  # ViT-H/14 penultimate width, fixed by the official code
CLIP_IMAGE_TOKENS = 257


class WanConfigError(VidaxError, ValueError):
    """A Wan transformer config that vidax cannot run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WanTransformerConfig:
    """Follows diffusers `WanTransformer3DModel`'s constructor arguments and defaults.

    Args:
      text_len: text tokens the pipeline feeds (the reference splits I2V context assuming 512).
      model_type: the official config's task tag (t2v, i2v, flf2v, ti2v), when known.
    """

    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    qk_norm: str | None = ACROSS_HEADS
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_max_seq_len: int = 1024
    pos_embed_seq_len: int | None = None
    text_len: int = 512
    model_type: str | None = None

    # the official `WanModel` config's keys, all read by `_official_fields`
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "dim", "num_heads", "model_type", "patch_size", "in_dim", "out_dim", "text_dim", "freq_dim", "ffn_dim",
        "num_layers", "cross_attn_norm", "qk_norm", "eps", "text_len", "window_size"})

    def __post_init__(self):
        if self.qk_norm != ACROSS_HEADS:
            raise WanConfigError(f"Wan transformer: qk_norm {self.qk_norm!r} is not supported (only {ACROSS_HEADS!r})")
        if len(self.patch_size) != 3:
            raise WanConfigError(f"Wan transformer: patch_size must be (t, h, w), got {self.patch_size}")
        if (self.image_dim is None) != (self.added_kv_proj_dim is None):
            raise WanConfigError("Wan transformer: image_dim and added_kv_proj_dim must be set together (I2V)")
        if self.added_kv_proj_dim not in (None, self.inner_dim):  # add_k_proj reads the embedded image tokens
            raise WanConfigError(
                f"Wan transformer: added_kv_proj_dim {self.added_kv_proj_dim} must equal the model width "
                f"{self.inner_dim}"
            )

    @cached_property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @cached_property
    def has_image(self) -> bool:
        """True for the Wan2.1 I2V / FLF2V models: CLIP tokens through the image embedder and added k/v."""
        return self.image_dim is not None

    @cached_property
    def rope_dims(self) -> tuple[int, int, int]:
        """Head-dim split into (t, h, w) rotary parts (diffusers `WanRotaryPosEmbed`)."""
        h = w = 2 * (self.attention_head_dim // 6)
        return (self.attention_head_dim - h - w, h, w)

    @classmethod
    def from_hf_config(
        cls, hf: Mapping[str, Any], param_shapes: Mapping[str, tuple] | None = None
    ) -> "WanTransformerConfig":
        """Build from a diffusers `transformer/config.json` or an official `config.json` dict.

        Args:
          hf: the parsed config.json.
          param_shapes: optional converted-tree shapes (`{"a/b/kernel": shape}`); when given they
            decide whether the image branch exists (official configs cannot say for Wan2.2 I2V).
        """
        fields = _official_fields(hf) if _is_official(hf) else _diffusers_fields(hf)
        if param_shapes is not None:
            fields.update(_image_fields_from_shapes(param_shapes))
        return cls(**fields)


def _is_official(hf: Mapping[str, Any]) -> bool:
    return "dim" in hf and "num_heads" in hf


def _diffusers_fields(hf: Mapping[str, Any]) -> dict[str, Any]:
    out = pick_fields(WanTransformerConfig, hf)
    if out.get("out_channels") is None:  # diffusers: `out_channels or in_channels`
        out["out_channels"] = out.get("in_channels", WanTransformerConfig.in_channels)
    return out


def _official_fields(hf: Mapping[str, Any]) -> dict[str, Any]:
    """Official `WanModel` config -> diffusers fields (as diffusers' single-file loader maps them)."""
    check_known("WanModel", hf, WanTransformerConfig.OFFICIAL_KEYS)
    if tuple(hf.get("window_size", (-1, -1))) != (-1, -1):  # the released models attend globally
        raise WanConfigError(f"Wan transformer: local attention window_size {hf['window_size']} is not supported")
    dim, heads = int(hf["dim"]), int(hf["num_heads"])
    if dim % heads:
        raise WanConfigError(f"Wan transformer: dim {dim} is not a multiple of num_heads {heads}")
    model_type = hf.get("model_type", "t2v")
    out: dict[str, Any] = dict(
        patch_size=tuple(hf.get("patch_size", (1, 2, 2))),
        num_attention_heads=heads,
        attention_head_dim=dim // heads,
        in_channels=int(hf.get("in_dim", 16)),
        out_channels=int(hf.get("out_dim", 16)),
        text_dim=int(hf.get("text_dim", 4096)),
        freq_dim=int(hf.get("freq_dim", 256)),
        ffn_dim=int(hf["ffn_dim"]),
        num_layers=int(hf["num_layers"]),
        cross_attn_norm=bool(hf.get("cross_attn_norm", True)),
        qk_norm=ACROSS_HEADS if hf.get("qk_norm", True) else None,
        eps=float(hf.get("eps", 1e-6)),
        text_len=int(hf.get("text_len", 512)),
        model_type=model_type,
    )
    if model_type in _IMAGE_TYPES:
        out.update(image_dim=CLIP_IMAGE_DIM, added_kv_proj_dim=dim)
    if model_type == "flf2v":
        out["pos_embed_seq_len"] = 2 * CLIP_IMAGE_TOKENS  # first and last frame, 257 tokens each
    return out


def _image_fields_from_shapes(shapes: Mapping[str, tuple]) -> dict[str, Any]:
    kernel = shapes.get("condition_embedder/image_embedder/ff/net_0/proj/kernel")
    if kernel is None:
        return dict(image_dim=None, added_kv_proj_dim=None, pos_embed_seq_len=None)
    pos = shapes.get("condition_embedder/image_embedder/pos_embed")
    return dict(
        image_dim=int(kernel[0]),
        added_kv_proj_dim=int(shapes["blocks/attn2/add_k_proj/kernel"][-2]),
        pos_embed_seq_len=None if pos is None else int(pos[1]),
    )
