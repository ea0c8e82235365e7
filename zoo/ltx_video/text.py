"""LTX-Video prompt encoding: T5-XXL (google/t5-v1_1-xxl, 4096 wide) through the shared `zoo/parts/encoders/t5.py`.

The references differ in whether T5 sees the padding mask:

- diffusers `LTXPipeline` / `LTXImageToVideoPipeline`: 128 tokens, T5 run **without** an attention mask
  (pipeline_ltx.py `self.text_encoder(text_input_ids)`: every token attends to the padding);
- diffusers `LTXConditionPipeline`: 256 tokens, T5 run **with** the mask;
- the official pipeline (Lightricks/LTX-Video `LTXVideoPipeline.encode_prompt`): the prompt stripped,
  256 tokens, T5 with the mask (what the 0.9.5+ models were trained and released with).

`encode_prompts(..., mask_encoder=, strip=)` does any of them (`PRESETS` names them); the tokenizer's
mask always goes to the DiT's cross-attention. The negative prompt defaults differ too: diffusers "",
the official inference "worst quality, inconsistent motion, blurry, jittery, distorted" (`NEGATIVE_PROMPT`).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.tokenizer import Tokenizer

NEGATIVE_PROMPT = "worst quality, inconsistent motion, blurry, jittery, distorted"  # ltx_video/inference.py
# reference -> (max_length, mask_encoder, strip)
PRESETS = {
    "ltx_pipeline": (128, False, False),  # LTXPipeline, LTXImageToVideoPipeline
    "condition_pipeline": (256, True, False),  # LTXConditionPipeline
    "official": (256, True, True),  # Lightricks' LTXVideoPipeline (text_encoder_max_tokens 256)
}


def encode_prompts(model, params, tokenizer: Tokenizer, prompts: Sequence[str], *, max_length: int = 128,
                   mask_encoder: bool = False, strip: bool = False) -> tuple[jax.Array, np.ndarray]:
    """T5 features `[B, max_length, d_model]` (fp32) and the caption mask `[B, max_length]` (int32).

    Args:
      model: the shared `T5EncoderModel`; params: its variables (`{"params": ...}`).
      tokenizer: `load_tokenizer(folder, "tokenizer")` (T5's, `</s>` appended, padded right).
      prompts: the prompts (and negative prompts, batched by the caller).
      max_length: padded and truncated length.
      mask_encoder: pass the padding mask to T5 (LTXConditionPipeline, official) or not (LTXPipeline).
      strip: strip surrounding whitespace first (official).
    """
    texts = [p.strip() for p in prompts] if strip else list(prompts)
    batch = tokenizer(texts, max_length=max_length)
    features = model.apply(params, batch.input_ids, batch.attention_mask if mask_encoder else None).last_hidden_state
    return features.astype(jnp.float32), batch.attention_mask
