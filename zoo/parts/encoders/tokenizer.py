"""Tokenizers loaded from a model folder, without transformers: `tokenizer.json` through the
`tokenizers` library, a CLIP BPE tokenizer saved as `vocab.json` + `merges.txt` only (built as
transformers' `CLIPTokenizer` builds it), a byte-level ByT5 tokenizer, or a T5-style sentencepiece `.model`.

    tok = load_tokenizer("Wan2.1-T2V-1.3B-Diffusers/tokenizer")
    batch = tok(["a red kite"], max_length=512)          # padding="max_length", truncation on
    batch.input_ids, batch.attention_mask                 # int32 [B, 512] each

Padding side, pad token and special-token handling come from the folder's
`tokenizer_config.json` / `special_tokens_map.json` as transformers' `AutoTokenizer` reads them,
so ids and masks equal what the reference pipelines feed their encoders.

A folder's shipped chat template renders as transformers' `apply_chat_template` renders it:

    text = render_chat(read_chat_template(folder), messages, add_generation_prompt=True,
                       specials=special_tokens(folder))
    ids = tok.encode(text, add_special_tokens=False, max_length=None)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from vidax.translator import VidaxError


class TokenizerError(VidaxError, ValueError):
    """A tokenizer folder that cannot be loaded (missing files, unknown tokenizer kind)."""


class Batch(NamedTuple):
    input_ids: np.ndarray  # int32 [B, L]
    attention_mask: np.ndarray  # int32 [B, L], 1 = real token


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json stores special tokens as strings or AddedToken dicts
    return value.get("content") if isinstance(value, dict) else value


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


@dataclass(frozen=True)
class TokenizerSettings:
    """What the folder's configs say about special tokens and padding."""

    pad_token: str | None
    eos_token: str | None
    padding_side: str
    truncation_side: str
    added_tokens: dict[int, dict]  # id -> {content, lstrip, rstrip, ...}
    tokenizer_class: str

    @classmethod
    def read(cls, folder: Path) -> TokenizerSettings:
        config = _read_json(folder / "tokenizer_config.json")
        special = _read_json(folder / "special_tokens_map.json")
        pick = lambda name: _token_text(config.get(name)) or _token_text(special.get(name))  # noqa: E731
        added = {int(k): v for k, v in config.get("added_tokens_decoder", {}).items()}
        # transformers 5 loads a tokenizer.json as is (TokenizersBackend) whatever class the config
        # names, so the sides come from the config alone
        return cls(pick("pad_token"), pick("eos_token"), config.get("padding_side", "right"),
                   config.get("truncation_side", "right"), added, config.get("tokenizer_class", ""))


class Tokenizer:
    """Batch tokenisation with transformers' `padding` / `truncation` semantics.

    Subclasses implement `encode(text, add_special_tokens, max_length)`: ids already truncated to
    `max_length` the way the reference does it (special tokens kept).
    """

    def __init__(self, settings: TokenizerSettings, pad_id: int):
        self.settings, self.pad_id = settings, pad_id

    def encode(self, text: str, add_special_tokens: bool, max_length: int | None) -> list[int]:
        raise NotImplementedError

    def __call__(self, texts: str | Sequence[str], *, max_length: int | None = None, padding: str = "max_length",
                 truncation: bool = True, add_special_tokens: bool = True, padding_side: str | None = None) -> Batch:
        """Tokenise, truncate and pad a batch.

        Args:
          texts: one string or a list of strings.
          max_length: the padded length (`padding="max_length"`) and the truncation length.
          padding: "max_length" or "longest".
          truncation: cut sequences longer than `max_length` (special tokens are kept).
          add_special_tokens: add the tokenizer's EOS/BOS template.
          padding_side: "left" or "right"; default the folder's own setting.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if padding not in ("max_length", "longest"):
            raise TokenizerError(f"padding must be 'max_length' or 'longest', got {padding!r}")
        if padding == "max_length" and max_length is None:
            raise TokenizerError("padding='max_length' needs max_length")
        ids = [self.encode(t, add_special_tokens, max_length if truncation else None) for t in texts]
        length = max_length if padding == "max_length" else max(len(i) for i in ids)
        length = max(length, max(len(i) for i in ids))
        side = padding_side or self.settings.padding_side
        out = np.full((len(ids), length), self.pad_id, np.int32)
        mask = np.zeros((len(ids), length), np.int32)
        for row, seq in enumerate(ids):
            span = slice(length - len(seq), length) if side == "left" else slice(0, len(seq))
            out[row, span], mask[row, span] = seq, 1
        return Batch(out, mask)


class FastTokenizer(Tokenizer):
    """A `tokenizer.json` (or a `tokenizers.Tokenizer` built in memory) run by the `tokenizers` library
    (its post-processor adds special tokens)."""

    def __init__(self, path: Path | Any, settings: TokenizerSettings):
        from tokenizers import Tokenizer as RustTokenizer

        self.backend = RustTokenizer.from_file(str(path)) if isinstance(path, (str, Path)) else path
        self.backend.no_padding()
        self.backend.no_truncation()
        pad = settings.pad_token
        pad_id = self.backend.token_to_id(pad) if pad is not None else None
        super().__init__(settings, 0 if pad_id is None else pad_id)

    def encode(self, text, add_special_tokens, max_length):
        if max_length is None:
            self.backend.no_truncation()
        else:
            self.backend.enable_truncation(max_length, direction=self.settings.truncation_side)
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids


class _SpecialSplitter:
    """Splits text around added tokens, honouring their lstrip/rstrip flags (longest match first)."""

    def __init__(self, added: dict[str, tuple[int, bool, bool]]):
        self.added = added
        names = sorted(added, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, names))) if names else None

    def split(self, text: str) -> list[str | int]:
        if self.pattern is None:
            return [text]
        pieces: list[str | int] = []
        pos = 0
        for m in self.pattern.finditer(text):
            token_id, lstrip, rstrip = self.added[m.group()]
            before = text[pos:m.start()]
            pieces += [before.rstrip() if lstrip else before, token_id]
            pos = m.end()
            if rstrip:
                while pos < len(text) and text[pos].isspace():
                    pos += 1
        return [p for p in pieces + [text[pos:]] if p != ""]


class ByteTokenizer(Tokenizer):
    """ByT5: UTF-8 bytes offset by 3 (pad 0, eos 1, unk 2), EOS appended; added tokens by name."""

    OFFSET = 3

    def __init__(self, settings: TokenizerSettings):
        added = {token["content"]: (token_id, bool(token.get("lstrip")), bool(token.get("rstrip")))
                 for token_id, token in settings.added_tokens.items()}
        added = added or {"<pad>": (0, True, True), "</s>": (1, True, True), "<unk>": (2, True, True)}
        self.splitter = _SpecialSplitter(added)
        self.eos_id = added.get(settings.eos_token or "</s>", (1,))[0]
        super().__init__(settings, added.get(settings.pad_token or "<pad>", (0,))[0])

    def with_added_tokens(self, names: Sequence[str]) -> ByteTokenizer:
        """A copy that also knows `names` as single special tokens, numbered after the existing vocabulary
        (transformers' `add_tokens(names, special_tokens=True)`; HunyuanVideo-1.5's official ByT5 adds
        its `<color-N>` / `<xx-font-N>` tokens this way)."""
        added = dict(self.splitter.added)
        next_id = max(256 + self.OFFSET, max(i for i, _, _ in added.values()) + 1)
        for name in names:
            if name not in added:
                added[name] = (next_id, False, False)
                next_id += 1
        settings = dataclasses.replace(self.settings, added_tokens={
            i: {"content": n, "lstrip": l, "rstrip": r} for n, (i, l, r) in added.items()})
        return ByteTokenizer(settings)

    def encode(self, text, add_special_tokens, max_length):
        ids: list[int] = []
        for piece in self.splitter.split(text):
            ids += [piece] if isinstance(piece, int) else [b + self.OFFSET for b in piece.encode("utf-8")]
        return _truncate_then_eos(ids, self.eos_id if add_special_tokens else None, max_length)


class SentencePieceTokenizer(Tokenizer):
    """A T5-style sentencepiece model (`spiece.model`): pieces, then EOS (no BOS)."""

    def __init__(self, path: Path, settings: TokenizerSettings):
        import sentencepiece

        self.backend = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self.eos_id = self.backend.piece_to_id(settings.eos_token or "</s>")
        super().__init__(settings, self.backend.piece_to_id(settings.pad_token or "<pad>"))

    def encode(self, text, add_special_tokens, max_length):
        ids = self.backend.encode(text)
        return _truncate_then_eos(ids, self.eos_id if add_special_tokens else None, max_length)


def _truncate_then_eos(ids: list[int], eos: int | None, max_length: int | None) -> list[int]:
    if eos is not None and (not ids or ids[-1] != eos):
        budget = None if max_length is None else max_length - 1
        return ids[:budget] + [eos]
    return ids if max_length is None else ids[:max_length]


_SENTENCEPIECE_FILES = ("spiece.model", "tokenizer.model", "sentencepiece.bpe.model")

# transformers 5 `CLIPTokenizer`'s pre-tokenizer split (the special tokens, contractions, letter runs,
# single digits, other non-space runs)
_CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def clip_bpe_tokenizer(root: Path, settings: TokenizerSettings) -> FastTokenizer:
    """A CLIP tokenizer from `vocab.json` + `merges.txt`, as transformers' `CLIPTokenizer` builds it when a
    folder has no `tokenizer.json` (openai/clip-vit-large-patch14's slow files; HunyuanVideo's diffusers
    mirror ships its `tokenizer_2/` so): byte-level BPE with the `</w>` word suffix, NFC + whitespace
    collapse + lowercase, `<|startoftext|> ... <|endoftext|>` around each text."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as RustTokenizer

    config = _read_json(root / "tokenizer_config.json")
    special = _read_json(root / "special_tokens_map.json")
    pick = lambda name, default: _token_text(config.get(name)) or _token_text(special.get(name)) or default  # noqa: E731
    bos, eos = pick("bos_token", "<|startoftext|>"), pick("eos_token", "<|endoftext|>")
    unk, pad = pick("unk_token", "<|endoftext|>"), pick("pad_token", "<|endoftext|>")
    vocab, merges = models.BPE.read_file(str(root / "vocab.json"), str(root / "merges.txt"))
    tok = RustTokenizer(models.BPE(vocab, merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="</w>",
                                   fuse_unk=False, unk_token=unk))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(t["content"], special=bool(t.get("special", True)), lstrip=bool(t.get("lstrip")),
                        rstrip=bool(t.get("rstrip")), normalized=bool(t.get("normalized", False)))
             for _, t in sorted(settings.added_tokens.items())]
    named = [AddedToken(t, special=True, normalized=False) for t in dict.fromkeys((bos, eos, unk, pad))]
    tok.add_special_tokens(added + named)
    missing = [t for t in (bos, eos) if tok.token_to_id(t) is None]
    if missing:
        raise TokenizerError(f"{root}: vocab.json has no {', '.join(missing)}")
    tok.post_processor = processors.RobertaProcessing((eos, tok.token_to_id(eos)), (bos, tok.token_to_id(bos)),
                                                      trim_offsets=False, add_prefix_space=False)
    return FastTokenizer(tok, dataclasses.replace(settings, pad_token=pad))


def load_tokenizer(folder: str | Path, subfolder: str | None = None) -> Tokenizer:
    """The tokenizer stored in a model folder.

    `tokenizer.json` wins when present; a `CLIPTokenizer` config with `vocab.json` + `merges.txt`
    builds CLIP's BPE; a `ByT5Tokenizer` config selects the byte tokenizer; a lone sentencepiece
    model is read as T5 reads it.

    Args:
      folder: the tokenizer folder, or a model root with `subfolder`.
      subfolder: e.g. "tokenizer" or "tokenizer_2" in a diffusers repo.

    Raises:
      TokenizerError: nothing loadable in the folder.
    """
    root = Path(folder) / subfolder if subfolder else Path(folder)
    if not root.is_dir():
        raise TokenizerError(f"{root}: tokenizer folder not found")
    settings = TokenizerSettings.read(root)
    if (root / "tokenizer.json").is_file():
        return FastTokenizer(root / "tokenizer.json", settings)
    if settings.truncation_side != "right":
        raise TokenizerError(f"{root}: truncation_side {settings.truncation_side!r} needs a tokenizer.json")
    if settings.tokenizer_class.startswith("ByT5"):
        return ByteTokenizer(settings)
    if settings.tokenizer_class.startswith("CLIPTokenizer") and (root / "vocab.json").is_file() \
            and (root / "merges.txt").is_file():
        return clip_bpe_tokenizer(root, settings)
    for name in _SENTENCEPIECE_FILES:
        if (root / name).is_file():
            return SentencePieceTokenizer(root / name, settings)
    raise TokenizerError(f"{root}: no tokenizer.json, CLIP vocab.json + merges.txt, ByT5 tokenizer_config.json "
                         "or sentencepiece model found")


# Qwen2.5's chat template rendered for the (system, user) messages the video pipelines send,
# with the generation prompt appended (transformers' apply_chat_template(add_generation_prompt=True)).
QWEN_CHAT = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def qwen_chat_prompt(system: str, user: str) -> str:
    """The text Qwen2.5's chat template makes of one system and one user message (empty user -> " ")."""
    return QWEN_CHAT.format(system=system, user=user or " ")


# --- chat templates ------------------------------------------------------------------------------
# A tokenizer folder's own chat template, rendered as transformers' `apply_chat_template` renders it,
# without transformers: rendering the shipped template (rather than a copy of its text) keeps ids equal
# to the reference pipelines' for whichever tokenizer a checkpoint ships (Qwen2.5-VL's for
# Cosmos-Predict2.5's Reason1 encoder; Qwen3-VL's or Nemotron's inside Cosmos3). The environment is the
# one transformers compiles templates in (sandboxed, `trim_blocks`, `lstrip_blocks`, loop controls,
# `raise_exception`, `tojson`, `strftime_now`), and the template sees the tokenizer's special tokens by
# name, as there. Tokenise the rendered text without added special tokens (the template writes them).

_SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class ChatTemplateError(TokenizerError):
    """A tokenizer folder without a usable chat template."""


def read_chat_template(folder: str | Path, name: str = "default") -> str:
    """The chat template a tokenizer folder ships (`chat_template.jinja`, `chat_template.json` or the
    `chat_template` entry of `tokenizer_config.json`, a string or a list of named templates)."""
    root = Path(folder)
    if (root / "chat_template.jinja").is_file():
        return (root / "chat_template.jinja").read_text(encoding="utf-8")
    for path in (root / "chat_template.json", root / "tokenizer_config.json"):
        if not path.is_file():
            continue
        template = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):
            template = {t["name"]: t["template"] for t in template}.get(name)
        if template:
            return template
    raise ChatTemplateError(f"{root}: no chat template (chat_template.jinja, chat_template.json or "
                            "tokenizer_config.json's chat_template)")


def special_tokens(folder: str | Path) -> dict[str, str]:
    """The named special tokens a template may refer to (`{{ eos_token }}`), from the folder's configs."""
    root = Path(folder)
    out: dict[str, str] = {}
    for path in (root / "special_tokens_map.json", root / "tokenizer_config.json"):
        if path.is_file():
            config = json.loads(path.read_text(encoding="utf-8"))
            for name in _SPECIAL_TOKEN_NAMES:
                value = config.get(name)
                value = value.get("content") if isinstance(value, dict) else value
                if isinstance(value, str):
                    out.setdefault(name, value)
    return out


@functools.lru_cache(maxsize=16)
def _compile(template: str):
    try:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as err:  # jinja2 comes with transformers; vidax needs it only for chat templates
        raise ChatTemplateError("rendering a chat template needs jinja2 (pip install jinja2)") from err

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def render_chat(template: str, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool,
                specials: dict[str, str] | None = None, **kwargs: Any) -> str:
    """The text `tokenizer.apply_chat_template(messages, tokenize=False, ...)` produces.

    Args:
      template: the Jinja chat template (`read_chat_template`).
      messages: `[{"role": ..., "content": str or [{"type": "text", "text": ...}]}]`.
      add_generation_prompt: append the assistant header.
      specials: the tokenizer's named special tokens (`special_tokens(folder)`).
      **kwargs: further template variables (`add_vision_id=False`, ...).
    """
    return _compile(template).render(messages=list(messages), tools=None, documents=None,
                                     add_generation_prompt=add_generation_prompt, **{**(specials or {}), **kwargs})
