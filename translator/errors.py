"""The translator's exception types: every fault a user can hit is one of these, with a one-line message."""

from __future__ import annotations


class VidaxError(Exception):
    """Base of every error vidax raises for a request it cannot honour (bad input, missing file,
    unknown model, a checkpoint or setting it cannot use). The CLIs print these as one line; any
    other exception is a bug and keeps its traceback."""


class TranslatorError(VidaxError):
    """Base class: a checkpoint, spec, source or output problem, described in one line."""


class SpecError(TranslatorError):
    """A conversion spec is malformed (unknown op, bad template, dtype typo, dead or clashing rule)."""


class FormatError(TranslatorError):
    """A checkpoint file is malformed or unsafe (names the file and, where known, the tensor)."""


class SourceError(TranslatorError):
    """A source cannot be resolved: missing file or folder, unknown model, no layout matches."""


class GatedRepoError(SourceError):
    """A Hub repo refuses downloads until its terms are accepted (and HF_TOKEN names the account)."""


class AccountingError(TranslatorError):
    """Source keys, rules and target leaves do not account for each other; lists every violation."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = f"{len(self.problems)} accounting problem(s): "
        super().__init__(head + "; ".join(self.problems))


class OutputError(TranslatorError):
    """A converted tree cannot be written or read back (disk full, incomplete or corrupt output)."""


def clip(text: str, limit: int = 160) -> str:
    """`text` as one line of at most `limit` characters (for messages quoting untrusted input)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def brief(value: object, limit: int = 80) -> str:
    """A short one-line repr of an untrusted value: never recursive, huge or failing (a 5,000-digit
    int, a list nested 100,000 deep and a 100 MB string all come out as a few dozen characters)."""
    return clip(_short_repr(value, 2), limit)


def _short_repr(value: object, depth: int) -> str:
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 128 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, (str, bytes)):
        return repr(value[:200]) + ("..." if len(value) > 200 else "")
    if isinstance(value, (list, tuple)) and depth > 0:
        items = [_short_repr(v, depth - 1) for v in value[:8]] + (["..."] if len(value) > 8 else [])
        return ("[{}]" if isinstance(value, list) else "({})").format(", ".join(items))
    return f"<{type(value).__name__}>"


def describe(err: BaseException) -> str:
    """`Type: message` of an exception raised while parsing untrusted input, clipped to one line."""
    try:
        text = str(err)
    except Exception:  # an argument whose str() fails (a huge int, a deep structure)
        text = ""
    return clip(f"{type(err).__name__}: {text}" if text else type(err).__name__)
