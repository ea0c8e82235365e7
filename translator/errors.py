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
