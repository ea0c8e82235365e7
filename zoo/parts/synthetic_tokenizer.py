"""Stand-in tokenizers for synthetic folders (`vidax-convert MODEL --synthetic`): the real tokenizers'
files are downloads, so a synthetic folder gets a tokenizer of the same kind, loadable by
`vidax.zoo.parts.encoders.tokenizer.load_tokenizer`, with exactly as many ids as the text encoder's embedding
table has rows. It splits prompts into lowercase letters, digits and punctuation (any other character is
`<unk>`); the rest of the vocabulary is filler pieces no prompt produces. The ids are real ids of the
table, the text they stand for is not the real tokenizer's: synthetic weights carry no meaning anyway.

Kinds: T5's (UMT5, T5, ByT5: `</s>` appended); the chat decoders' (Llama 3 and LLaVA, Qwen2.5-VL, Gemma 3),
whose prompt templates' markers (`<|start_header_id|>`, `<|im_start|>`, `<start_of_turn>`, `<image>`...) are
special tokens at the ids the real tokenizers give them, with a chat template where a family renders one; and
CLIP's (`<|startoftext|>` and `<|endoftext|>`, the highest id, around each prompt, as the pooled output needs).
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


# The special tokens of each chat decoder's real tokenizer at their real ids (what its prompt templates write),
# which of them begins each text and ends it, and which pads.
CHAT_KINDS: dict[str, dict] = {
    "llama": {"specials": {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|start_header_id|>": 128006,
                           "<|end_header_id|>": 128007, "<|eot_id|>": 128009},
              "bos": "<|begin_of_text|>", "eos": "<|end_of_text|>", "pad": "<|end_of_text|>", "class": "PreTrainedTokenizerFast"},
    "qwen": {"specials": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                          "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655,
                          "<|video_pad|>": 151656},
             "bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>", "class": "Qwen2TokenizerFast"},
    "gemma": {"specials": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 106, "<end_of_turn>": 107},
              "bos": "<bos>", "eos": "<eos>", "pad": "<pad>", "class": "GemmaTokenizerFast"},
}

# A chat template of the Qwen kind's shape (a message's content a string or a list of text items): the families
# that render the folder's template (Cosmos-Predict2.5's Reason1 prompt) find one.
QWEN_STYLE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _pieces(vocab_size: int, specials: Mapping[str, int]) -> list[str]:
    """`vocab_size` pieces: the specials at their ids, the prompt characters (and newline) at the lowest free
    ids, filler pieces no prompt produces everywhere else."""
    pieces = [f"<synthetic_{i}>" for i in range(vocab_size)]
    for token, at in specials.items():
        if at >= vocab_size:
            raise ValueError(f"{token} has id {at}, the encoder has {vocab_size} ids")
        pieces[at] = token
    free = (i for i in range(vocab_size) if i not in set(specials.values()))
    for piece in ["▁", *(f"▁{c}" for c in string.ascii_lowercase), *_CHARACTERS, "\n", "<unk>"]:
        if piece not in specials:
            pieces[next(free)] = piece
    return pieces


def _unigram_files(pieces: list[str], specials: Mapping[str, int], *, begin: str | None, end: str | None,
                   config: dict) -> dict[str, str]:
    """`tokenizer.json` (a Unigram model over `pieces`, the specials matched whole, `begin`/`end` around each
    text), `tokenizer_config.json` (`config`, marked synthetic) and `special_tokens_map.json`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    scores = [(p, -1.0 if len(p) == 1 or p == "\n" else -0.5 if p.startswith("▁") and len(p) == 2 else -100.0)
              for p in pieces]
    tok = Tokenizer(models.Unigram(scores, unk_id=pieces.index("<unk>"), byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    around = [t for t in (begin, end) if t]
    if around:
        single = " ".join([*([begin] if begin else []), "$A", *([end] if end else [])])
        pair = " ".join([*([begin] if begin else []), "$A", "$B", *([end] if end else [])])
        tok.post_processor = processors.TemplateProcessing(single=single, pair=pair,
                                                           special_tokens=[(t, specials[t]) for t in around])
    config = {**config, "synthetic": True}
    named = {k: config[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if config.get(k)}
    return {"tokenizer.json": tok.to_str(), "tokenizer_config.json": json.dumps(config, indent=1) + "\n",
            "special_tokens_map.json": json.dumps(named, indent=1) + "\n"}


def chat_tokenizer_files(kind: str, vocab_size: int, extra: Mapping[str, int] | None = None) -> dict[str, str]:
    """A chat decoder's stand-in (`kind`: "llama", "qwen" or "gemma"): its template markers at their real ids
    (`extra`: more, as LLaVA's `<image>`), its `<bos>` before each text where the real one adds it."""
    spec = CHAT_KINDS[kind]
    specials = {**spec["specials"], **(extra or {})}
    config = {"tokenizer_class": spec["class"], "bos_token": spec["bos"], "eos_token": spec["eos"],
              "pad_token": spec["pad"], "padding_side": "right", "model_max_length": 131072}
    if kind == "qwen":
        config["chat_template"] = QWEN_STYLE_CHAT_TEMPLATE
    return _unigram_files(_pieces(vocab_size, specials), specials, begin=spec["bos"], end=None, config=config)


def clip_tokenizer_files(vocab_size: int) -> dict[str, str]:
    """CLIP's stand-in: `<|startoftext|>` and `<|endoftext|>` (the two highest ids, as CLIP's) around each prompt,
    padded with `<|endoftext|>`, at most 77 tokens."""
    specials = {"<|startoftext|>": vocab_size - 2, "<|endoftext|>": vocab_size - 1}
    config = {"tokenizer_class": "CLIPTokenizer", "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>", "unk_token": "<unk>", "padding_side": "right", "model_max_length": 77}
    return _unigram_files(_pieces(vocab_size, specials), specials, begin="<|startoftext|>", end="<|endoftext|>",
                          config=config)


def _text_config(config: Mapping) -> Mapping:
    """The language model's part of a multimodal encoder's config (Gemma 3's, LLaVA's `text_config`)."""
    return config.get("text_config") or config


def _decoder_kind(config: Mapping) -> str:
    model_type = str(_text_config(config).get("model_type") or config.get("model_type", ""))
    for kind in ("llama", "qwen", "gemma"):
        if model_type.startswith(kind):
            return kind
    raise ValueError(f"no stand-in tokenizer for a {model_type or 'decoder'} text encoder")


# text encoder spec -> the builder of its tokenizer's files from the encoder's config.json
TOKENIZERS: dict[str, Callable[[Mapping], dict[str, str]]] = {
    "encoders/umt5": lambda config: t5_tokenizer_files(int(config["vocab_size"])),
    "encoders/t5": lambda config: t5_tokenizer_files(int(config["vocab_size"])),
    "encoders/decoder": lambda config: chat_tokenizer_files(_decoder_kind(config), int(config["vocab_size"])),
    "encoders/gemma": lambda config: chat_tokenizer_files("gemma", int(_text_config(config)["vocab_size"])),
    "encoders/llava": lambda config: chat_tokenizer_files(
        "llama", int(_text_config(config)["vocab_size"]), {"<image>": int(config["image_token_index"])}),
    "encoders/clip_text": lambda config: clip_tokenizer_files(int(config["vocab_size"])),
    # a DiT that reads the prompt's token ids itself (no text encoder): its own config gives the vocabulary
    "cosmos3/transformer": lambda config: chat_tokenizer_files("qwen", int(config["vocab_size"])),
}

# The folder of the tokenizer a DiT reads itself (`TOKENIZERS`' DiT specs): Cosmos3's `text_tokenizer/`
DIT_TOKENIZER_FOLDERS = {"cosmos3/transformer": "text_tokenizer"}


def tokenizer_folder(text_encoder: str) -> str:
    """The folder the diffusers layout keeps a text encoder's tokenizer in: `text_encoder_2` -> `tokenizer_2`."""
    return "tokenizer" + text_encoder[len("text_encoder"):]


def write_tokenizer(spec: str, config: Mapping, folder: Path, write: Callable[[Path, str], None]) -> list[str]:
    """The stand-in tokenizer of a `spec` text encoder with `config`, its files written with `write(path, text)`."""
    files = TOKENIZERS[spec](config)
    for name, text in files.items():
        write(Path(folder) / name, text)
    return list(files)
