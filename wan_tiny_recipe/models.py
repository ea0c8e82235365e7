"""The tiny model's three parts at training time: diffusers' / transformers' own Wan classes, so
`save_pretrained` writes exactly the diffusers layout the translator reads."""

from __future__ import annotations

Z_DIM = 8
VAE = dict(base_dim=8, z_dim=Z_DIM, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
           temperal_downsample=[False, True, True])
TEXT = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
            relative_attention_max_distance=32, feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6,
            dropout_rate=0.0)
DIT = dict(patch_size=[1, 2, 2], num_attention_heads=4, attention_head_dim=24, in_channels=Z_DIM,
           out_channels=Z_DIM, text_dim=32, freq_dim=64, ffn_dim=256, num_layers=4, cross_attn_norm=True,
           qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None,
           rope_max_seq_len=1024, pos_embed_seq_len=None)
MAX_TEXT = 512  # Wan pads every prompt's features to 512 tokens with zeros by default
TINY_MAX_TEXT = 16  # ... wan-tiny to 16 (its registry setting `max_sequence_length`): training does the same


def make_vae(latents_mean=None, latents_std=None):
    from diffusers import AutoencoderKLWan

    stats = {} if latents_mean is None else dict(latents_mean=list(map(float, latents_mean)),
                                                 latents_std=list(map(float, latents_std)))
    return AutoencoderKLWan(**VAE, **({"latents_mean": [0.0] * Z_DIM, "latents_std": [1.0] * Z_DIM} | stats))


def make_text_encoder(vocab_size: int):
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(vocab_size=vocab_size, **TEXT))


def make_dit(patch: int = 2, cross_norm_init: float = 1.0, self_norm_init: float = 1.0, **sizes):
    """A fresh DiT (`sizes`: DIT's fields to change, e.g. num_layers, num_attention_heads, attention_head_dim,
    ffn_dim). `cross_norm_init` != 1 starts cross-attention's query/key RMS-norm scales there:
    at diffusers' 1 a word's attention logit is at most |q||k|/sqrt(d) = sqrt(24) ~ 4.9, below the
    log(512 - l) ~ 6.2 of the zero padding rows Wan attends to (they share one key). `self_norm_init` does
    the same for self-attention, whose RoPE logits must single out one latent pixel's neighbour to follow a
    shape from frame to frame: at scale 1 the neighbour's logit stands at most ~2 above the next pixel's."""
    import torch
    from diffusers import WanTransformer3DModel

    dit = WanTransformer3DModel(**(DIT | {"patch_size": [1, patch, patch]} | sizes))
    with torch.no_grad():
        for block in dit.blocks:
            block.attn2.norm_q.weight.fill_(cross_norm_init)
            block.attn2.norm_k.weight.fill_(cross_norm_init)
            block.attn1.norm_q.weight.fill_(self_norm_init)
            block.attn1.norm_k.weight.fill_(self_norm_init)
    return dit
