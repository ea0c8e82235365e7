"""Configs of the LTX-Video 0.9.x transformer, VAE and latent upsampler.

Field names are diffusers' constructor arguments (`LTXVideoTransformer3DModel`,
`AutoencoderKLLTXVideo`, `LTXLatentUpsamplerModel`). Two readers fill them:

- `from_hf_config`: a diffusers `config.json`, field by field.
- `from_official_config`: the official single-file checkpoints (Lightricks/LTX-Video) carry their
  config as JSON in the safetensors header (`__metadata__["config"]`, with `transformer`, `vae` and
  `scheduler` tables in the official code's own names: `Transformer3DModel`,
  `CausalVideoAutoencoder` with a `blocks` list, `RectifiedFlowScheduler`); the latent upsampler's
  file carries its config directly. These readers translate them; what diffusers' classes cannot
  express (group-norm VAEs, attention blocks in the VAE, reflect padding, ...) is refused with a
  `LTXConfigError` naming the entry. Each official reader is as strict as the diffusers one: a key
  that is neither in its class's `OFFICIAL_KEYS` nor ignored by name in `OFFICIAL_IGNORED` (with the
  reason) is a `ConfigError`.

`read_checkpoint_config(path)` returns that header config of a single file.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Mapping

from vidax.zoo.parts.configs import check_known, pick_fields


class LTXConfigError(ValueError):
    """An LTX-Video config that vidax cannot run."""


def read_checkpoint_config(path: str | Path) -> dict:
    """The JSON config in a single-file checkpoint's safetensors header (`__metadata__["config"]`).

    Reads the header only, through `vidax.translator.read_metadata` (no tensor data is touched).

    Raises:
      LTXConfigError: the file has no `config` entry (e.g. a diffusers shard, or a stripped file).
    """
    from vidax.translator import read_metadata

    # a named layout opens the file as given (no key detection): any single file's header is read
    text = read_metadata("ltx_video/transformer", Path(path), layout="official").get("config")
    if text is None:
        raise LTXConfigError(f"{path}: no `config` entry in the safetensors header metadata (not an official "
                             "LTX-Video single-file checkpoint); pass the diffusers folder or its config.json")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise LTXConfigError(f"{path}: the header's `config` entry is not valid JSON ({err})") from None


# ---------------------------------------------------------------------------------------------
# Transformer


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """Follows diffusers `LTXVideoTransformer3DModel`'s constructor arguments and defaults (2B).

    Also: the RoPE constants diffusers hard-codes (`rope_theta`, `rope_max_pos` = base frames,
    height, width) and the official config's `causal_temporal_positioning` (0.9.5+: frame
    positions are `max(8f - 7, 0)`, the causal VAE's first-frame fix; the pipelines build the
    coordinates, the DiT only reads them), None when the config does not say.
    """

    in_channels: int = 128
    out_channels: int = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 64
    cross_attention_dim: int = 2048
    num_layers: int = 28
    activation_fn: str = "gelu-approximate"
    qk_norm: str = "rms_norm_across_heads"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 4096
    attention_bias: bool = True
    attention_out_bias: bool = True
    rope_theta: float = 10000.0
    rope_max_pos: tuple[int, int, int] = (20, 2048, 2048)
    causal_temporal_positioning: bool | None = None

    # the official `Transformer3DModel` keys `from_official_config` reads (or checks and refuses)
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "in_channels", "out_channels", "num_attention_heads", "attention_head_dim", "cross_attention_dim",
        "num_layers", "activation_fn", "norm_elementwise_affine", "norm_eps", "caption_channels", "attention_bias",
        "attention_out_bias", "positional_embedding_theta", "positional_embedding_max_pos",
        "causal_temporal_positioning", "adaptive_norm", "standardization_norm", "qk_norm",
        "positional_embedding_type", "attention_type", "timestep_scale_multiplier", "only_cross_attention",
        "double_self_attention"})
    # the rest of the official constructor's arguments (every release's, as the header configs write them)
    OFFICIAL_IGNORED: ClassVar[Mapping[str, str]] = {
        "dropout": "training only: attention and feed-forward dropout",
        "norm_num_groups": "unused by the official DiT (a PixArt constructor argument it keeps)",
        "num_vector_embeds": "unused by the official DiT (PixArt's discrete-input mode, always null)",
        "num_embeds_ada_norm": "unused by the official DiT's AdaLayerNormSingle (the timestep table size)",
        "use_linear_projection": "unused by the official DiT (PixArt's projection switch, always false)",
        "upcast_attention": "torch numerics switch (attention scores in fp32); vidax decides its own precision",
        "use_tpu_flash_attention": "torch runtime switch (the TPU attention kernel); the model is unchanged",
        "project_to_2d_pos": "unused by the RoPE DiT (an absolute-position switch of 0.9.0's constructor)",
    }

    def __post_init__(self):
        checks = [
            (self.qk_norm == "rms_norm_across_heads", f"qk_norm {self.qk_norm!r} (only 'rms_norm_across_heads')"),
            (self.activation_fn == "gelu-approximate", f"activation_fn {self.activation_fn!r} (only 'gelu-approximate')"),
            (not self.norm_elementwise_affine, "norm_elementwise_affine=True (the released models have none)"),
            (self.attention_bias and self.attention_out_bias, "attention projections without bias"),
            (self.cross_attention_dim == self.inner_dim,
             f"cross_attention_dim {self.cross_attention_dim} != heads x head_dim {self.inner_dim} (the caption "
             "projection feeds cross-attention at the model width)"),
            (self.inner_dim % 2 == 0, "an odd model width (RoPE rotates pairs)"),
        ]
        for ok, what in checks:
            if not ok:
                raise LTXConfigError(f"LTX-Video transformer: {what} is not supported")

    @cached_property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @cached_property
    def ffn_dim(self) -> int:
        return 4 * self.inner_dim  # diffusers FeedForward(dim, mult=4)

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "TransformerConfig":
        """From a diffusers `transformer/config.json` dict."""
        return cls(**pick_fields(cls, hf))

    @classmethod
    def from_official_config(cls, cfg: Mapping[str, Any]) -> "TransformerConfig":
        """From the official `Transformer3DModel` config (the header config's `transformer` table)."""
        cfg = dict(cfg.get("transformer", cfg))
        check_known("Transformer3DModel", cfg, cls.OFFICIAL_KEYS, cls.OFFICIAL_IGNORED)
        refuse = {
            "only_cross_attention": (False,),
            "double_self_attention": (False,),
            "adaptive_norm": ("single_scale_shift",),
            "standardization_norm": ("rms_norm",),
            "qk_norm": ("rms_norm",),
            "positional_embedding_type": ("rope",),
            "attention_type": ("default",),
        }
        for key, allowed in refuse.items():
            if key in cfg and cfg[key] not in allowed:
                raise LTXConfigError(f"LTX-Video transformer: official {key}={cfg[key]!r} is not supported "
                                     f"(only {', '.join(map(repr, allowed))})")
        if cfg.get("timestep_scale_multiplier", 1000) != 1000:
            raise LTXConfigError("LTX-Video transformer: timestep_scale_multiplier "
                                 f"{cfg['timestep_scale_multiplier']} (only 1000, diffusers' timestep scale)")
        heads, head_dim = cfg["num_attention_heads"], cfg["attention_head_dim"]
        fields = dict(
            in_channels=cfg["in_channels"], out_channels=cfg.get("out_channels") or cfg["in_channels"],
            num_attention_heads=heads, attention_head_dim=head_dim,
            cross_attention_dim=cfg.get("cross_attention_dim", heads * head_dim), num_layers=cfg["num_layers"],
            activation_fn=cfg.get("activation_fn", "gelu-approximate"), qk_norm="rms_norm_across_heads",
            norm_elementwise_affine=cfg.get("norm_elementwise_affine", False), norm_eps=cfg.get("norm_eps", 1e-6),
            caption_channels=cfg.get("caption_channels", 4096), attention_bias=cfg.get("attention_bias", True),
            attention_out_bias=cfg.get("attention_out_bias", True),
            rope_theta=float(cfg.get("positional_embedding_theta", 10000.0)),
            rope_max_pos=tuple(cfg.get("positional_embedding_max_pos", (20, 2048, 2048))),
            causal_temporal_positioning=bool(cfg.get("causal_temporal_positioning", False)),
        )
        return cls(**fields)


# ---------------------------------------------------------------------------------------------
# VAE

ENCODER_095 = "LTXVideo095DownBlock3D"
ENCODER_090 = "LTXVideoDownBlock3D"
STRIDES = {"conv": (2, 2, 2), "spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
_DOWNSAMPLE = {"compress_space_res": "spatial", "compress_time_res": "temporal", "compress_all_res": "spatiotemporal"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class VAEConfig:
    """Follows diffusers `AutoencoderKLLTXVideo`'s constructor arguments and defaults (0.9.0).

    0.9.0: conv down/up blocks, no timestep conditioning. 0.9.1: a wider residual-upsampling
    decoder with timestep conditioning and injected noise. 0.9.5+ (0.9.5 to 0.9.8, 2B and 13B):
    space-to-depth encoder (`LTXVideo095DownBlock3D`), the same timestep-conditioned decoder
    without injected noise.
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    down_block_types: tuple[str, ...] = (ENCODER_090,) * 4
    decoder_block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    decoder_layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_inject_noise: tuple[bool, ...] = (False, False, False, False, False)
    downsample_type: tuple[str, ...] = ("conv", "conv", "conv", "conv")
    upsample_residual: tuple[bool, ...] = (False, False, False, False)
    upsample_factor: tuple[int, ...] = (1, 1, 1, 1)
    timestep_conditioning: bool = False
    patch_size: int = 4
    patch_size_t: int = 1
    resnet_norm_eps: float = 1e-6
    scaling_factor: float = 1.0
    encoder_causal: bool = True
    decoder_causal: bool = False
    spatial_compression_ratio: int | None = None
    temporal_compression_ratio: int | None = None

    # the official `CausalVideoAutoencoder` keys `from_official_config` reads (or checks and refuses)
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "dims", "norm_layer", "latent_log_var", "use_quant_conv", "spatial_padding_mode",
        "normalize_latent_channels", "causal_decoder", "blocks", "encoder_blocks", "decoder_blocks",
        "encoder_base_channels", "decoder_base_channels", "timestep_conditioning", "in_channels", "out_channels",
        "latent_channels", "patch_size", "scaling_factor"})
    OFFICIAL_IGNORED: ClassVar[Mapping[str, str]] = {
        "double_z": "only the official default of latent_log_var, which the released configs name themselves",
    }

    def __post_init__(self):
        if self.patch_size_t != 1:
            raise LTXConfigError("LTX-Video VAE: patch_size_t != 1 is not supported (the released VAEs use 1)")
        n_down = self.num_down_blocks
        if len(self.down_block_types) < n_down or len(self.spatio_temporal_scaling) < n_down \
                or len(self.layers_per_block) < n_down + 1:
            raise LTXConfigError(f"LTX-Video VAE: encoder lists shorter than its {n_down} blocks")
        unknown = set(self.down_block_types[:n_down]) - {ENCODER_090, ENCODER_095}
        if unknown:
            raise LTXConfigError(f"LTX-Video VAE: down_block_types {sorted(unknown)} are not supported")
        kinds = {self.downsample_kind(i) for i in range(n_down)} - {None, *STRIDES}
        if kinds:
            raise LTXConfigError(f"LTX-Video VAE: downsample_type {sorted(kinds)} is not one of {', '.join(STRIDES)}")
        n_up = len(self.decoder_block_out_channels)
        lengths = (len(self.decoder_spatio_temporal_scaling), len(self.upsample_residual), len(self.upsample_factor))
        if min(lengths) < n_up or min(len(self.decoder_layers_per_block), len(self.decoder_inject_noise)) < n_up + 1:
            raise LTXConfigError("LTX-Video VAE: decoder lists shorter than its blocks "
                                 f"({self.decoder_block_out_channels}, {self.decoder_layers_per_block})")

    @cached_property
    def is_095(self) -> bool:
        """diffusers decides the encoder's channel bookkeeping by its last block type."""
        return self.down_block_types[-1] == ENCODER_095

    @cached_property
    def num_down_blocks(self) -> int:
        return len(self.block_out_channels) - (1 if self.is_095 else 0)

    def downsample_kind(self, i: int) -> str | None:
        """Encoder block `i`'s downsampler: None, "conv" (`LTXVideoDownBlock3D`'s stride-2 conv, whatever
        `downsample_type` says) or the 0.9.5 block's `downsample_type[i]`."""
        if not self.spatio_temporal_scaling[i]:
            return None
        return self.downsample_type[i] if self.down_block_types[i] == ENCODER_095 else "conv"

    def encoder_width(self, i: int) -> int:
        """Encoder block `i`'s output channels as diffusers counts them."""
        n, outs = self.num_down_blocks, self.block_out_channels
        return outs[i + 1] if self.is_095 or i + 1 < n else outs[i]

    @cached_property
    def decoder_stages(self) -> dict[str, tuple]:
        """The decoder's per-block lists in the order it runs them: diffusers reverses each whole list and
        indexes it from the front (a list longer than the blocks gives its last entries; the mid block
        takes the first of `layers` and `noise`)."""
        n = len(self.decoder_block_out_channels)
        rev = lambda seq, k: tuple(reversed(tuple(seq)))[:k]  # noqa: E731
        return dict(channels=rev(self.decoder_block_out_channels, n), layers=rev(self.decoder_layers_per_block, n + 1),
                    scaling=rev(self.decoder_spatio_temporal_scaling, n), noise=rev(self.decoder_inject_noise, n + 1),
                    residual=rev(self.upsample_residual, n), factor=rev(self.upsample_factor, n))

    def _downsamplings(self, axis: int) -> int:
        kinds = [self.downsample_kind(i) for i in range(self.num_down_blocks)]
        return sum(STRIDES[k][axis] == 2 for k in kinds if k is not None)

    @cached_property
    def spatial_ratio(self) -> int:
        """Pixels per latent row / column. diffusers derives `patch · 2^Σscaling` unless the config says;
        the 0.9.5 encoder's space-only and time-only stages make that wrong, so count them here."""
        if self.spatial_compression_ratio is not None:
            return self.spatial_compression_ratio
        return self.patch_size * 2 ** self._downsamplings(1)

    @cached_property
    def temporal_ratio(self) -> int:
        if self.temporal_compression_ratio is not None:
            return self.temporal_compression_ratio
        return self.patch_size_t * 2 ** self._downsamplings(0)

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "VAEConfig":
        """From a diffusers `vae/config.json` dict."""
        return cls(**pick_fields(cls, hf))

    @classmethod
    def from_official_config(cls, cfg: Mapping[str, Any]) -> "VAEConfig":
        """From the official `CausalVideoAutoencoder` config (the header config's `vae` table).

        The official encoder/decoder are described by block lists (`blocks`, or `encoder_blocks` /
        `decoder_blocks`); they are translated into diffusers' per-stage lists the way diffusers'
        single-file converter lays the same weights out.
        """
        cfg = dict(cfg.get("vae", cfg))
        if cfg.get("_class_name", "CausalVideoAutoencoder") != "CausalVideoAutoencoder":
            raise LTXConfigError(f"LTX-Video VAE: official class {cfg['_class_name']!r} is not CausalVideoAutoencoder")
        check_known("CausalVideoAutoencoder", cfg, cls.OFFICIAL_KEYS, cls.OFFICIAL_IGNORED)
        for key, want in (("dims", 3), ("norm_layer", "pixel_norm"), ("latent_log_var", "uniform"),
                          ("use_quant_conv", False), ("spatial_padding_mode", "zeros"),
                          ("normalize_latent_channels", False), ("causal_decoder", False)):
            got = cfg.get(key, want)
            if (list(got) if isinstance(got, (list, tuple)) else got) != want:
                raise LTXConfigError(f"LTX-Video VAE: official {key}={got!r} is not supported (only {want!r})")
        encoder = _official_encoder(cfg.get("encoder_blocks", cfg.get("blocks")), cfg.get("encoder_base_channels", 128))
        decoder = _official_decoder(cfg.get("decoder_blocks", cfg.get("blocks")), cfg.get("decoder_base_channels", 128),
                                    bool(cfg.get("timestep_conditioning", False)))
        return cls(in_channels=cfg.get("in_channels", 3), out_channels=cfg.get("out_channels", 3),
                   latent_channels=cfg["latent_channels"], patch_size=cfg.get("patch_size", 1),
                   scaling_factor=float(cfg.get("scaling_factor", 1.0)),
                   timestep_conditioning=bool(cfg.get("timestep_conditioning", False)), **encoder, **decoder)


def _block(entry) -> tuple[str, dict]:
    name, params = entry
    return name, ({"num_layers": params} if isinstance(params, int) else dict(params or {}))


def _official_encoder(blocks, base: int) -> dict:
    """Official encoder blocks -> diffusers down-block lists (stages end at each `res_x` group)."""
    if not blocks:
        raise LTXConfigError("LTX-Video VAE: the official config has no encoder blocks")
    stages: list[dict] = []
    channels = base
    for name, params in map(_block, blocks):
        if name == "res_x":
            stages.append({"layers": params["num_layers"], "in": channels, "down": None})
        elif not stages:
            raise LTXConfigError(f"LTX-Video VAE: encoder block {name!r} before any res_x group")
        elif name == "res_x_y":  # old encoder: the stage's `conv_out` resnet widens the channels
            channels *= params.get("multiplier", 2)
            stages[-1]["widen"] = True
        elif name == "compress_all" and not params.get("multiplier", 1) > 1:
            stages[-1]["down"] = "conv"
        elif name in _DOWNSAMPLE:
            channels *= params.get("multiplier", 2)
            stages[-1]["down"] = _DOWNSAMPLE[name]
        else:
            raise LTXConfigError(f"LTX-Video VAE: official encoder block {name!r} has no diffusers equivalent")
    mid = stages.pop()
    if mid["down"] or mid.get("widen") or not stages:
        raise LTXConfigError("LTX-Video VAE: the official encoder must end with a plain res_x (mid) group")
    new = any(s["down"] not in (None, "conv") for s in stages)
    if new and any(s.get("widen") or s["down"] == "conv" for s in stages):
        raise LTXConfigError("LTX-Video VAE: official encoder mixes res_x_y / compress_all with *_res blocks")
    if new:
        if any(s["down"] is None for s in stages):
            raise LTXConfigError("LTX-Video VAE: a 0.9.5-style encoder stage without downsampling")
        outs = tuple(s["in"] for s in stages) + (mid["in"],)
        return dict(block_out_channels=outs, down_block_types=(ENCODER_095,) * len(stages),
                    layers_per_block=tuple(s["layers"] for s in stages) + (mid["layers"],),
                    spatio_temporal_scaling=(True,) * len(stages),
                    downsample_type=tuple(s["down"] for s in stages))
    outs = tuple(s["in"] for s in stages)
    return dict(block_out_channels=outs, down_block_types=(ENCODER_090,) * len(stages),
                layers_per_block=tuple(s["layers"] for s in stages) + (mid["layers"],),
                spatio_temporal_scaling=tuple(s["down"] == "conv" for s in stages),
                downsample_type=("conv",) * len(stages))


def _official_decoder(blocks, base: int, timestep_conditioning: bool) -> dict:
    """Official decoder blocks (run in reverse) -> diffusers up-block lists (stored in forward order).

    A diffusers up block is [res_x_y (conv_in)] [compress_all (upsampler)] res_x (resnets); the
    first reversed res_x group is the mid block.
    """
    if not blocks:
        raise LTXConfigError("LTX-Video VAE: the official config has no decoder blocks")
    steps = [_block(b) for b in reversed(blocks)]
    channels = base
    for name, params in steps:
        if name == "res_x_y":
            channels *= params.get("multiplier", 2)
        elif name.startswith("compress"):
            channels *= params.get("multiplier", 1)
    if steps[0][0] != "res_x":
        raise LTXConfigError("LTX-Video VAE: the official decoder must start (reversed) with a res_x group")
    mid = steps[0][1]
    groups, pending = [], {}
    for name, params in steps[1:]:
        if name == "res_x":
            groups.append({**pending, "layers": params["num_layers"], "noise": params.get("inject_noise", False)})
            pending = {}
        elif name == "res_x_y" and not pending:
            pending["narrow"] = params.get("multiplier", 2)
        elif name == "compress_all" and "up" not in pending:
            pending["up"] = (params.get("multiplier", 1), params.get("residual", False))
        else:
            raise LTXConfigError(f"LTX-Video VAE: official decoder block {name!r} has no diffusers equivalent here")
    if pending:
        raise LTXConfigError("LTX-Video VAE: the official decoder must end with a res_x group")
    outs, previous = [], channels
    for group in groups:
        factor, _ = group.get("up", (1, False))
        narrow = group.get("narrow", 1)
        if narrow != 1 and (factor != 1 or timestep_conditioning):
            raise LTXConfigError("LTX-Video VAE: a narrowing res_x_y before a channel-reducing or "
                                 "timestep-conditioned upsampler has no diffusers equivalent")
        out = previous // (narrow * factor)
        outs.append(out * factor)
        previous = out
    rev = lambda seq: tuple(reversed(tuple(seq)))  # noqa: E731 - diffusers stores decoder lists in encoder order
    return dict(
        decoder_block_out_channels=rev(outs),
        decoder_layers_per_block=rev([mid["num_layers"]] + [g["layers"] for g in groups]),
        decoder_spatio_temporal_scaling=rev("up" in g for g in groups),
        decoder_inject_noise=rev([mid.get("inject_noise", False)] + [g["noise"] for g in groups]),
        upsample_residual=rev(g.get("up", (1, False))[1] for g in groups),
        upsample_factor=rev(g.get("up", (1, False))[0] for g in groups),
    )


# ---------------------------------------------------------------------------------------------
# Latent upsampler


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpsamplerConfig:
    """Follows diffusers `LTXLatentUpsamplerModel` (0.9.7 / 0.9.8 spatial x2: 128 -> 512 mid channels)."""

    in_channels: int = 128
    mid_channels: int = 512
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False

    # the official `LatentUpsampler` config's keys (all of what its `config()` writes), all read
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "in_channels", "mid_channels", "num_blocks_per_stage", "dims", "spatial_upsample", "temporal_upsample"})

    def __post_init__(self):
        if self.dims not in (2, 3):
            raise LTXConfigError(f"LTX-Video latent upsampler: dims {self.dims} (only 2 or 3)")
        if not (self.spatial_upsample or self.temporal_upsample):
            raise LTXConfigError("LTX-Video latent upsampler: neither spatial nor temporal upsampling")
        if self.dims == 2 and self.temporal_upsample:
            raise LTXConfigError("LTX-Video latent upsampler: temporal upsampling needs dims 3")
        if self.mid_channels % 32:
            raise LTXConfigError(f"LTX-Video latent upsampler: mid_channels {self.mid_channels} is not a multiple "
                                 "of its 32 GroupNorm groups")

    @cached_property
    def factors(self) -> tuple[int, int, int]:
        """(frames, height, width) scale of the output (frames: 2F - 1 when temporal)."""
        return (2 if self.temporal_upsample else 1,) + ((2, 2) if self.spatial_upsample else (1, 1))

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "UpsamplerConfig":
        """From a diffusers `latent_upsampler/config.json` dict."""
        return cls(**pick_fields(cls, hf))

    @classmethod
    def from_official_config(cls, cfg: Mapping[str, Any]) -> "UpsamplerConfig":
        """From the official `LatentUpsampler` header config (its own defaults where an entry is missing)."""
        if cfg.get("_class_name", "LatentUpsampler") != "LatentUpsampler":
            raise LTXConfigError(f"LTX-Video latent upsampler: official class {cfg['_class_name']!r}")
        check_known("LatentUpsampler", cfg, cls.OFFICIAL_KEYS)
        return cls(in_channels=cfg.get("in_channels", 4), mid_channels=cfg.get("mid_channels", 128),
                   num_blocks_per_stage=cfg.get("num_blocks_per_stage", 4), dims=cfg.get("dims", 2),
                   spatial_upsample=cfg.get("spatial_upsample", True),
                   temporal_upsample=cfg.get("temporal_upsample", False))


# ---------------------------------------------------------------------------------------------
# Scheduler


@dataclasses.dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    """How a release spaces its sigmas, from diffusers' `FlowMatchEulerDiscreteScheduler` config or
    the official `RectifiedFlowScheduler` one.

    `sampler`: "uniform" (`linspace(1, 1/n, n)`, diffusers `LTXPipeline`) or "linear_quadratic"
    (the official default from 0.9.5 on and diffusers `LTXConditionPipeline`'s). `dynamic_shift`:
    (base_seq_len, max_seq_len, base_shift, max_shift) of the token-count dependent shift (0.9.0 /
    0.9.1: 1024, 4096, 0.95, 2.05), else None; `shift_terminal` stretches the shifted grid (0.1).
    """

    sampler: str = "uniform"
    shift: float = 1.0
    dynamic_shift: tuple[int, int, float, float] | None = (1024, 4096, 0.95, 2.05)
    shift_terminal: float | None = 0.1
    num_train_timesteps: int = 1000

    # diffusers `FlowMatchEulerDiscreteScheduler`'s arguments, all read by `from_hf_config` (or checked and refused)
    DIFFUSERS_KEYS: ClassVar[frozenset[str]] = frozenset({
        "num_train_timesteps", "shift", "use_dynamic_shifting", "base_shift", "max_shift", "base_image_seq_len",
        "max_image_seq_len", "invert_sigmas", "shift_terminal", "use_karras_sigmas", "use_exponential_sigmas",
        "use_beta_sigmas", "time_shift_type", "stochastic_sampling"})
    # the official `RectifiedFlowScheduler`'s arguments `from_official_config` reads (or checks and refuses)
    OFFICIAL_KEYS: ClassVar[frozenset[str]] = frozenset({
        "num_train_timesteps", "shifting", "target_shift_terminal", "sampler", "shift"})
    OFFICIAL_IGNORED: ClassVar[Mapping[str, str]] = {
        "base_resolution": "read only by the official 'SimpleDiffusion' shifting, which is refused",
    }

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "SchedulerConfig":
        """From a diffusers `scheduler/scheduler_config.json` dict (FlowMatchEulerDiscreteScheduler)."""
        name = hf.get("_class_name", "FlowMatchEulerDiscreteScheduler")
        if name != "FlowMatchEulerDiscreteScheduler":
            raise LTXConfigError(f"LTX-Video scheduler: {name} is not FlowMatchEulerDiscreteScheduler")
        check_known("FlowMatchEulerDiscreteScheduler", hf, cls.DIFFUSERS_KEYS)
        for key in ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                    "stochastic_sampling"):
            if hf.get(key):
                raise LTXConfigError(f"LTX-Video scheduler: {key}=True is not supported")
        if hf.get("time_shift_type", "exponential") != "exponential":
            raise LTXConfigError(f"LTX-Video scheduler: time_shift_type {hf['time_shift_type']!r}")
        dynamic = None
        if hf.get("use_dynamic_shifting", False):
            dynamic = (hf.get("base_image_seq_len", 256), hf.get("max_image_seq_len", 4096),
                       hf.get("base_shift", 0.5), hf.get("max_shift", 1.15))
        return cls(sampler="uniform", shift=float(hf.get("shift", 1.0)), dynamic_shift=dynamic,
                   shift_terminal=hf.get("shift_terminal"), num_train_timesteps=hf.get("num_train_timesteps", 1000))

    @classmethod
    def from_official_config(cls, cfg: Mapping[str, Any]) -> "SchedulerConfig":
        """From the official `RectifiedFlowScheduler` config (the header config's `scheduler` table)."""
        cfg = dict(cfg.get("scheduler", cfg))
        check_known("RectifiedFlowScheduler", cfg, cls.OFFICIAL_KEYS, cls.OFFICIAL_IGNORED)
        sampler = {"Uniform": "uniform", "LinearQuadratic": "linear_quadratic"}.get(cfg.get("sampler", "Uniform"))
        if sampler is None:
            raise LTXConfigError(f"LTX-Video scheduler: official sampler {cfg.get('sampler')!r} is not supported")
        shifting = cfg.get("shifting")
        if shifting not in (None, "SD3"):
            raise LTXConfigError(f"LTX-Video scheduler: official shifting {shifting!r} (only SD3 or none)")
        if cfg.get("shift") is not None:
            raise LTXConfigError("LTX-Video scheduler: the official 'Constant' shift sampler is not supported")
        dynamic = (1024, 4096, 0.95, 2.05) if shifting == "SD3" else None  # ltx_video/schedulers/rf.py get_normal_shift
        return cls(sampler=sampler, shift=1.0, dynamic_shift=dynamic,
                   shift_terminal=cfg.get("target_shift_terminal") if shifting == "SD3" else None,
                   num_train_timesteps=cfg.get("num_train_timesteps", 1000))

    def mu(self, num_tokens: int) -> float | None:
        """The dynamic shift for a latent of `num_tokens` tokens (F' x H' x W'), None when static."""
        if self.dynamic_shift is None:
            return None
        base_len, max_len, base_shift, max_shift = self.dynamic_shift
        slope = (max_shift - base_shift) / (max_len - base_len)
        return num_tokens * slope + (base_shift - slope * base_len)

