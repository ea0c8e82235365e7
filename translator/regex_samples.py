"""Example strings that a regular expression matches, for the spec linter.

The linter cannot decide regex emptiness or overlap in general; it generates a few strings each
pattern matches (every alternation branch, repeats at their minimum and one more) and checks them
against the other patterns. Constructs it cannot sample (lookarounds, back-references) yield no
samples, so the linter stays silent rather than guessing.
"""

from __future__ import annotations

import functools
import itertools
import re
import re._constants as C  # noqa: N812 - the stdlib's own alias
import re._parser as sre_parse

_CAP = 64
_CATEGORY_CHAR = {C.CATEGORY_DIGIT: "0", C.CATEGORY_WORD: "a", C.CATEGORY_SPACE: " "}
_CANDIDATES = "a0_.xZ-/ "


class _Unsupported(Exception):
    pass


def _char_in(items) -> str:
    negate = any(op is C.NEGATE for op, _ in items)
    if negate:
        for ch in _CANDIDATES:
            if not _in_set(ch, items):
                return ch
        raise _Unsupported
    for op, arg in items:
        if op is C.LITERAL:
            return chr(arg)
        if op is C.RANGE:
            return chr(arg[0])
        if op is C.CATEGORY and arg in _CATEGORY_CHAR:
            return _CATEGORY_CHAR[arg]
    raise _Unsupported


def _in_set(ch: str, items) -> bool:
    for op, arg in items:
        if op is C.LITERAL and ch == chr(arg):
            return True
        if op is C.RANGE and arg[0] <= ord(ch) <= arg[1]:
            return True
        if op is C.CATEGORY and _CATEGORY_CHAR.get(arg) == ch:
            return True
    return False


def _seq(items) -> list[str]:
    out = [""]
    for op, arg in items:
        options = _node(op, arg)
        out = [a + b for a, b in itertools.islice(itertools.product(out, options), _CAP)]
    return out


def _node(op, arg) -> list[str]:
    if op is C.LITERAL:
        return [chr(arg)]
    if op is C.NOT_LITERAL:
        return [next(c for c in _CANDIDATES if ord(c) != arg)]
    if op is C.ANY:
        return ["a"]
    if op is C.IN:
        return [_char_in(arg)]
    if op is C.AT:
        return [""]
    if op is C.SUBPATTERN:
        return _seq(arg[3])
    if op is C.BRANCH:
        return [s for branch in arg[1] for s in _seq(branch)][:_CAP]
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        low, _high, body = arg
        inner = _seq(body)
        counts = [low, low + 1] if _high is C.MAXREPEAT or _high > low else [low]
        return [s * n for n in counts for s in inner][:_CAP]
    raise _Unsupported


@functools.lru_cache(maxsize=4096)  # the linter asks again for every pair of rules, and every load lints
def samples(pattern: str) -> tuple[str, ...]:
    """Strings that `pattern` fully matches; empty when the pattern uses unsupported constructs."""
    try:
        candidates = _seq(sre_parse.parse(pattern))
    except _Unsupported:
        return ()
    compiled = re.compile(pattern)
    return tuple(s for s in dict.fromkeys(candidates) if compiled.fullmatch(s))


@functools.lru_cache(maxsize=4096)
def can_sample(pattern: str) -> bool:
    """Whether `samples` understands every construct of `pattern` (then no sample means no match)."""
    try:
        _seq(sre_parse.parse(pattern))
    except _Unsupported:
        return False
    return True
