"""Cosmos3 (nvidia/Cosmos3-Nano, nvidia/Cosmos3-Edge): the mixture-of-transformers DiT with its text
pathway inside, its prompt construction and sequence layout, and pipeline pieces.

The VAE is Wan2.2's (`vidax.zoo.parts.wan_vae`, 48 channels), reused by import.
"""

from vidax.zoo.cosmos3.config import Cosmos3ConfigError, Cosmos3TransformerConfig
from vidax.zoo.cosmos3.transformer import Cosmos3Transformer

__all__ = ["Cosmos3ConfigError", "Cosmos3Transformer", "Cosmos3TransformerConfig"]
