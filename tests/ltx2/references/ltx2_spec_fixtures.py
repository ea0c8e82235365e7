"""Tiny LTX-2 references and the test checkpoints of the `ltx2/*` specs.

Registered with `vidax.translator.testing`: for each spec, tiny perturbed diffusers references saved
in the layouts the spec reads, and the tree each must convert to, computed from the diffusers state
dict alone (module paths, transposes, stacking), not from the spec. The official layout is made by
renaming diffusers keys with the inverse of diffusers' single-file converters (tables below; the
LTX-2.0 transformer's inverse is checked against `convert_ltx2_transformer_to_diffusers` in
test_official_layout.py).

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from safetensors.torch import save_file

from tests.oracle import build_perturbed, expected_tree, save_diffusers, state_of, tree_path
from tests.oracle import perturb as perturbed  # noqa: F401  (tests/ltx2 modules import it under this name)
from vidax.translator.testing import SpecCase, register_spec_fixture

# Three transformer variants: LTX-2.0 (split RoPE, caption projection in the DiT, FFN biases),
# LTX-2.3 (interleaved RoPE here, gated attention, prompt AdaLN, projections in the connectors) and
# LTX-2.5 (no video FFN bias, KV-cacheable prompt modulation, keyframe embedding).
TINY_DIT_BASE = dict(
    in_channels=6, out_channels=6, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
    audio_in_channels=5, audio_out_channels=5, audio_num_attention_heads=2, audio_attention_head_dim=4,
    audio_cross_attention_dim=8, num_layers=2, caption_channels=12, perturbed_attn=True,
)
TINY_DIT = {
    "2.0": dict(TINY_DIT_BASE, rope_type="split"),
    "2.3": dict(TINY_DIT_BASE, rope_type="interleaved", gated_attn=True, audio_gated_attn=True, cross_attn_mod=True,
                audio_cross_attn_mod=True, use_prompt_embeddings=False),
    "2.5": dict(TINY_DIT_BASE, rope_type="split", gated_attn=True, audio_gated_attn=True, cross_attn_mod=True,
                audio_cross_attn_mod=True, use_prompt_embeddings=False, ff_bias=False, use_prompt_adaln_single=False,
                use_keyframes_abs_pos_embedding=True),
}

# diffusers key (full match) -> official key, the inverse of diffusers' `convert_ltx2_transformer_to_diffusers`
# (plus ltx_core's LTX-2.3/2.5 module names).
DIT_TO_OFFICIAL = [
    (r"(audio_)?proj_in\.(\w+)", r"\1patchify_proj.\2"),
    (r"time_embed\.(.+)", r"adaln_single.\1"),
    (r"audio_time_embed\.(.+)", r"audio_adaln_single.\1"),
    (r"(audio_)?prompt_adaln\.(.+)", r"\1prompt_adaln_single.\2"),
    (r"av_cross_attn_video_scale_shift\.(.+)", r"av_ca_video_scale_shift_adaln_single.\1"),
    (r"av_cross_attn_audio_scale_shift\.(.+)", r"av_ca_audio_scale_shift_adaln_single.\1"),
    (r"av_cross_attn_video_a2v_gate\.(.+)", r"av_ca_a2v_gate_adaln_single.\1"),
    (r"av_cross_attn_audio_v2a_gate\.(.+)", r"av_ca_v2a_gate_adaln_single.\1"),
    (r"transformer_blocks\.(\d+)\.video_a2v_cross_attn_scale_shift_table", r"transformer_blocks.\1.scale_shift_table_a2v_ca_video"),
    (r"transformer_blocks\.(\d+)\.audio_a2v_cross_attn_scale_shift_table", r"transformer_blocks.\1.scale_shift_table_a2v_ca_audio"),
    (r"transformer_blocks\.(\d+)\.(\w+)\.norm_([qk])\.weight", r"transformer_blocks.\1.\2.\3_norm.weight"),
    (r"(.+)", r"\1"),  # everything else keeps its name
]


def rename(key: str, table) -> str:
    for pattern, repl in table:
        if re.fullmatch(pattern, key):
            return re.sub(f"^{pattern}$", repl, key)
    raise KeyError(key)


def dit_reference(variant: str = "2.0", seed: int = 0, **overrides):
    from diffusers import LTX2VideoTransformer3DModel

    return build_perturbed(LTX2VideoTransformer3DModel, {**TINY_DIT[variant], **overrides}, seed + 1, init_seed=seed)


def official_dit_state(state: dict, prefix: str = "model.diffusion_model.") -> dict:
    return {prefix + rename(k, DIT_TO_OFFICIAL): v for k, v in state.items()}


def dit_expected(state: dict) -> dict:
    return expected_tree(state, {"transformer_blocks": "blocks"})


def both_layouts(tmp_path, tag: str, ref, component: str, expected: dict, official: dict,
                 filename: str = "ltx-2.safetensors", state: dict | None = None) -> list[SpecCase]:
    """`ref` saved as the diffusers folder's `component/` (with `state` if given) and as the official single
    file holding `official`, both to convert to `expected`."""
    root, single = tmp_path / f"diffusers_{tag}", tmp_path / f"official_{tag}"
    save_diffusers(ref, root / component, state)
    single.mkdir()
    save_file(official, single / filename)
    return [SpecCase(f"diffusers-{tag}", root, expected), SpecCase(f"official-{tag}", single, expected)]


@register_spec_fixture("ltx2/transformer")
def ltx2_transformer_cases(tmp_path):
    cases = []
    for variant in TINY_DIT:
        ref = dit_reference(variant)
        state = state_of(ref)
        cases += both_layouts(tmp_path, variant, ref, "transformer", dit_expected(state), official_dit_state(state),
                              f"ltx-{variant}.safetensors", state)
    return cases


# Connectors: LTX-2.0 (one projection, masked mean/range norm, no registers so the masks matter) and
# LTX-2.3+ (per-modality projections with bias, gated attention, registers).
TINY_CONNECTORS = {
    "2.0": dict(caption_channels=16, text_proj_in_factor=3, video_connector_num_attention_heads=2,
                video_connector_attention_head_dim=8, video_connector_num_layers=2,
                video_connector_num_learnable_registers=None, audio_connector_num_attention_heads=4,
                audio_connector_attention_head_dim=4, audio_connector_num_layers=1,
                audio_connector_num_learnable_registers=None, connector_rope_base_seq_len=32, rope_type="split"),
    "2.3": dict(caption_channels=8, text_proj_in_factor=3, video_connector_num_attention_heads=2,
                video_connector_attention_head_dim=8, video_connector_num_layers=2,
                video_connector_num_learnable_registers=4, audio_connector_num_attention_heads=2,
                audio_connector_attention_head_dim=4, audio_connector_num_layers=1,
                audio_connector_num_learnable_registers=4, connector_rope_base_seq_len=32,
                per_modality_projections=True, video_hidden_dim=16, audio_hidden_dim=8, proj_bias=True,
                video_gated_attn=True, audio_gated_attn=True),
}

CONNECTORS_TO_OFFICIAL = [
    (r"text_proj_in\.(\w+)", r"text_embedding_projection.aggregate_embed.\1"),
    (r"(video|audio)_text_proj_in\.(\w+)", r"text_embedding_projection.\1_aggregate_embed.\2"),
    (r"(video|audio)_connector\.learnable_registers", r"model.diffusion_model.\1_embeddings_connector.learnable_registers"),
    (r"(video|audio)_connector\.transformer_blocks\.(\d+)\.attn1\.norm_([qk])\.weight",
     r"model.diffusion_model.\1_embeddings_connector.transformer_1d_blocks.\2.attn1.\3_norm.weight"),
    (r"(video|audio)_connector\.transformer_blocks\.(.+)", r"model.diffusion_model.\1_embeddings_connector.transformer_1d_blocks.\2"),
]


def connectors_reference(variant: str = "2.0", seed: int = 0):
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    return build_perturbed(LTX2TextConnectors, TINY_CONNECTORS[variant], seed + 1, init_seed=seed)


@register_spec_fixture("ltx2/connectors")
def ltx2_connectors_cases(tmp_path):
    cases = []
    for variant in TINY_CONNECTORS:
        ref = connectors_reference(variant)
        state = state_of(ref)
        official = {rename(k, CONNECTORS_TO_OFFICIAL): v for k, v in state.items()}
        cases += both_layouts(tmp_path, variant, ref, "connectors", expected_tree(state), official, state=state)
    return cases


# Video VAE: the release's block structure (4 encoder levels: spatial, temporal, 2x spatiotemporal;
# 3 residual spatiotemporal decoder levels), tiny widths, patch 2 (so 16x spatial, 8x temporal).
TINY_VAE = dict(
    latent_channels=8, block_out_channels=(8, 16, 16, 32), decoder_block_out_channels=(8, 16, 32),
    layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 2), patch_size=2, decoder_causal=False,
    spatial_compression_ratio=16, temporal_compression_ratio=8,  # as the release configs state theirs
)

# Per-block settings that differ from block to block, as diffusers reads them: its decoder reverses
# every per-block list except `upsample_type`; an up block's `conv_in` exists where the previous width /
# this factor differs from this width / factor; a block without scaling has no resampler; the lists may
# be single bools. Each set builds and runs in diffusers; sizes come from the ratios the config states
# (diffusers' own `patch * 2 ** sum(scaling)` counts a spatial- or temporal-only stage twice).
VAE_BLOCK_CONFIGS = {
    # four decoder levels of differing kinds and factors, no residuals (issue 26)
    "mixed-factors": dict(decoder_block_out_channels=(16, 32, 32, 64), decoder_layers_per_block=(1, 1, 1, 1, 2),
                          decoder_spatio_temporal_scaling=True, decoder_inject_noise=False,
                          upsample_factor=(2, 2, 1, 2),
                          upsample_type=("spatiotemporal", "spatiotemporal", "temporal", "spatial"),
                          upsample_residual=False),
    # the same, timestep-conditioned, residual on some levels
    "mixed-timestep": dict(decoder_block_out_channels=(16, 32, 32, 64), decoder_layers_per_block=(1, 1, 1, 1, 2),
                           decoder_spatio_temporal_scaling=(True, True, True, True), decoder_inject_noise=False,
                           upsample_factor=(2, 2, 1, 2), upsample_type=("spatiotemporal", "spatiotemporal", "temporal",
                                                                        "spatial"),
                           upsample_residual=(True, False, True, False), timestep_conditioning=True),
    # width-changing up blocks (their conv_in resnets) at factor 1, a level without upsampler
    "conv-in": dict(decoder_block_out_channels=(8, 32, 32), decoder_layers_per_block=(2, 1, 1, 1),
                    decoder_spatio_temporal_scaling=(True, False, True), upsample_factor=(1, 1, 2),
                    upsample_type=("spatiotemporal", "temporal", "spatiotemporal"),
                    upsample_residual=(True, False, True),
                    spatial_compression_ratio=8, temporal_compression_ratio=4,
                    block_out_channels=(8, 16, 32), layers_per_block=(1, 2, 1, 1),
                    downsample_type=("conv", "temporal", "spatial")),
    # an encoder stage without downsampler, spatial-only and temporal-only stages; a matching decoder
    "encoder-kinds": dict(block_out_channels=(16, 16, 32), layers_per_block=(1, 1, 2, 1),
                          downsample_type=("spatiotemporal", "temporal", "spatial"),
                          spatio_temporal_scaling=(True, False, True), decoder_block_out_channels=(8, 16, 32),
                          decoder_layers_per_block=(1, 2, 1, 1), decoder_spatio_temporal_scaling=(False, True, True),
                          upsample_factor=(1, 2, 2), upsample_type=("spatial", "spatiotemporal", "temporal"),
                          upsample_residual=True, spatial_compression_ratio=8, temporal_compression_ratio=2),
}


VAE_TO_OFFICIAL_BLOCKS = {
    "encoder.down_blocks.0.downsamplers.0": "encoder.down_blocks.1", "encoder.down_blocks.1.downsamplers.0": "encoder.down_blocks.3",
    "encoder.down_blocks.2.downsamplers.0": "encoder.down_blocks.5", "encoder.down_blocks.3.downsamplers.0": "encoder.down_blocks.7",
    "encoder.down_blocks.0": "encoder.down_blocks.0", "encoder.down_blocks.1": "encoder.down_blocks.2",
    "encoder.down_blocks.2": "encoder.down_blocks.4", "encoder.down_blocks.3": "encoder.down_blocks.6",
    "encoder.mid_block": "encoder.down_blocks.8", "decoder.mid_block": "decoder.up_blocks.0",
    "decoder.up_blocks.0.upsamplers.0": "decoder.up_blocks.1", "decoder.up_blocks.0": "decoder.up_blocks.2",
    "decoder.up_blocks.1.upsamplers.0": "decoder.up_blocks.3", "decoder.up_blocks.1": "decoder.up_blocks.4",
    "decoder.up_blocks.2.upsamplers.0": "decoder.up_blocks.5", "decoder.up_blocks.2": "decoder.up_blocks.6",
}


def vae_reference(seed: int = 0, **overrides):
    from diffusers import AutoencoderKLLTX2Video

    return build_perturbed(AutoencoderKLLTX2Video, {**TINY_VAE, **overrides}, seed + 1, init_seed=seed)


def official_vae_state(state: dict) -> dict:
    """Inverse of diffusers' `convert_ltx2_vae_to_diffusers` (plus the per-channel statistics it drops)."""
    out = {}
    for key, value in state.items():
        if key in ("latents_mean", "latents_std"):
            name = {"latents_mean": "mean-of-means", "latents_std": "std-of-means"}[key]
            out[f"vae.per_channel_statistics.{name}"] = value
            continue
        key = key.replace("decoder.time_embedder.", "decoder.last_time_embedder.")
        key = key.replace("decoder.scale_shift_table", "decoder.last_scale_shift_table")
        for prefix in sorted(VAE_TO_OFFICIAL_BLOCKS, key=len, reverse=True):
            if key.startswith(prefix + "."):
                key = VAE_TO_OFFICIAL_BLOCKS[prefix] + key[len(prefix):]
                break
        out["vae." + key.replace(".resnets.", ".res_blocks.")] = value
    out["vae.per_channel_statistics.channel"] = torch.arange(state["latents_mean"].shape[0]).float()
    out["vae.per_channel_statistics.mean-of-stds"] = torch.ones_like(state["latents_mean"])
    return out


@register_spec_fixture("ltx2/vae")
def ltx2_vae_cases(tmp_path):
    cases = []
    for name, overrides in (("plain", {}), ("timestep", dict(timestep_conditioning=True))):
        ref = vae_reference(**overrides)
        state = state_of(ref)
        cases += both_layouts(tmp_path, name, ref, "vae", expected_tree(state), official_vae_state(state), state=state)
    for name, overrides in VAE_BLOCK_CONFIGS.items():  # the official block list is the release's only
        ref = vae_reference(**overrides)
        save_diffusers(ref, tmp_path / f"diffusers_{name}" / "vae")
        cases.append(SpecCase(f"diffusers-{name}", tmp_path / f"diffusers_{name}", expected_tree(state_of(ref))))
    return cases


# Audio VAE decoder: the release's shape (pixel norm, causal in time, 3 levels) and a group-norm,
# non-causal variant (fires the norm rule); vocoders: LTX-2.0's plain one and the BWE one.
TINY_AUDIO_VAE = {
    "release": dict(base_channels=4, ch_mult=(1, 2, 4), num_res_blocks=1, latent_channels=4, mel_bins=16),
    "group": dict(base_channels=32, ch_mult=(1, 1), num_res_blocks=1, latent_channels=4, mel_bins=8,
                  norm_type="group", causality_axis="none"),
}
TINY_VOCODER = {
    "plain": dict(in_channels=32, hidden_channels=16, out_channels=2, upsample_kernel_sizes=[4, 4],
                  upsample_factors=[2, 2], resnet_kernel_sizes=[3, 5], resnet_dilations=[[1, 3], [1, 3]],
                  output_sampling_rate=24000),
    "bwe": dict(in_channels=32, hidden_channels=16, upsample_kernel_sizes=[4, 4], upsample_factors=[2, 2],
                resnet_kernel_sizes=[3], resnet_dilations=[[1, 3]], bwe_in_channels=8, bwe_hidden_channels=8,
                bwe_upsample_kernel_sizes=[7, 4, 4], bwe_upsample_factors=[3, 2, 2], bwe_resnet_kernel_sizes=[3],
                bwe_resnet_dilations=[[1]], filter_length=8, hop_length=4, window_length=8, num_mel_channels=4),
}


def audio_vae_reference(variant: str = "release", seed: int = 0):
    from diffusers import AutoencoderKLLTX2Audio

    ref = build_perturbed(AutoencoderKLLTX2Audio, TINY_AUDIO_VAE[variant], seed + 1, init_seed=seed)
    with torch.no_grad():  # the statistics are buffers: give them values that matter
        ref.latents_mean.copy_(torch.randn(ref.latents_mean.shape, generator=torch.Generator().manual_seed(seed)))
        ref.latents_std.copy_(1 + torch.rand(ref.latents_std.shape, generator=torch.Generator().manual_seed(seed)))
    return ref


def vocoder_reference(variant: str = "plain", seed: int = 0):
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

    cls = LTX2VocoderWithBWE if variant == "bwe" else LTX2Vocoder
    ref = build_perturbed(cls, TINY_VOCODER[variant], seed + 1, init_seed=seed)
    if variant == "bwe":  # real analysis bases (the buffers start at zero): a DFT with a Hann window
        stft = ref.mel_stft.stft_fn
        n, length = stft.forward_basis.shape[0] // 2, stft.forward_basis.shape[-1]
        t = torch.arange(length, dtype=torch.float64)
        f = torch.arange(n, dtype=torch.float64)[:, None]
        window = torch.hann_window(length, periodic=True, dtype=torch.float64)
        basis = torch.cat([torch.cos(2 * torch.pi * f * t / length), -torch.sin(2 * torch.pi * f * t / length)]) * window
        with torch.no_grad():
            stft.forward_basis.copy_(basis[:, None].float())
            ref.mel_stft.mel_basis.copy_(torch.rand(ref.mel_stft.mel_basis.shape, generator=torch.Generator().manual_seed(5)))
    return ref


def official_vocoder_state(state: dict) -> dict:
    out = {}
    for key, value in state.items():
        key = re.sub(r"^upsamplers\.", "ups.", key)
        key = re.sub(r"^resnets\.", "resblocks.", key)
        key = re.sub(r"^conv_in\.", "conv_pre.", key)
        out["vocoder." + re.sub(r"^conv_out\.", "conv_post.", key)] = value
    return out


def vocoder_expected(state: dict) -> dict:
    tree = {}
    for key, value in state.items():
        array = value.float().numpy()
        if key.endswith("inverse_basis"):
            continue
        if key.endswith(".filter"):
            tree[tree_path(key)] = array.reshape(-1)
        elif key.endswith("forward_basis"):
            tree[tree_path(key)] = array.transpose(2, 1, 0)
        elif re.search(r"upsamplers\.\d+\.weight$", key):
            tree[tree_path(key[:-7]) + "/kernel"] = array.transpose(2, 0, 1)
        elif key.endswith(".weight"):
            tree[tree_path(key[:-7]) + "/kernel"] = np.moveaxis(array, (0, 1), (-1, -2))
        elif key.endswith(".bias"):
            tree[tree_path(key[:-5]) + "/bias"] = array
        else:
            tree[tree_path(key)] = array
    return tree


@register_spec_fixture("ltx2/audio_vae")
def ltx2_audio_vae_cases(tmp_path):
    cases = []
    for variant in TINY_AUDIO_VAE:
        ref = audio_vae_reference(variant)
        full = state_of(ref)
        decoder = {k: v for k, v in full.items() if not k.startswith("encoder.")}  # the spec converts the decoder
        official = {("audio_vae.per_channel_statistics." + {"latents_mean": "mean-of-means", "latents_std": "std-of-means"}[k]
                     if k.startswith("latents_") else "audio_vae." + k): v for k, v in full.items()}
        cases += both_layouts(tmp_path, variant, ref, "audio_vae", expected_tree(decoder), official, state=full)
    return cases


@register_spec_fixture("ltx2/vocoder")
def ltx2_vocoder_cases(tmp_path):
    cases = []
    for variant in TINY_VOCODER:
        ref = vocoder_reference(variant)
        state = state_of(ref)
        save_diffusers(ref, tmp_path / f"diffusers_{variant}" / "vocoder", state)
        cases.append(SpecCase(f"diffusers-{variant}", tmp_path / f"diffusers_{variant}", vocoder_expected(state)))
        if variant == "plain":
            (tmp_path / "official").mkdir()
            save_file(official_vocoder_state(state), tmp_path / "official" / "ltx-2.safetensors")
            cases.append(SpecCase("official-plain", tmp_path / "official", vocoder_expected(state)))
    return cases


# Diffusion decoder: the release's structure (4 deterministic stages, one x0 step) at tiny widths,
# spatial strides reduced so the stage-5 grid stays small (9 x 6 x 6) for the reference's flex attention.
TINY_DIFFUSION_DECODER = dict(
    latent_channels=8, patch_size=2, decoder_head_dim=8, decoder_stage_channels=(32, 16, 8, 8, 8),
    decoder_stage_depths=(2, 1, 1, 1, 2), decoder_stage_kernels=((3, 3, 3), (3, 3, 3), (3, 3, 3), (3, 3, 5)),
    decoder_upsample_strides=((1, 2, 2), (2, 1, 1), (2, 1, 1), (2, 1, 1)),
    decoder_upsample_channel_reductions=(2, 2, 1, 1), decoder_stage5_kernel=(3, 5, 5), decoder_t_emb_dim=16,
    spatial_compression_ratio=4,
)


def diffusion_decoder_reference(seed: int = 0, **overrides):
    from diffusers import LTX2VideoDiffusionDecoderModel

    ref = build_perturbed(LTX2VideoDiffusionDecoderModel, {**TINY_DIFFUSION_DECODER, **overrides}, seed + 1, init_seed=seed)
    with torch.no_grad():
        ref.latents_mean.copy_(torch.randn(ref.latents_mean.shape, generator=torch.Generator().manual_seed(seed)))
    return ref


def diffusion_decoder_expected(state: dict) -> dict:
    inner = {k.removeprefix("decoder."): v for k, v in state.items()}
    tree = expected_tree({k: v for k, v in inner.items() if not k.startswith("det_stages.")},
                         {"diff_blocks": "diff_blocks"})
    stages = sorted({int(k.split(".")[1]) for k in inner if k.startswith("det_stages.")})
    for s in stages:  # each stage's blocks stacked under their own top-level name
        prefix = f"det_stages.{s}."
        blocks = {f"stage.{k[len(prefix):]}": v for k, v in inner.items() if k.startswith(prefix)}
        tree.update(expected_tree(blocks, {"stage": f"det_stages_{s}"}))
    return tree


def official_diffusion_decoder_state(state: dict) -> dict:
    out = {}
    for key, value in state.items():
        if key in ("latents_mean", "latents_std"):
            name = {"latents_mean": "mean-of-means", "latents_std": "std-of-means"}[key]
            out[f"vae.per_channel_statistics.{name}"] = value
            continue
        m = re.fullmatch(r"(.+\.attn)\.to_q\.(weight|bias)", key)
        if m:
            out[f"vae.{m.group(1)}.qkv.{m.group(2)}"] = torch.cat(
                [state[f"{m.group(1)}.to_{p}.{m.group(2)}"] for p in "qkv"])
            continue
        if re.fullmatch(r".+\.attn\.to_[kv]\.(weight|bias)", key):
            continue
        key = key.replace(".attn.to_out.0.", ".attn.proj.").replace(".attn.norm_q.", ".attn.q_norm.")
        key = key.replace(".attn.norm_k.", ".attn.k_norm.")
        key = key.replace("t_embedder.timestep_embedder.linear_1.", "t_embedder.mlp.0.")
        out["vae." + key.replace("t_embedder.timestep_embedder.linear_2.", "t_embedder.mlp.2.")] = value
    out["vae.encoder.conv_in.conv.weight"] = torch.zeros(1)  # the shared file's encoder: ignored
    return out


@register_spec_fixture("ltx2/diffusion_decoder")
def ltx2_diffusion_decoder_cases(tmp_path):
    ref = diffusion_decoder_reference()
    state = state_of(ref)
    save_diffusers(ref, tmp_path / "diffusers" / "vae_diffusion", state)
    (tmp_path / "official").mkdir()
    save_file(official_diffusion_decoder_state(state), tmp_path / "official" / "ltx-2.5.safetensors")
    expected = diffusion_decoder_expected(state)
    return [SpecCase("diffusers", tmp_path / "diffusers", expected), SpecCase("official", tmp_path / "official", expected)]
