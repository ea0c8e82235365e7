"""vidax.train: fine-tuning in JAX (`vidax-train`, docs/TRAINING.md). The zoo never imports it.

- `vidax.train.run`: `TrainOptions`, `prepare`, `train_lora` (what `vidax-train lora` calls), checkpoints.
- `vidax.train.lora`: LoRA parameters on a stacked DiT (`init_lora`) and the block runner that merges them
  block by block (`lora_blocks`).
- `vidax.train.objective`: noise levels, the flow-matching loss, AdamW and the jitted `train_step`.
- `vidax.train.data`: the captioned media folder and its encoding cache.
- `vidax.train.export`: the LoRA as PEFT / ComfyUI safetensors (and a PEFT file read back).
"""
