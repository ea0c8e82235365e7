"""Model parts that families share: the DiT contract and block runner, RoPE, VAE layers and tiling, the
Wan VAE, HunyuanVideo's dual-stream pieces, the latent upsampler, config readers, text encoders."""
