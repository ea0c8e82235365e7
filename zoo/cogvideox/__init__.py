"""CogVideoX 1.0 / 1.5 (THUDM): DiT (`transformer`, `config`, `rope`, `sharding`), VAE (`vae`), prompt
encoding (`text`) and the pure pipeline pieces (`latents`: latent layouts, frame padding, I2V image
latents, dynamic CFG, ofs; scheduler handling).

Import from the submodules (`from vidax.zoo.cogvideox.transformer import CogVideoXTransformer`); this
package imports nothing itself so that loading one part never pulls in the others.
"""
