"""Wan 2.1 / 2.2: DiT (`transformer`, `config`, `rope`, `sharding`), VAE (`vae`), pipeline (`pipeline`, `tiny`).

Import from the submodules (`from vidax.zoo.wan.transformer import WanTransformer`); this package
imports nothing itself so that loading one part never pulls in the others.
"""
