"""Checkpoint file formats: safetensors (plain and scaled 8-bit), GGUF, torch zip; prefixes."""
