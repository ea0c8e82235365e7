"""Weights on the devices: a DiT from one file, 8-bit blocks, streamed offload, LoRA switching, where
a model's weights come from."""
