"""What the accelerator benchmark measures: model shapes, resolutions, FLOPs from shapes, chip peaks.

Two profiles share every line of the code path: `real` (Wan2.1-14B and HunyuanVideo-1.5 layer
shapes at 480p/720p, the figures) and `toy` (the same architectures a few channels wide, so the
CPU test runs the whole benchmark in seconds). Configs are diffusers constructor kwargs: the
diffusers side builds its model from them and the vidax side reads them with `from_hf_config`.

FLOPs are counted from the shapes: a matmul is 2*m*n*k, attention 4*B*H*Sq*Skv*D (QK^T and PV);
norms, RoPE, activations and modulation are left out (memory-bound, a few % of the time, 0 FLOPs
in the MFU convention).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.accelerator import families

# Dense bf16 peak TFLOP/s by `device_kind` substring (first match wins; vendor datasheets, no sparsity).
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("H800", 989.0),
    ("H20", 148.0),
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("B100", 1750.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("RTX 4090", 165.0),
    ("MI300X", 1307.0),
    ("MI325X", 1307.0),
    ("TPU v6", 918.0),  # Trillium (v6e, "TPU v6 lite")
    ("TPU v5p", 459.0),
    ("TPU v5 lite", 197.0),  # v5e
    ("TPU v5e", 197.0),
    ("TPU v5", 459.0),
    ("TPU v4", 275.0),
    ("TPU7x", 2307.0),
)


def peak_tflops(device_kind: str, override: float | None = None) -> float | None:
    """The chip's dense bf16 peak, `override` when given; None for an unknown chip (or a CPU)."""
    if override:
        return float(override)
    for name, tflops in PEAK_BF16_TFLOPS:
        if name.lower() in device_kind.lower():
            return tflops
    return None


# ---------------------------------------------------------------------------------------------
# Models

WAN14B = dict(  # Wan-AI/Wan2.1-T2V-14B-Diffusers transformer/config.json
    patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=16, out_channels=16,
    text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024,
)
WAN13B = dict(  # Wan-AI/Wan2.1-T2V-1.3B-Diffusers transformer/config.json
    WAN14B, num_attention_heads=12, ffn_dim=8960, num_layers=30,
)
HV15 = dict(  # HunyuanVideo-1.5 480p/720p transformer (diffusers defaults: 54 dual blocks, 2048 wide)
    in_channels=65, out_channels=32, num_attention_heads=16, attention_head_dim=128, num_layers=54,
    num_refiner_layers=2, mlp_ratio=4.0, patch_size=1, patch_size_t=1, text_embed_dim=3584,
    text_embed_2_dim=1472, image_embed_dim=1152, rope_axes_dim=(16, 56, 56), use_meanflow=False,
)
# The tiny shapes of zoo/wan/tiny.py and tests/hunyuan_video15 (same architectures, a few channels).
WAN_TOY = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
    text_dim=32, freq_dim=32, ffn_dim=64, num_layers=4, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
    eps=1e-6, rope_max_seq_len=1024,
)
HV15_TOY = dict(
    in_channels=5, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=4,
    num_refiner_layers=1, text_embed_dim=24, text_embed_2_dim=20, image_embed_dim=12, rope_axes_dim=(4, 6, 6),
    use_meanflow=False,
)
WAN_VAE = dict(base_dim=96, z_dim=16, dim_mult=(1, 2, 4, 4), num_res_blocks=2, attn_scales=(),
               temperal_downsample=(False, True, True))  # Wan2.1 VAE (diffusers defaults)
WAN_VAE_TOY = dict(base_dim=8, z_dim=16, dim_mult=(1, 2, 4, 4), num_res_blocks=1, attn_scales=(),
                   temperal_downsample=(False, True, True))
HV15_VAE: dict[str, Any] = dict()  # diffusers AutoencoderKLHunyuanVideo15 defaults (32 latent channels, 16x)
HV15_VAE_TOY = dict(block_out_channels=(8, 16, 16, 16, 16), latent_channels=4, layers_per_block=1,
                    tile_sample_min_size=64)  # one tile at the toy size: each tile shape compiles every stage

# Text lengths the pipelines feed: Wan's UMT5 padded to 512; HunyuanVideo-1.5's joint text is
# SigLIP (729, zeros and masked for text-to-video) + ByT5 (256, a short glyph prompt valid) +
# Qwen2.5-VL (1000 after the template crop, a typical prompt valid).
WAN_TEXT = 512
HV_TEXT = dict(mllm=1000, mllm_valid=120, byt5=256, byt5_valid=16, image=729)
HV_TEXT_TOY = dict(mllm=8, mllm_valid=5, byt5=4, byt5_valid=2, image=3)


@dataclasses.dataclass(frozen=True)
class DitCase:
    """One DiT measurement: `run_depth` blocks at real width, scaled to the model's `depth`."""

    key: str  # "wan-480p"
    family: str  # a family folder ("wan", "hunyuan_video15") or a registered model name
    label: str
    config: dict  # diffusers kwargs (num_layers = the real depth)
    frames: int
    height: int
    width: int
    run_depth: int
    batch: int = 2  # the CFG pair, as a guided sampling step runs it
    text: Any = None  # text sizes, as the family's row reads them (Wan: tokens; HunyuanVideo-1.5: HV_TEXT-like)
    weights_dtype: str | None = None  # "fp8" / "int8": block kernels 8-bit on the device (--weights-dtype)

    @property
    def row(self) -> families.FamilyRow:
        return families.row(self.family)

    @property
    def depth(self) -> int:
        return int(self.config["num_layers"])

    @property
    def latent_shape(self) -> tuple[int, int, int, int, int]:
        """`[B, C, F', H', W']` the DiT takes (4x temporal, the family VAE's spatial factor)."""
        spatial = self.row.vae_spatial
        f = (self.frames - 1) // 4 + 1
        return (self.batch, self.config["in_channels"], f, self.height // spatial, self.width // spatial)

    @property
    def tokens(self) -> int:
        """Video tokens after patchify."""
        _, _, f, h, w = self.latent_shape
        pt, ph, pw = self.row.patch(self.config)
        return (f // pt) * (h // ph) * (w // pw)

    @property
    def text_tokens(self) -> int:
        """Tokens beside the video: Wan's cross-attention context, HunyuanVideo's joint text."""
        return self.row.text_tokens(self)

    @property
    def attention_tokens(self) -> int:
        """The self-attention's sequence: the video, and the text where it joins."""
        return self.tokens + (self.text_tokens if self.row.joint_text else 0)

    @property
    def heads(self) -> int:
        return self.config["num_attention_heads"]

    @property
    def head_dim(self) -> int:
        return self.config["attention_head_dim"]


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    key: str
    label: str
    batch: int
    tokens: int
    heads: int
    head_dim: int
    valid: int | None = None  # keys valid (a prefix); None = all


@dataclasses.dataclass(frozen=True)
class VaeCase:
    key: str
    family: str  # a family folder or a registered model name
    label: str
    config: dict
    latent_frames: int
    height: int
    width: int

    @property
    def row(self) -> families.FamilyRow:
        return families.row(self.family)

    @property
    def latent_shape(self) -> tuple[int, int, int, int, int]:
        key, default = self.row.vae_channels
        spatial = self.row.vae_spatial
        return (1, self.config.get(key, default), self.latent_frames, self.height // spatial, self.width // spatial)

    @property
    def frames(self) -> int:
        return 4 * (self.latent_frames - 1) + 1


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    dits: tuple[DitCase, ...]
    attention: tuple[AttentionCase, ...]
    blockwise_max_tokens: int  # the XLA fallback (blockwise) only up to this sequence length
    offload: str  # key of the DiT case whose blocks are streamed
    offload_depth: int
    offload_chunks: tuple[int, ...]
    vaes: tuple[VaeCase, ...]
    matmul: int  # size of the calibration matmul
    repeats: int = 3
    cold_process_compile: bool = True  # also compile once in a fresh process with the cache off


def _dit(key, family, config, frames, height, width, run_depth, text):
    label = families.row(family).label if config in (WAN14B, HV15) else f"toy {key.split('-')[0]}"
    label = "Wan2.1-1.3B" if config is WAN13B else label
    return DitCase(key, family, f"{label} {height}x{width} {frames}f", config, frames, height, width, run_depth,
                   text=text)


def _eight_bit(case: DitCase, choice: str) -> DitCase:
    """The same DiT with its block kernels 8-bit (`--weights-dtype choice`); the diffusers side has none."""
    return dataclasses.replace(case, key=f"{case.key}-{choice}", label=f"{case.label} {choice} weights",
                               weights_dtype=choice)


WEIGHTS_DTYPES = ("fp8", "int8")  # the 8-bit entries, of the first (Wan) case


def _vae(key, family, config, latent_frames, height, width):
    label = families.row(family).vae_label if config in (WAN_VAE, HV15_VAE) else f"toy {key.split('-')[0]} VAE"
    return VaeCase(key, family, f"{label} {height}x{width}", config, latent_frames, height, width)


def _attention_of(case: DitCase) -> AttentionCase:
    """The case's self-attention (a joint text joins it: video + text, the text's valid prefix)."""
    if not case.row.joint_text:
        return AttentionCase(case.key, f"{case.label} self-attn", case.batch, case.tokens, case.heads, case.head_dim)
    masks = [t.fill for t in case.row.inputs if t.fill.startswith("valid:")]
    valid = case.tokens + sum(families.valid_length(case, fill) for fill in masks)
    return AttentionCase(case.key, f"{case.label} joint attn", case.batch, case.attention_tokens,
                         case.heads, case.head_dim, valid)


def _real() -> Profile:
    dits = (
        _dit("wan-480p", "wan", WAN14B, 81, 480, 832, 8, WAN_TEXT),  # 21x30x52 = 32760 tokens
        _dit("hv15-480p", "hunyuan_video15", HV15, 121, 480, 848, 4, HV_TEXT),  # 31x30x53 = 49290 tokens
        _dit("wan13-480p", "wan", WAN13B, 81, 480, 832, 30, WAN_TEXT),  # the whole 1.3B step (30 blocks)
        # HunyuanVideo-1.5 first: diffusers' [B, 1, S, S] mask needs ~100 GB at 720p, and JAX's pool
        # keeps the largest size it has grown to (the Wan 720p program's) until the process ends
        _dit("hv15-720p", "hunyuan_video15", HV15, 121, 720, 1280, 2, HV_TEXT),  # 31x45x80 = 111600 tokens
        _dit("wan-720p", "wan", WAN14B, 81, 720, 1280, 2, WAN_TEXT),  # 21x45x80 = 75600 tokens
    )
    dits += tuple(_eight_bit(dits[0], choice) for choice in WEIGHTS_DTYPES)  # Wan 480p with fp8 / int8 weights
    vaes = (
        _vae("wan-vae-480p", "wan", WAN_VAE, 5, 480, 832),
        _vae("hv15-vae-480p", "hunyuan_video15", HV15_VAE, 5, 480, 848),
    )
    return Profile("real", dits, tuple(_attention_of(d) for d in dits), 40_000, "wan-480p", 8, (1, 4), vaes, 8192)


def _toy() -> Profile:
    dits = (
        _dit("wan-480p", "wan", WAN_TOY, 5, 32, 48, 4, 8),
        _dit("hv15-480p", "hunyuan_video15", HV15_TOY, 5, 32, 48, 2, HV_TEXT_TOY),
    )  # one resolution each: the 720p cases run the same code
    # attention long enough to leave the plain kernel (Sq*Skv > 2^20) for the backend's long-sequence one
    attention = (AttentionCase("long", "toy self-attn", 1, 1536, 2, 16),
                 AttentionCase("long-masked", "toy joint attn", 1, 1600, 2, 16, valid=1550))
    vaes = (
        _vae("wan-vae-480p", "wan", WAN_VAE_TOY, 2, 32, 48),
        _vae("hv15-vae-480p", "hunyuan_video15", HV15_VAE_TOY, 2, 48, 64),
    )
    return Profile("toy", dits, attention, 4096, "wan-480p", 4, (1, 2), vaes, 256, repeats=2,
                   cold_process_compile=False)


PROFILES = {"real": _real, "toy": _toy}


def profile(name: str) -> Profile:
    return PROFILES[name]()


# ---------------------------------------------------------------------------------------------
# FLOPs from shapes


matmul = families.matmul
attention_flops = families.attention_flops


def dit_flops(case: DitCase) -> dict[str, float]:
    """`{"block": one block, "outside": embed + head, "step": outside + depth * block}` of a forward."""
    block, outside = case.row.flops(case)
    return {"block": block, "outside": outside, "step": outside + case.depth * block}
