"""Wan's prompt conventions (diffusers `WanPipeline`): the prompt is cleaned (ftfy's text repair,
HTML entities undone twice, whitespace runs collapsed), tokenised to 512 tokens, run through UMT5
with its mask, and each row's features past its token count are zeroed.
"""

from __future__ import annotations

import html
import re
from typing import Sequence

import jax
import jax.numpy as jnp

from vidax.zoo.parts.encoders.tokenizer import Tokenizer
from vidax.zoo.parts.encoders.common import by_layer

MAX_SEQUENCE_LENGTH = 512  # the reference pads every prompt to 512 tokens (I2V splits text from image by it)


def wan_prompt_clean(text: str) -> str:
    """Wan's prompt cleaning: ftfy's text repair, HTML unescaped twice, whitespace collapsed."""
    import ftfy

    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def wan_text_features(model, params, tokenizer: Tokenizer, prompts: Sequence[str], *,
                      max_length: int = MAX_SEQUENCE_LENGTH):
    """Wan's UMT5 features `[B, max_length, D]`: zero past each prompt's token count.

    Args:
      model: a `T5EncoderModel` (UMT5); params its variables (`{"params": tree}`).
      tokenizer: `load_tokenizer(repo, "tokenizer")`.
      prompts: raw prompts (cleaned here as the reference does).
      max_length: the reference's `max_sequence_length` (512).
    """
    batch = tokenizer([wan_prompt_clean(p) for p in prompts], max_length=max_length)
    return _encode(model, params, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask))


@by_layer
def _encode(model, params, ids: jax.Array, mask: jax.Array) -> jax.Array:
    features = model.apply(params, ids, mask).last_hidden_state
    keep = jnp.arange(ids.shape[1])[None, :] < mask.sum(axis=1)[:, None]  # the reference zeroes past the prompt
    return jnp.where(keep[..., None], features, 0)
