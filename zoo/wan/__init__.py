"""Wan 2.1 / 2.2: DiT (`transformer`, `config`, `rope`, `sharding`), prompt encoding (`text`), the family
contract (`family`) and the embedded tiny model (`tiny`); the VAE is shared: `vidax.zoo.parts.wan_vae`.

Import from the submodules (`from vidax.zoo.wan.transformer import WanTransformer`); this package
imports nothing itself so that loading one part never pulls in the others.
"""
