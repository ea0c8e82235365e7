"""HunyuanVideo 1.0 (tencent/HunyuanVideo, tencent/HunyuanVideo-I2V): DiT (`transformer`, `config`), VAE
(`vae`), prompt handling (`text`).

Import from the submodules (`from vidax.zoo.hunyuan_video.transformer import HunyuanVideoTransformer`);
this package imports nothing itself so that loading one part never pulls in the others.
"""
