"""Every per-family fact the accelerator benchmark needs, as data in one table (no `if family ==`).

A case names a family folder of `zoo/` ("wan", "hunyuan_video15") or a registered model (whose
registry entry names its family); `row(name)` gives that family's `FamilyRow`. Both sides read
only the row: the vidax side builds the family's own DiT and VAE classes from the case's diffusers
kwargs (`Config.from_hf_config`, as the family reads a checkpoint's config.json) and checks the
inputs against the DiT's `dummy_inputs()`; the diffusers side builds the named diffusers classes
from the same kwargs and feeds the same tensors under their keyword names.

Adding a family to the benchmark is one row here and its cases in `cases.py`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One DiT forward input, in the vidax `embed` order.

    Args:
      name: the diffusers forward keyword.
      shape: `(case) -> shape` from the case's sizes.
      dtype: the dtype both sides feed ("bfloat16", "float32", "bool").
      fill: "normal" (random), "zeros", "timestep" (700.0), or "valid:<text key>" (a mask whose first
        `case.text["<text key>_valid"]` entries are on).
      torch_dtype: the diffusers side's dtype where its pipeline feeds another ("long" masks, bf16 time).
    """

    name: str
    shape: Callable[[Any], tuple[int, ...]]
    dtype: str
    fill: str = "normal"
    torch_dtype: str | None = None


@dataclasses.dataclass(frozen=True)
class FamilyRow:
    """One family's facts: its zoo classes, its diffusers classes, its geometry, inputs and FLOPs.

    Class names are `"family:piece"` (vidax: `bench.families`), `"module:attribute"` (a shared vidax
    module) or attributes of `diffusers` (the reference).
    """

    zoo: str  # the family folder under zoo/
    label: str  # the real model's name in the table
    vae_label: str
    dit: str  # vidax DiT class
    dit_config: str  # its config class (`from_hf_config(diffusers kwargs)`)
    dit_kwargs: Mapping[str, Any]  # constructor keywords beyond the config (the compute dtype)
    spec: str  # the conversion spec whose dtype policy the weights follow
    vae: str
    vae_config: str
    decode_kwargs: Mapping[str, Any]  # vidax `decode` keywords (tiling as the pipeline decodes)
    diffusers_dit: str
    diffusers_blocks: str  # the diffusers model's block list attribute
    diffusers_vae: str
    vae_tiling: bool  # the reference pipeline decodes with tiling on
    vae_spatial: int  # pixels per latent pixel
    vae_channels: tuple[str, int]  # (VAE config key, its default) of the latent channels
    patch: Callable[[Mapping], tuple[int, int, int]]  # (pt, ph, pw) of the DiT config
    text_tokens: Callable[[Any], int]  # tokens beside the video
    joint_text: bool  # the text joins the video in self-attention (with a valid-prefix mask)
    inputs: tuple[Tensor, ...]
    flops: Callable[[Any], tuple[float, float]]  # (block, outside) FLOPs of the case's forward


def resolve(path: str):
    """`"family:piece"` -> that piece of the family (`bench.families`, through the registry), or
    `"module:attribute"` of a shared module (the Wan VAE) -> the attribute."""
    from bench.families import PIECES, piece

    module, _, name = path.partition(":")
    return piece(module, name) if module in PIECES else getattr(importlib.import_module(module), name)


# --- FLOPs from shapes (a matmul is 2*m*n*k, attention 4*B*H*Sq*Skv*D) -----------------------


def matmul(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def attention_flops(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int) -> float:
    """QK^T and PV: 4*B*H*Sq*Skv*D."""
    return 4.0 * batch * heads * q_len * kv_len * head_dim


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _wan_flops(case) -> tuple[float, float]:
    """Self-attention over the video, cross-attention to the text, a feed-forward."""
    c, b, s, t = case.config, case.batch, case.tokens, case.text
    d, h, hd, ffn = c["num_attention_heads"] * c["attention_head_dim"], c["num_attention_heads"], \
        c["attention_head_dim"], c["ffn_dim"]
    block = (
        4 * matmul(b * s, d, d)  # self-attn q, k, v, out
        + attention_flops(b, h, s, s, hd)
        + 2 * matmul(b * s, d, d) + 2 * matmul(b * t, d, d)  # cross-attn q, out / k, v (text)
        + attention_flops(b, h, s, t, hd)
        + 2 * matmul(b * s, ffn, d)  # feed-forward up, down
    )
    patch = c["in_channels"] * _prod(c["patch_size"])
    outside = (matmul(b * s, d, patch) + matmul(b * t, d, c["text_dim"]) + matmul(b * t, d, d)
               + matmul(b * s, c["out_channels"] * _prod(c["patch_size"]), d))
    return block, outside


def _hv15_flops(case) -> tuple[float, float]:
    """Dual-stream blocks over video + joint text; the text refiner, ByT5 and SigLIP projections outside."""
    c, b, s, txt = case.config, case.batch, case.tokens, case.text
    d, h, hd = c["num_attention_heads"] * c["attention_head_dim"], c["num_attention_heads"], c["attention_head_dim"]
    t = txt["mllm"] + txt["byt5"] + txt["image"]
    kv = s + txt["mllm_valid"] + txt["byt5_valid"]  # keys: the video and the valid text (text-to-video)
    mlp = int(d * c.get("mlp_ratio", 4.0))
    block = (
        4 * matmul(b * (s + t), d, d)  # q, k, v, out of both streams
        + attention_flops(b, h, s + t, kv, hd)
        + 2 * matmul(b * (s + t), mlp, d)  # both streams' feed-forward
        + 2 * matmul(b, 6 * d, d)  # AdaLN modulation of both streams
    )
    mllm = txt["mllm"]
    refiner = c.get("num_refiner_layers", 2) * (
        4 * matmul(b * mllm, d, d) + attention_flops(b, h, mllm, mllm, hd) + 2 * matmul(b * mllm, mlp, d))
    outside = (
        matmul(b * s, d, c["in_channels"]) + matmul(b * mllm, d, c["text_embed_dim"]) + refiner
        + matmul(b * txt["byt5"], 2048, c["text_embed_2_dim"]) + matmul(b * txt["byt5"], 2048, 2048)
        + matmul(b * txt["byt5"], d, 2048)
        + matmul(b * txt["image"], c["image_embed_dim"], c["image_embed_dim"])
        + matmul(b * txt["image"], d, c["image_embed_dim"])
        + matmul(b * s, c["out_channels"], d)
    )
    return block, outside


# --- the table ------------------------------------------------------------------------------

def _features(text: str, width: str) -> Callable[[Any], tuple[int, ...]]:
    """`[B, case.text[text], config[width]]`: one text encoder's features."""
    return lambda case: (case.batch, case.text[text], case.config[width])


def _mask(text: str) -> Callable[[Any], tuple[int, ...]]:
    """`[B, case.text[text]]`: that text's valid-token mask."""
    return lambda case: (case.batch, case.text[text])


_LATENTS = Tensor("hidden_states", lambda case: case.latent_shape, "bfloat16")

FAMILIES: dict[str, FamilyRow] = {
    "wan": FamilyRow(
        zoo="wan", label="Wan2.1-14B", vae_label="Wan2.1 VAE",
        dit="wan:WanTransformer", dit_config="wan:WanTransformerConfig",
        dit_kwargs={"dtype": "bfloat16"}, spec="wan/transformer",
        vae="vidax.zoo.parts.wan_vae:WanVAE", vae_config="vidax.zoo.parts.wan_vae:WanVAEConfig", decode_kwargs={},
        diffusers_dit="WanTransformer3DModel", diffusers_blocks="blocks", diffusers_vae="AutoencoderKLWan",
        vae_tiling=False, vae_spatial=8, vae_channels=("z_dim", 16),
        patch=lambda c: tuple(c["patch_size"]),
        text_tokens=lambda case: case.text, joint_text=False,
        inputs=(
            _LATENTS,
            Tensor("timestep", lambda case: (case.batch,), "float32", "timestep"),  # Wan keeps its time embedder fp32
            Tensor("encoder_hidden_states", lambda case: (case.batch, case.text, case.config["text_dim"]), "bfloat16"),
        ),
        flops=_wan_flops,
    ),
    "hunyuan_video15": FamilyRow(
        zoo="hunyuan_video15", label="HunyuanVideo-1.5", vae_label="HunyuanVideo-1.5 VAE (tiling on)",
        dit="hunyuan_video15:HunyuanVideo15Transformer",
        dit_config="hunyuan_video15:TransformerConfig", dit_kwargs={}, spec="hunyuan_video15/transformer",
        vae="hunyuan_video15:HunyuanVideo15VAE", vae_config="hunyuan_video15:VAEConfig",
        decode_kwargs={"tiling": True},
        diffusers_dit="HunyuanVideo15Transformer3DModel", diffusers_blocks="transformer_blocks",
        diffusers_vae="AutoencoderKLHunyuanVideo15", vae_tiling=True, vae_spatial=16,
        vae_channels=("latent_channels", 32),
        patch=lambda c: (c.get("patch_size_t", 1), c.get("patch_size", 1), c.get("patch_size", 1)),
        text_tokens=lambda case: case.text["mllm"] + case.text["byt5"] + case.text["image"], joint_text=True,
        inputs=(
            _LATENTS,
            # the time in bf16 on the diffusers side, as its pipeline feeds it
            Tensor("timestep", lambda case: (case.batch,), "float32", "timestep", torch_dtype="bfloat16"),
            Tensor("encoder_hidden_states", _features("mllm", "text_embed_dim"), "bfloat16"),
            Tensor("encoder_attention_mask", _mask("mllm"), "bool", "valid:mllm", "long"),
            Tensor("encoder_hidden_states_2", _features("byt5", "text_embed_2_dim"), "bfloat16"),
            Tensor("encoder_attention_mask_2", _mask("byt5"), "bool", "valid:byt5", "long"),
            # SigLIP tokens all zeros: text-to-video
            Tensor("image_embeds", _features("image", "image_embed_dim"), "bfloat16", "zeros"),
        ),
        flops=_hv15_flops,
    ),
}


def row(name: str) -> FamilyRow:
    """The row of a family folder name, or of a registered model's family (`wan2.1-t2v-14b` -> wan)."""
    if name in FAMILIES:
        return FAMILIES[name]
    from vidax.zoo.registry import lookup  # the translator's registry: no jax, no torch

    family = lookup(name).family
    if family not in FAMILIES:
        raise KeyError(f"{name}: family {family!r} has no row in bench/accelerator/families.py "
                       f"(have: {', '.join(FAMILIES)})")
    return FAMILIES[family]


def valid_length(case, fill: str) -> int:
    """The on-prefix of a `valid:<key>` mask."""
    return case.text[f"{fill.split(':', 1)[1]}_valid"]
