"""Test checkpoints of the LTX-Video specs, for the translator's mutation test and this family's tests.

For each spec: a tiny perturbed diffusers reference saved in the diffusers layout and as the official
single file (official key names, `model.diffusion_model.` / `vae.` prefixes, the config as JSON in the
safetensors header), and the tree it must convert to, computed from the diffusers state dict alone
(renames, transposes, stacking), not from the spec. The official names are the inverse of diffusers'
`loaders/single_file_utils.py` converters; `official_*_state` is checked against those converters in
test_official_layout.py.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from vidax.translator.testing import SpecCase, register_spec_fixture

# inner 32 (not a multiple of 6: two unrotated RoPE channels, as 2048 and 4096 have), 2 layers
TINY_DIT = dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=16, cross_attention_dim=32,
                num_layers=2, caption_channels=24)

# The three VAE generations at toy widths (diffusers configs shaped like the released ones).
TINY_VAES = {
    "0.9.0": dict(block_out_channels=(8, 16, 32, 32), decoder_block_out_channels=(8, 16, 32, 32),
                  layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1, 1), latent_channels=8),
    "0.9.1": dict(block_out_channels=(8, 16, 32, 32), decoder_block_out_channels=(16, 32, 64),
                  layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 2, 1, 2),
                  decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(True, True, True, False),
                  upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True,
                  latent_channels=8),
    "0.9.5": dict(block_out_channels=(8, 16, 32, 64, 128), decoder_block_out_channels=(16, 32, 64),
                  down_block_types=("LTXVideo095DownBlock3D",) * 4, layers_per_block=(1, 1, 2, 1, 1),
                  decoder_layers_per_block=(1, 2, 1, 1), spatio_temporal_scaling=(True, True, True, True),
                  decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(False, False, False, False),
                  downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
                  upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True,
                  spatial_compression_ratio=32, temporal_compression_ratio=8, latent_channels=8),
}
# Per-block settings as diffusers reads them, beyond the releases' shapes (each builds and runs in diffusers):
# the decoder reverses every whole per-block list and indexes it from the front, so lists longer than the
# blocks (the constructor's defaults are) give their last entries; the encoder picks each block's class by
# `down_block_types[i]` (its width bookkeeping by the last one), a 0.9.0 block ignores `downsample_type`, a
# 0.9.5 block may downsample by a stride-2 conv.
VAE_BLOCK_CONFIGS = {
    "long-lists": dict(TINY_VAES["0.9.5"], decoder_block_out_channels=(32, 32, 64),
                       decoder_layers_per_block=(1, 2, 1, 1, 3), decoder_spatio_temporal_scaling=(False, True, True, True),
                       decoder_inject_noise=(True, False, False, False, False),
                       upsample_residual=(False, True, False, True), upsample_factor=(1, 2, 1, 2)),
    "mixed-encoder": dict(TINY_VAES["0.9.5"], block_out_channels=(8, 16, 16, 32, 64),
                          down_block_types=("LTXVideoDownBlock3D",) + ("LTXVideo095DownBlock3D",) * 3,
                          downsample_type=("spatial", "conv", "temporal", "spatial")),
}
TINY_UPSAMPLER = dict(in_channels=8, mid_channels=32, num_blocks_per_stage=1, dims=3)

# --- official names (inverse of diffusers' single-file converters) ------------------------------------

DIT_TO_OFFICIAL = [("proj_in", "patchify_proj"), ("time_embed", "adaln_single"), ("norm_q", "q_norm"),
                   ("norm_k", "k_norm")]

# diffusers VAE module -> official module index per generation (official encoder/decoder block lists)
_ENCODER_090 = {"down_blocks.0": "down_blocks.0", "down_blocks.0.downsamplers.0": "down_blocks.1",
                "down_blocks.0.conv_out": "down_blocks.2", "down_blocks.1": "down_blocks.3",
                "down_blocks.1.downsamplers.0": "down_blocks.4", "down_blocks.1.conv_out": "down_blocks.5",
                "down_blocks.2": "down_blocks.6", "down_blocks.2.downsamplers.0": "down_blocks.7",
                "down_blocks.3": "down_blocks.8", "mid_block": "down_blocks.9"}
_ENCODER_095 = {"down_blocks.0": "down_blocks.0", "down_blocks.0.downsamplers.0": "down_blocks.1",
                "down_blocks.1": "down_blocks.2", "down_blocks.1.downsamplers.0": "down_blocks.3",
                "down_blocks.2": "down_blocks.4", "down_blocks.2.downsamplers.0": "down_blocks.5",
                "down_blocks.3": "down_blocks.6", "down_blocks.3.downsamplers.0": "down_blocks.7",
                "mid_block": "down_blocks.8"}
_DECODER_090 = {"mid_block": "up_blocks.0", "up_blocks.0": "up_blocks.1", "up_blocks.1.upsamplers.0": "up_blocks.2",
                "up_blocks.1": "up_blocks.3", "up_blocks.2.conv_in": "up_blocks.4",
                "up_blocks.2.upsamplers.0": "up_blocks.5", "up_blocks.2": "up_blocks.6",
                "up_blocks.3.conv_in": "up_blocks.7", "up_blocks.3.upsamplers.0": "up_blocks.8",
                "up_blocks.3": "up_blocks.9"}
_DECODER_091 = {"mid_block": "up_blocks.0", "up_blocks.0.upsamplers.0": "up_blocks.1", "up_blocks.0": "up_blocks.2",
                "up_blocks.1.upsamplers.0": "up_blocks.3", "up_blocks.1": "up_blocks.4",
                "up_blocks.2.upsamplers.0": "up_blocks.5", "up_blocks.2": "up_blocks.6"}
VAE_MODULES = {"0.9.0": (_ENCODER_090, _DECODER_090), "0.9.1": (_ENCODER_090, _DECODER_091),
               "0.9.5": (_ENCODER_095, _DECODER_091)}

# The official header configs of the tiny VAEs (`CausalVideoAutoencoder` block lists), as the real files
# write them: 0.9.0 one shared `blocks` list; 0.9.1+ separate encoder/decoder lists.
OFFICIAL_VAE_CONFIGS = {
    "0.9.0": {"_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
              "latent_channels": 8, "encoder_base_channels": 8, "decoder_base_channels": 8,
              "blocks": [["res_x", 1], ["compress_all", 1], ["res_x_y", 1], ["res_x", 1], ["compress_all", 1],
                         ["res_x_y", 1], ["res_x", 1], ["compress_all", 1], ["res_x", 1], ["res_x", 1]],
              "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
              "use_quant_conv": False, "causal_decoder": False},
    "0.9.1": {"_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
              "latent_channels": 8, "encoder_base_channels": 8, "decoder_base_channels": 8,
              "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_all", {}], ["res_x_y", 1],
                                 ["res_x", {"num_layers": 1}], ["compress_all", {}], ["res_x_y", 1],
                                 ["res_x", {"num_layers": 1}], ["compress_all", {}], ["res_x", {"num_layers": 1}],
                                 ["res_x", {"num_layers": 1}]],
              "decoder_blocks": [["res_x", {"num_layers": 1, "inject_noise": True}],
                                 ["compress_all", {"residual": True, "multiplier": 2}],
                                 ["res_x", {"num_layers": 2, "inject_noise": True}],
                                 ["compress_all", {"residual": True, "multiplier": 2}],
                                 ["res_x", {"num_layers": 1, "inject_noise": True}],
                                 ["compress_all", {"residual": True, "multiplier": 2}],
                                 ["res_x", {"num_layers": 2, "inject_noise": False}]],
              "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
              "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": True},
    "0.9.5": {"_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
              "latent_channels": 8, "encoder_base_channels": 8, "decoder_base_channels": 8,
              "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 2}],
                                 ["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 2}],
                                 ["res_x", {"num_layers": 2}], ["compress_all_res", {"multiplier": 2}],
                                 ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 2}],
                                 ["res_x", {"num_layers": 1}]],
              "decoder_blocks": [["res_x", {"num_layers": 1, "inject_noise": False}],
                                 ["compress_all", {"residual": True, "multiplier": 2}],
                                 ["res_x", {"num_layers": 2, "inject_noise": False}],
                                 ["compress_all", {"residual": True, "multiplier": 2}],
                                 ["res_x", {"num_layers": 1, "inject_noise": False}],
                                 ["compress_all", {"residual": True, "multiplier": 2}],
                                 ["res_x", {"num_layers": 1, "inject_noise": False}]],
              "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
              "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": True},
}


def official_dit_state(state: dict) -> dict:
    """diffusers DiT keys -> the official single file's (`model.diffusion_model.` prefix)."""
    out = {}
    for key, value in state.items():
        for new, old in DIT_TO_OFFICIAL:
            key = key.replace(new, old)
        out["model.diffusion_model." + key] = value
    return out


def _official_vae_key(key: str, version: str) -> str | None:
    """One diffusers VAE key -> the official one (None: a key the official file does not carry)."""
    if key == "latents_mean":
        return "vae.per_channel_statistics.mean-of-means"
    if key == "latents_std":
        return "vae.per_channel_statistics.std-of-means"
    encoder, decoder = VAE_MODULES[version]
    side, _, rest = key.partition(".")
    table = encoder if side == "encoder" else decoder
    for module in sorted(table, key=len, reverse=True):  # longest diffusers module first
        if rest.startswith(module + "."):
            rest = table[module] + rest[len(module):]
            break
    rest = rest.replace(".resnets.", ".res_blocks.").replace("conv_shortcut.conv.", "conv_shortcut.")
    rest = rest.replace(".norm3.", ".norm3.norm.")
    if side == "decoder" and version != "0.9.0":
        rest = re.sub(r"^time_embedder\.", "last_time_embedder.", rest)
        rest = re.sub(r"^scale_shift_table$", "last_scale_shift_table", rest)
    return f"vae.{side}.{rest}"


def official_vae_state(state: dict, version: str) -> dict:
    """diffusers VAE keys -> the official single file's, plus the statistics the official file also keeps."""
    import torch

    out = {_official_vae_key(k, version): v for k, v in state.items()}
    channels = state["latents_mean"].shape[0]
    out["vae.per_channel_statistics.channel"] = torch.arange(channels, dtype=torch.float32)
    out["vae.per_channel_statistics.mean-of-stds"] = torch.ones(channels)
    return out


# --- references ---------------------------------------------------------------------------------------


def perturbed(module, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.02)  # zero-initialised biases/tables must matter
    return module.eval()


def dit_reference(seed: int = 0, **overrides):
    import torch
    from diffusers import LTXVideoTransformer3DModel

    torch.manual_seed(seed)
    return perturbed(LTXVideoTransformer3DModel(**{**TINY_DIT, **overrides}), seed)


def vae_reference(version: str = "0.9.5", seed: int = 3):
    """A tiny AutoencoderKLLTXVideo of one generation (or `VAE_BLOCK_CONFIGS` entry); statistics buffers set
    to non-trivial values."""
    import torch
    from diffusers import AutoencoderKLLTXVideo

    torch.manual_seed(seed)
    vae = perturbed(AutoencoderKLLTXVideo(**{**TINY_VAES, **VAE_BLOCK_CONFIGS}[version]), seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=gen) * 0.1)
        vae.latents_std.copy_(1 + torch.rand(vae.latents_std.shape, generator=gen))
    return vae


def upsampler_reference(seed: int = 5, **overrides):
    import torch
    from diffusers.pipelines.ltx.modeling_latent_upsampler import LTXLatentUpsamplerModel

    torch.manual_seed(seed)
    return perturbed(LTXLatentUpsamplerModel(**{**TINY_UPSAMPLER, **overrides}), seed)


def diffusers_config(module, class_name: str) -> dict:
    config = {k: v for k, v in dict(module.config).items() if not k.startswith("_")}
    return {"_class_name": class_name, **{k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}}


def save(state: dict, path: Path, config: dict | None = None, metadata: dict | None = None) -> Path:
    """A safetensors file (`path`) or a diffusers folder (`path` a folder: weights + config.json)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous() for k, v in state.items()}
    if path.suffix == ".safetensors":
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, path, metadata=metadata)
        return path
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, path / "diffusion_pytorch_model.safetensors", metadata=metadata)
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    return path


def official_dit_config(model) -> dict:
    """The official `Transformer3DModel` config the single file's header carries, for `model`'s sizes."""
    c = model.config
    return {"_class_name": "Transformer3DModel", "activation_fn": "gelu-approximate", "attention_bias": True,
            "attention_head_dim": c.attention_head_dim, "attention_type": "default",
            "caption_channels": c.caption_channels, "cross_attention_dim": c.cross_attention_dim,
            "double_self_attention": False, "dropout": 0.0, "in_channels": c.in_channels,
            "norm_elementwise_affine": False, "norm_eps": 1e-06, "norm_num_groups": 32,
            "num_attention_heads": c.num_attention_heads, "num_embeds_ada_norm": 1000, "num_layers": c.num_layers,
            "num_vector_embeds": None, "only_cross_attention": False, "out_channels": c.out_channels,
            "project_to_2d_pos": True, "upcast_attention": False, "use_linear_projection": False,
            "qk_norm": "rms_norm", "standardization_norm": "rms_norm", "positional_embedding_type": "rope",
            "positional_embedding_theta": 10000.0, "positional_embedding_max_pos": [20, 2048, 2048],
            "timestep_scale_multiplier": 1000, "causal_temporal_positioning": True}


OFFICIAL_SCHEDULER = {"_class_name": "RectifiedFlowScheduler", "num_train_timesteps": 1000, "shifting": None,
                      "base_resolution": None, "target_shift_terminal": None, "sampler": "LinearQuadratic"}


def save_official_file(path: Path, dit=None, vae=None, version: str = "0.9.5") -> Path:
    """One official single file: the DiT and/or the VAE under their prefixes, the config in the header."""
    state, config = {}, {}
    if dit is not None:
        state.update(official_dit_state(dit.state_dict()))
        config["transformer"] = official_dit_config(dit)
    if vae is not None:
        state.update(official_vae_state(vae.state_dict(), version))
        config["vae"] = OFFICIAL_VAE_CONFIGS[version]
    config["scheduler"] = OFFICIAL_SCHEDULER
    return save(state, path, metadata={"config": json.dumps(config)})


# --- expected trees -----------------------------------------------------------------------------------


def _tree_path(module: str) -> str:
    return re.sub(r"\.(\d+)", r"_\1", module).replace(".", "/")


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted tree from a diffusers state dict alone: renames, transposes, stacks (every spec here)."""
    flat, layers = {}, {}
    for key, tensor in state.items():
        value = tensor.detach().float().numpy()
        module, _, param = key.rpartition(".")
        if not module:  # a top-level parameter or buffer (scale_shift_table, latents_mean, ...)
            leaf = param
        elif param in ("scale_shift_table", "timestep_scale_multiplier"):
            leaf = f"{_tree_path(module)}/{param}"
        elif param.startswith("per_channel_scale"):  # (C, 1, 1) noise scales -> (C,)
            leaf, value = f"{_tree_path(module)}/{param}", value.reshape(-1)
        elif param == "bias":
            leaf = f"{_tree_path(module)}/bias"
        elif value.ndim == 1:  # norm weights
            leaf = f"{_tree_path(module)}/scale"
        elif value.ndim == 2:
            leaf, value = f"{_tree_path(module)}/kernel", value.T
        else:  # ConvNd (O, I, *k) -> (*k, I, O)
            leaf, value = f"{_tree_path(module)}/kernel", value.transpose(*range(2, value.ndim), 1, 0)
        block = re.fullmatch(r"transformer_blocks_(\d+)/(.*)", leaf)
        if block:
            layers.setdefault(f"blocks/{block.group(2)}", {})[int(block.group(1))] = value
        else:
            flat[leaf] = np.array(value)  # a copy; keeps 0-d leaves 0-d (ascontiguousarray would not)
    for leaf, by_layer in layers.items():
        flat[leaf] = np.stack([by_layer[i] for i in range(len(by_layer))])
    return flat


@register_spec_fixture("ltx_video/transformer")
def transformer_cases(tmp_path: Path) -> list[SpecCase]:
    ref = dit_reference()
    expected = expected_tree(ref.state_dict())
    folder = save(ref.state_dict(), tmp_path / "diffusers" / "transformer", diffusers_config(ref, "LTXVideoTransformer3DModel"))
    return [
        SpecCase("diffusers", folder.parent, expected),
        SpecCase("official", save_official_file(tmp_path / "official" / "ltxv-tiny.safetensors", dit=ref,
                                                vae=vae_reference()), expected),
    ]


@register_spec_fixture("ltx_video/vae")
def vae_cases(tmp_path: Path) -> list[SpecCase]:
    """Each VAE generation in the diffusers layout and as an official single file (with a DiT beside it)."""
    cases, dit = [], dit_reference()
    for version in TINY_VAES:
        ref = vae_reference(version)
        expected = expected_tree(ref.state_dict())
        folder = save(ref.state_dict(), tmp_path / version / "diffusers" / "vae", diffusers_config(ref, "AutoencoderKLLTXVideo"))
        official = save_official_file(tmp_path / version / "official" / "ltxv-tiny.safetensors", dit=dit, vae=ref,
                                      version=version)
        cases += [SpecCase(f"diffusers-{version}", folder.parent, expected), SpecCase(f"official-{version}", official, expected)]
    for name in VAE_BLOCK_CONFIGS:  # no official block list lays these out
        ref = vae_reference(name)
        folder = save(ref.state_dict(), tmp_path / name / "diffusers" / "vae",
                      diffusers_config(ref, "AutoencoderKLLTXVideo"))
        cases.append(SpecCase(f"diffusers-{name}", folder.parent, expected_tree(ref.state_dict())))
    return cases


@register_spec_fixture("ltx_video/upsampler")
def upsampler_cases(tmp_path: Path) -> list[SpecCase]:
    """The diffusers folder and the official file (same keys, config in the header) of the spatial and a
    spatio-temporal upsampler."""
    cases = []
    for name, overrides in (("spatial", {}), ("spatiotemporal", {"temporal_upsample": True})):
        ref = upsampler_reference(**overrides)
        expected = expected_tree(ref.state_dict())
        folder = save(ref.state_dict(), tmp_path / name / "latent_upsampler",
                      diffusers_config(ref, "LTXLatentUpsamplerModel"))
        official = save(ref.state_dict(), tmp_path / name / "ltxv-spatial-upscaler-tiny.safetensors",
                        metadata={"config": json.dumps(official_upsampler_config(ref))})
        cases += [SpecCase(f"diffusers-{name}", folder.parent, expected), SpecCase(f"official-{name}", official, expected)]
    return cases


def official_upsampler_config(model) -> dict:
    """The official `LatentUpsampler.config()` of `model` (its header's `config` entry)."""
    c = model.config
    return {"_class_name": "LatentUpsampler", "in_channels": c.in_channels, "mid_channels": c.mid_channels,
            "num_blocks_per_stage": c.num_blocks_per_stage, "dims": c.dims, "spatial_upsample": c.spatial_upsample,
            "temporal_upsample": c.temporal_upsample}
