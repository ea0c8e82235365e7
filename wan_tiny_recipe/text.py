"""The word-level tokenizer (made with `tokenizers`) and Wan's text features as the zoo computes them:
UMT5 over the prompt's tokens with its mask, zero past the prompt, padded to 512 tokens."""

from __future__ import annotations

import json
from pathlib import Path

from wan_tiny_recipe import data
from wan_tiny_recipe.models import MAX_TEXT

SPECIALS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2


def build_tokenizer(folder: Path | None = None):
    """The grammar's words after T5's specials; `</s>` closes every prompt. Saved when `folder` is given."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(SPECIALS + data.vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # words, and punctuation as words of its own
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tok.save(str(folder / "tokenizer.json"))
        config = {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
                  "padding_side": "right", "model_max_length": MAX_TEXT}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return tok


def token_batch(tok, prompts: list[str]):
    """`(ids, mask)` int64 arrays `[B, L]`, L the longest prompt (padding with <pad>)."""
    import numpy as np

    encoded = [tok.encode(p).ids for p in prompts]
    length = max(len(e) for e in encoded)
    ids = np.zeros((len(prompts), length), np.int64)
    mask = np.zeros_like(ids)
    for row, e in enumerate(encoded):
        ids[row, :len(e)] = e
        mask[row, :len(e)] = 1
    return ids, mask


def text_features(torch, encoder, ids, mask, max_text: int = MAX_TEXT):
    """`[B, max_text, D]`: masked UMT5 features zeroed past each prompt (attention never crosses the mask,
    so the short batch gives the same features as the zoo's `max_sequence_length` one), then zero padded."""
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    features = encoder(input_ids=ids, attention_mask=mask).last_hidden_state * mask[..., None]
    return torch.nn.functional.pad(features, (0, 0, 0, max_text - features.shape[1]))


def compact_text(torch, encoder, ids, mask, max_text: int = MAX_TEXT):
    """Wan's `max_text`-token features (512 unless the model's `max_sequence_length` says less) without
    the padding: `(features [B, L + 1, D], bias [B, 1, 1, L + 1])`.

    Past each prompt every row is zero, so every padding key and value is the same vector; attending
    to n equal keys is attending to one of them with log(n) added to its logit. The compact batch
    keeps the prompt's rows and at least one zero row, and the bias gives the zero rows of a prompt
    of length l the weight of the 512 - l the zoo attends to (see `CompactCrossAttention`).
    """
    import numpy as np

    features = text_features(torch, encoder, ids, mask, max_text)[:, : ids.shape[1] + 1]
    lengths = mask.sum(axis=1)
    zero_rows = features.shape[1] - lengths
    extra = np.log((max_text - lengths) / zero_rows).astype(np.float32)
    columns = np.arange(features.shape[1])[None, :]
    bias = np.where(columns >= lengths[:, None], extra[:, None], 0.0).astype(np.float32)
    return features, torch.from_numpy(bias[:, None, None, :])


def use_compact_text(dit):
    """Swap each block's cross-attention processor for one that adds the bias `set_bias` holds."""
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor

    class CompactCrossAttention(WanAttnProcessor):
        bias = None

        def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
            return super().__call__(attn, hidden_states, encoder_hidden_states, CompactCrossAttention.bias, rotary_emb)

    for block in dit.blocks:
        block.attn2.processor = CompactCrossAttention()
    return CompactCrossAttention
