"""LTX-2 from latents to pixels and sound: video VAE, diffusion decoder, audio decoder, upsampler."""
