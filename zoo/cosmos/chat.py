"""Chat templates as transformers' `apply_chat_template` renders them, without transformers.

The Cosmos pipelines tokenise prompts through the tokenizer folder's own chat template (Qwen2.5-VL's
for Predict2.5's Reason1 encoder; Qwen3-VL's or Nemotron's inside Cosmos3): rendering the shipped
template, rather than a copy of its text, keeps vidax's ids equal to the reference's for whichever
tokenizer a checkpoint ships. The environment is the one transformers compiles templates in
(sandboxed, `trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `tojson`), and the
template sees the tokenizer's special tokens by name, as there. The rendered text is then tokenised
without added special tokens (the template writes them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from vidax.zoo.encoders.tokenizer import TokenizerError

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


@lru_cache(maxsize=16)
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
