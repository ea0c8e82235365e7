"""HunyuanVideo-1.5 (tencent/HunyuanVideo-1.5): DiT, VAE and their sharding rules."""

from vidax.zoo.hunyuan_video15.config import TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer

__all__ = ["HunyuanVideo15Transformer", "TransformerConfig", "VAEConfig"]
