"""A tiny LTX-2.0-shaped `LTX2Pipeline` (Gemma 3 tower and tokenizer, connectors, joint DiT, video VAE,
audio VAE, vocoder, scheduler), every float parameter perturbed, for the generator tests.

Sizes: DiT 4 video / 4 audio heads (so tp x sp = 4 splits both streams), 2 blocks, STG-perturbable
(`perturbed_attn`, so diffusers' STG pass is real); video VAE 16x spatial / 8x temporal, 8 latent
channels; audio VAE 2 latent channels x 4 latent mel bins (the DiT's 8 audio channels), vocoder at
24 kHz. The generation size is 9 frames at 32x64 (diffusers wants multiples of 32): 2x2x4 video tokens and 9 audio tokens.
"""

from __future__ import annotations

import json

import torch

from tests.encoders.gemma_spec_fixtures import gemma3_reference
from .ltx2_spec_fixtures import TINY_CONNECTORS, TINY_DIT, perturbed, vae_reference, vocoder_reference

PROMPT = "w1 w2 w3 w4"
NEGATIVE = "w5 w6"
SIZE = dict(height=32, width=64, frames=9)
FPS = 24.0
WORDS = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"w{i}" for i in range(60)]
SCHEDULER = dict(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                 max_image_seq_len=4096, shift_terminal=0.1)  # diffusers' convert_ltx2_to_diffusers.py
# every guidance term on, audio scales of their own (LTX-2.0's native values, STG on the tiny DiT's block 1)
GUIDANCE = dict(guidance_scale=3.0, stg_scale=1.0, modality_scale=3.0, guidance_rescale=0.7, audio_guidance_scale=7.0,
                audio_stg_scale=1.0, audio_modality_scale=3.0, audio_guidance_rescale=0.7,
                spatio_temporal_guidance_blocks=[1], use_cross_timestep=False)


def tokenizer(folder):
    """A word-level Gemma 3-like tokenizer (its template adds <bos>), as transformers saves it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
         "padding_side": "left", "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024}))
    return PreTrainedTokenizerFast.from_pretrained(folder)


def components(tmp_path) -> dict:
    """The pipeline's modules (the tokenizer built in `tmp_path`)."""
    from diffusers import AutoencoderKLLTX2Audio, FlowMatchEulerDiscreteScheduler, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    gemma = gemma3_reference()
    hidden, layers = gemma.config.text_config.hidden_size, gemma.config.text_config.num_hidden_layers
    torch.manual_seed(3)
    connectors = perturbed(LTX2TextConnectors(**dict(
        TINY_CONNECTORS["2.0"], caption_channels=hidden, text_proj_in_factor=layers + 1,
        audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=8,
        video_connector_num_learnable_registers=8, audio_connector_num_learnable_registers=8)), 4)
    torch.manual_seed(0)
    dit = perturbed(LTX2VideoTransformer3DModel(**dict(
        TINY_DIT["2.0"], in_channels=8, out_channels=8, audio_in_channels=8, audio_out_channels=8,
        num_attention_heads=4, attention_head_dim=4, cross_attention_dim=16, audio_num_attention_heads=4,
        audio_attention_head_dim=2, audio_cross_attention_dim=8, caption_channels=hidden)), 1)
    torch.manual_seed(2)
    audio_vae = perturbed(AutoencoderKLLTX2Audio(ch_mult=(1, 2, 4), num_res_blocks=1, latent_channels=2, mel_bins=16,
                                                 base_channels=8), 3)
    with torch.no_grad():  # buffers: give the statistics values that matter
        audio_vae.latents_mean.copy_(torch.randn(audio_vae.latents_mean.shape, generator=torch.Generator().manual_seed(4)))
        audio_vae.latents_std.copy_(torch.rand(audio_vae.latents_std.shape, generator=torch.Generator().manual_seed(5)) + 0.5)
    vae = vae_reference()
    with torch.no_grad():
        vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=torch.Generator().manual_seed(6)) * 0.1)
        vae.latents_std.copy_(torch.rand(vae.latents_std.shape, generator=torch.Generator().manual_seed(7)) + 0.5)
    return dict(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae, audio_vae=audio_vae,
                text_encoder=gemma, tokenizer=tokenizer(tmp_path / "tokenizer_src"), connectors=connectors,
                transformer=dit, vocoder=vocoder_reference("plain"))


def initial_noise(pipe, seed: int, height: int, width: int, frames: int, fps: float = FPS):
    """What the pipeline's generator draws first (video noise `[1, C, F', H', W']`) and second (audio
    noise `[1, Ca, L, M']`), both in the sampler's normalised space: vidax's --latents and --audio-latents."""
    g = torch.Generator().manual_seed(seed)
    grid = ((frames - 1) // 8 + 1, height // pipe.vae_spatial_compression_ratio, width // pipe.vae_spatial_compression_ratio)
    video = torch.randn(1, pipe.transformer.config.in_channels, *grid, generator=g)
    length = round(frames / fps * pipe.audio_sampling_rate / pipe.audio_hop_length / 4)
    audio = torch.randn(1, pipe.audio_vae.config.latent_channels, length, pipe.audio_vae.config.mel_bins // 4, generator=g)
    return video.numpy(), audio.numpy()
