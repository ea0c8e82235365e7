"""Prompt-side conventions of the reference pipelines that feed the shared encoders.

Wan (diffusers `WanPipeline`): the prompt is cleaned (ftfy when installed, HTML entities undone
twice, whitespace runs collapsed), tokenised to 512 tokens, run through UMT5 with its mask, and
each row's features past its token count are zeroed.

HunyuanVideo-1.5 (diffusers `HunyuanVideo15Pipeline`): the Qwen2.5-VL text tower reads the prompt
inside a (system, user) chat rendered with the generation prompt, padded to
`max_length + crop_start`, and the pipeline keeps `hidden_states[-(skip + 1)]` (skip 2: the third
from last) from token `crop_start` (108) on, with the mask cropped alike. Its ByT5 glyph encoder
reads only the quoted spans of the prompt, rewritten as `Text "..."` sentences; a prompt without
quotes gets zero features and a zero mask.
"""

from __future__ import annotations

import html
import re
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from vidax.zoo.encoders.tokenizer import Tokenizer, qwen_chat_prompt

_QUOTED = re.compile(r'"(.*?)"|“(.*?)”')  # straight or curly double quotes, shortest span


def wan_prompt_clean(text: str) -> str:
    """Wan's prompt cleaning: ftfy's text repair (if installed), HTML unescaped twice, whitespace collapsed."""
    try:
        import ftfy

        text = ftfy.fix_text(text)
    except ImportError:
        pass
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def wan_text_features(model, params, tokenizer: Tokenizer, prompts: Sequence[str], *, max_length: int = 512):
    """Wan's UMT5 features `[B, max_length, D]`: zero past each prompt's token count.

    Args:
      model: a `T5EncoderModel` (UMT5); params its variables.
      tokenizer: `load_tokenizer(repo, "tokenizer")`.
      prompts: raw prompts (cleaned here as the reference does).
      max_length: the reference's `max_sequence_length` (512).
    """
    batch = tokenizer([wan_prompt_clean(p) for p in prompts], max_length=max_length)
    features = model.apply(params, batch.input_ids, batch.attention_mask).last_hidden_state
    keep = jnp.arange(max_length)[None, :] < batch.attention_mask.sum(axis=1)[:, None]
    return jnp.where(keep[..., None], features, 0)


def glyph_text(prompt: str) -> str | None:
    """The ByT5 input HunyuanVideo-1.5 makes of a prompt: `Text "a". Text "b". `, or None without quotes.

    Repeated spans are kept once (first occurrence order) when there are several.
    """
    spans = [straight or curly for straight, curly in _QUOTED.findall(prompt)]
    if len(spans) > 1:
        spans = list(dict.fromkeys(spans))
    if not spans:
        return None
    return ". ".join(f'Text "{span}"' for span in spans) + ". "


def mllm_text_features(model, params, tokenizer: Tokenizer, prompts: Sequence[str], system: str, *,
                       max_length: int = 1000, crop_start: int = 108, skip_layers: int = 2):
    """HunyuanVideo-1.5's text-tower features: `(features [B, max_length, D], mask [B, max_length])`.

    Args:
      model: a `DecoderTextModel` (the Qwen2.5-VL text tower); params its variables.
      tokenizer: the text tower's tokenizer (`load_tokenizer(repo, "tokenizer")`).
      prompts: user prompts; an empty prompt becomes " " as in the reference.
      system: the pipeline's system message.
      max_length: tokens kept after the crop (the reference's `tokenizer_max_length`).
      crop_start: template tokens dropped from the front.
      skip_layers: hidden states skipped from the end (2 -> `hidden_states[-3]`).
    """
    batch = tokenizer([qwen_chat_prompt(system, p) for p in prompts], max_length=max_length + crop_start)
    out = model.apply(params, batch.input_ids, batch.attention_mask)
    features = out.hidden_states[-(skip_layers + 1)][:, crop_start:]
    return features, jnp.asarray(batch.attention_mask[:, crop_start:])


def glyph_features(model, params, tokenizer: Tokenizer, prompts: Sequence[str], *, max_length: int = 256):
    """HunyuanVideo-1.5's ByT5 features: `(features [B, max_length, D], mask [B, max_length])`, zeros without quotes.

    Args:
      model: a `T5EncoderModel` (ByT5); params its variables.
      tokenizer: the ByT5 tokenizer (`load_tokenizer(repo, "tokenizer_2")`).
      prompts: user prompts.
      max_length: the reference's `tokenizer_2_max_length`.
    """
    features, masks = [], []
    for prompt in prompts:
        text = glyph_text(prompt)
        if text is None:
            features.append(jnp.zeros((1, max_length, model.config.d_model), model.dtype))
            masks.append(np.zeros((1, max_length), np.int32))
            continue
        batch = tokenizer([text], max_length=max_length)
        features.append(model.apply(params, batch.input_ids, batch.attention_mask).last_hidden_state)
        masks.append(batch.attention_mask)
    return jnp.concatenate(features), jnp.asarray(np.concatenate(masks))
