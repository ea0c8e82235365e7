"""LTX-2.x (Lightricks/LTX-2, LTX-2.3, LTX-2.5): joint audio+video DiT, text connectors, Gemma text
features, video VAE, audio VAE + vocoder, LTX-2.5's diffusion decoder, and the pure pipeline pieces.

Import from the submodules (`from vidax.zoo.ltx2.transformer import LTX2Transformer`); this package
imports nothing itself so that loading one part never pulls in the others.
"""
