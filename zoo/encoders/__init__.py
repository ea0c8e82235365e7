"""Text and image encoders shared by the families: T5/UMT5/ByT5, CLIP and SigLIP vision, Llama/Qwen2 decoders."""
