"""Cosmos-Predict2.5 (nvidia/Cosmos-Predict2.5-2B / -14B): DiT, Reason1 text features, pipeline pieces.

The VAE is Wan2.1's (`vidax.zoo.parts.wan_vae`), reused by import.
"""

from vidax.zoo.cosmos.config import CosmosConfigError, CosmosTransformerConfig
from vidax.zoo.cosmos.transformer import CosmosTransformer

__all__ = ["CosmosConfigError", "CosmosTransformer", "CosmosTransformerConfig"]
