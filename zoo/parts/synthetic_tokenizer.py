"""Stand-in tokenizers for synthetic folders (`vidax-convert MODEL --synthetic`): the real tokenizers'
files (UMT5's, T5's) are downloads, so a synthetic folder gets a tokenizer of the same kind, loadable by
`vidax.zoo.parts.encoders.tokenizer.load_tokenizer`, with exactly as many ids as the text encoder's embedding
table has rows. It splits prompts into lowercase letters, digits and punctuation (any other character is
`<unk>`); the rest of the vocabulary is filler pieces no prompt produces. The ids are real ids of the
table, the text they stand for is not the real tokenizer's: synthetic weights carry no meaning anyway.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from pathlib import Path

T5_SPECIALS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2
_CHARACTERS = string.ascii_lowercase + string.digits + ".,!?'-:;()"


def t5_style_unigram(vocab: list[tuple[str, float]]):
    """A Unigram tokenizer over `(piece, score)` pairs that splits and ends prompts as T5's does: NFKC and
    lowercase, metaspace pieces, `</s>` (id 1) appended, `<unk>` at id 2."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok


def t5_tokenizer_files(vocab_size: int) -> dict[str, str]:
    """`tokenizer.json`, `tokenizer_config.json` and `special_tokens_map.json` of a T5-style Unigram
    tokenizer (T5's specials and `</s>` appended, metaspace splitting) of exactly `vocab_size` ids."""
    if vocab_size < len(T5_SPECIALS) + 2:
        raise ValueError(f"a T5 tokenizer needs at least {len(T5_SPECIALS) + 2} ids, the encoder has {vocab_size}")
    pieces = T5_SPECIALS + ["▁"] + [f"▁{c}" for c in string.ascii_lowercase] + list(_CHARACTERS)
    pieces = pieces[:vocab_size]
    pieces += [f"<synthetic_{i}>" for i in range(vocab_size - len(pieces))]  # never produced from a prompt
    vocab = [(p, 0.0 if p in T5_SPECIALS else -1.0 if len(p) == 1 else -0.5 if p.startswith("▁") else -100.0)
             for p in pieces]
    tok = t5_style_unigram(vocab)
    config = {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
              "padding_side": "right", "model_max_length": 512, "synthetic": True}
    special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    return {"tokenizer.json": tok.to_str(), "tokenizer_config.json": json.dumps(config, indent=1) + "\n",
            "special_tokens_map.json": json.dumps(special, indent=1) + "\n"}


# text encoder spec -> the builder of its tokenizer's files from the encoder's config.json
TOKENIZERS: dict[str, Callable[[Mapping], dict[str, str]]] = {
    "encoders/umt5": lambda config: t5_tokenizer_files(int(config["vocab_size"])),
    "encoders/t5": lambda config: t5_tokenizer_files(int(config["vocab_size"])),
}


def tokenizer_folder(text_encoder: str) -> str:
    """The folder the diffusers layout keeps a text encoder's tokenizer in: `text_encoder_2` -> `tokenizer_2`."""
    return "tokenizer" + text_encoder[len("text_encoder"):]


def write_tokenizer(spec: str, config: Mapping, folder: Path, write: Callable[[Path, str], None]) -> list[str]:
    """The stand-in tokenizer of a `spec` text encoder with `config`, its files written with `write(path, text)`."""
    files = TOKENIZERS[spec](config)
    for name, text in files.items():
        write(Path(folder) / name, text)
    return list(files)
