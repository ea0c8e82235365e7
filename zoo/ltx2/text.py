"""LTX-2 prompt handling before the connectors: tokens for Gemma and the stacked hidden states.

Tokens (diffusers `LTX2Pipeline._get_gemma_prompt_embeds`): each prompt stripped, tokenised with the
tokenizer's special tokens, truncated and LEFT-padded to 1024 with its mask.

The `<bos>` question. Gemma 3's tokenizer adds `<bos>` itself, so diffusers and Lightricks agree for
LTX-2.0/2.3. Gemma 4's tokenizer does not: diffusers feeds the prompt without `<bos>`, while
Lightricks' own encoder (ltx_core `LTXGemmaTokenizer.tokenize_with_weights`, packages/ltx-core/src/
ltx_core/text_encoders/gemma/tokenizer.py: "Always ensures a leading <bos>: Gemma 3 already emits it
via post_processor; Gemma 4 does not, so we prepend") prepends one, then truncates to 1024 again.
The official code is what LTX-2.5 was trained with, so `bos="official"` is the default here;
`bos="diffusers"` reproduces diffusers' pipeline (the parity tests use both).

Features (`stack_hidden_states`): every hidden state the tower returns (scaled embeddings, each
layer's output, the final-norm output) stacked on the last axis and flattened as
`torch.stack(hidden_states, dim=-1).flatten(2, 3)`: `[B, T, D * (L + 1)]`, D-major.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.tokenizer import Batch, Tokenizer

MAX_LENGTH = 1024  # diffusers' `max_sequence_length` default and ltx_core's TOKENIZER_MAX_LENGTH
BOS_MODES = ("official", "diffusers")


def prompt_tokens(tokenizer: Tokenizer, prompts: str | Sequence[str], *, bos_id: int | None, bos: str = "official",
                  max_length: int = MAX_LENGTH) -> Batch:
    """Left-padded ids and masks `[B, max_length]` for the Gemma tower.

    Args:
      tokenizer: the pipeline's Gemma tokenizer (`load_tokenizer(root, "tokenizer")`).
      prompts: one prompt or a list (each is stripped).
      bos_id: the tokenizer's `<bos>` id (needed by `bos="official"`).
      bos: "official" ensures a leading `<bos>` (Lightricks' encoder), "diffusers" keeps whatever
        the tokenizer's template gives (diffusers' pipeline).
    """
    if bos not in BOS_MODES:
        raise ValueError(f"bos must be one of {BOS_MODES}, got {bos!r}")
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)
    prompts = [p.strip() for p in prompts]
    if bos == "diffusers":
        return tokenizer(prompts, max_length=max_length, padding="max_length", truncation=True,
                         add_special_tokens=True, padding_side="left")
    if bos_id is None:
        raise ValueError("bos='official' needs the tokenizer's <bos> id")
    ids = np.full((len(prompts), max_length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(prompts), max_length), np.int32)
    for row, text in enumerate(prompts):
        seq = tokenizer.encode(text, True, max_length)
        if not seq or seq[0] != bos_id:
            seq = [bos_id, *seq][:max_length]
        ids[row, max_length - len(seq):], mask[row, max_length - len(seq):] = seq, 1
    return Batch(ids, mask)


def stack_hidden_states(hidden_states: jax.Array) -> jax.Array:
    """`[L + 1, B, T, D]` (the tower's `TextOutput.hidden_states`) -> `[B, T, D * (L + 1)]`."""
    stacked = jnp.moveaxis(hidden_states, 0, -1)  # [B, T, D, L + 1]
    return stacked.reshape(*stacked.shape[:2], -1)
