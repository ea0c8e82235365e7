"""CogVideoX prompt encoding (follows diffusers `CogVideoXPipeline.encode_prompt` / `_get_t5_prompt_embeds`).

T5-XXL (`vidax.zoo.parts.encoders.t5`, spec `encoders/t5`) reads each prompt tokenised to exactly 226
tokens (padding to 226, truncation, the closing `</s>`), **with no attention mask**: the pipeline
calls the encoder with the ids alone, so padded positions attend and are attended to, and the DiT
receives all 226 rows (the pad rows are not zero). The model was trained that way; masking the
padding here would change the conditioning. The encoder runs in fp32: its residual stream reaches
~1e5 over the padding and bf16 drifts the features far from the reference's.

Without a negative prompt, classifier-free guidance encodes the empty string (diffusers'
`negative_prompt or ""`); no prompt cleaning is applied (the pipeline applies none).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
from vidax.zoo.parts.encoders.t5 import T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import Tokenizer
from vidax.zoo.parts.encoders.common import by_layer

MAX_SEQUENCE_LENGTH = 226  # the pipelines' `max_sequence_length`; the DiT's max_text_seq_length


@by_layer
def _run_t5(encoder: T5EncoderModel, params: Any, ids: jax.Array) -> jax.Array:
    return encoder.apply({"params": params}, ids, None).last_hidden_state


def t5_features(encoder: T5EncoderModel, params: Any, tokenizer: Tokenizer, prompts: Sequence[str], *,
                max_length: int = MAX_SEQUENCE_LENGTH) -> jax.Array:
    """T5 features `[B, max_length, d_model]` of `prompts`, unmasked (diffusers `_get_t5_prompt_embeds`).

    Args:
      encoder: a `T5EncoderModel` (fp32 as the reference needs); params its `params` tree.
      tokenizer: the repo's `tokenizer/` (`load_tokenizer(root, "tokenizer")`).
      prompts: the prompts, used as given.
      max_length: tokens per prompt (226 for every CogVideoX release).
    """
    batch = tokenizer(list(prompts), max_length=max_length, padding="max_length", truncation=True,
                      add_special_tokens=True)
    return _run_t5(encoder, params, jnp.asarray(batch.input_ids))


def encode_prompt(encoder: T5EncoderModel, params: Any, tokenizer: Tokenizer, prompt: str | Sequence[str],
                  negative_prompt: str | Sequence[str] | None = None, *, guidance: bool = True,
                  max_length: int = MAX_SEQUENCE_LENGTH) -> tuple[jax.Array, jax.Array | None]:
    """`(prompt_embeds, negative_prompt_embeds)` as diffusers `CogVideoXPipeline.encode_prompt` returns them.

    Args:
      encoder, params, tokenizer: as for `t5_features`.
      prompt: one prompt or a batch.
      negative_prompt: one per prompt (a string is repeated); None encodes "" as the reference does.
      guidance: whether classifier-free guidance runs (the reference: `guidance_scale > 1`); without
        it no negative features are computed (None).
      max_length: tokens per prompt.
    """
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    cond = t5_features(encoder, params, tokenizer, prompts, max_length=max_length)
    if not guidance:
        return cond, None
    negative = negative_prompt or ""
    negatives = [negative] * len(prompts) if isinstance(negative, str) else list(negative)
    if len(negatives) != len(prompts):
        raise ValueError(f"negative_prompt has {len(negatives)} entries for {len(prompts)} prompts")
    return cond, t5_features(encoder, params, tokenizer, negatives, max_length=max_length)
