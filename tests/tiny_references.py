"""Tiny reference components that tests in more than one folder build, written once.

The Wan VAE (Wan, Cosmos-Predict2.5 and Cosmos3 ship it: `vidax.zoo.parts.wan_vae`), the UMT5 text encoder and
the flow UniPC scheduler of the tiny Wan pipelines (the multi-host tests run one too), and the Qwen2-VL chat
template the Cosmos tokenizers are saved with. A family's own references stay in its folder.
"""

from __future__ import annotations

import diffusers
import transformers

# The Wan VAEs at tiny widths: two temporal and three spatial down levels as in the released models. The
# official layouts hard-code 4 levels and 2 resnets per level, so those stay.
WAN_VAE_21 = dict(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
WAN_VAE_22 = dict(
    base_dim=8, decoder_base_dim=12, z_dim=8, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
    temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12, out_channels=12,
    scale_factor_spatial=16, latents_mean=[0.1 * i - 0.3 for i in range(8)], latents_std=[0.5 + 0.1 * i for i in range(8)],
)


def umt5_encoder(vocab: int) -> transformers.UMT5EncoderModel:
    """The tiny Wan pipelines' text encoder (random weights: perturb it)."""
    config = transformers.UMT5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     relative_attention_num_buckets=8, relative_attention_max_distance=32,
                                     feed_forward_proj="gated-gelu", dropout_rate=0.0)
    return transformers.UMT5EncoderModel(config).eval()


# The tiny Wan pipelines' DiT sizes (tests/wan's WanTransformer3DModel; tests/wan_vace's WanVACETransformer3DModel
# adds its VACE layers to the same)
WAN_PIPELINE_DIT = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16,
                        out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True,
                        qk_norm="rms_norm_across_heads", rope_max_seq_len=64)


def wan_pipeline_vae() -> diffusers.AutoencoderKLWan:
    """The tiny Wan pipelines' VAE (one resnet per level: cheaper than the spec fixtures' `WAN_VAE_21`)."""
    return diffusers.AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                                      temperal_downsample=[False, True, True]).eval()


def unipc_flow_scheduler() -> diffusers.UniPCMultistepScheduler:
    """The tiny Wan pipelines' scheduler: UniPC on flow sigmas, shift 3."""
    return diffusers.UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)


# The Qwen2-VL chat template (as Qwen2.5-VL tokenizers ship it), for the Cosmos prompt tests.
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)
