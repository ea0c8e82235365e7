"""LTX-Video 0.9.x (Lightricks/LTX-Video): DiT, VAE, latent upsampler, their configs and the pipelines' pure pieces.

    transformer.LTXVideoTransformer   packed-token DiT (`zoo.parts.dit.StackedTransformer`)
    vae.LTXVideoVAE                   encode to moments / timestep-conditioned decode
    upsampler.LTXLatentUpsampler      the 0.9.7 / 0.9.8 multi-scale x2 latent upsampler
    rope                              host-built 3D RoPE tables (both reference position paths)
    latents                           packing, step grids, conditioning, per-token step, AdaIN / tone map
    text                              T5 prompt encoding (diffusers' and the official variants)
    passes                            one or two denoising passes, per-step guidance lists
    predict                           the guided velocity (CFG, CFG*, STG, rescale) over one DiT batch
"""

from vidax.zoo.ltx_video.config import (
    LTXConfigError,
    SchedulerConfig,
    TransformerConfig,
    UpsamplerConfig,
    VAEConfig,
    read_checkpoint_config,
)
from vidax.zoo.ltx_video.transformer import LTXVideoTransformer
from vidax.zoo.ltx_video.upsampler import LTXLatentUpsampler
from vidax.zoo.ltx_video.vae import LTXVideoVAE

__all__ = [
    "LTXConfigError", "LTXLatentUpsampler", "LTXVideoTransformer", "LTXVideoVAE", "SchedulerConfig", "TransformerConfig",
    "UpsamplerConfig", "VAEConfig", "read_checkpoint_config",
]
