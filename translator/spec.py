"""Conversion specs: TOML data parsed into frozen rules, and the linter that checks them on load.

The format is documented in conversion_specs/README.md; this module is its executable definition.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from vidax.translator.dtypes import policy_dtype
from vidax.translator.errors import SpecError
from vidax.translator.regex_samples import can_sample, samples

SPECS_ROOT = Path(__file__).resolve().parent.parent / "conversion_specs"
OPS = ("identity", "linear", "conv", "transpose", "reshape", "squeeze", "expand")
_OP_ARGS = {"identity": (), "linear": (), "conv": (), "transpose": ("perm",), "reshape": ("shape",),
            "squeeze": ("axis",), "expand": ("axis",)}
_RULE_KEYS = {"match", "target", "op", "stack", "split", "fuse", "optional", "perm", "shape", "axis"}
_LAYOUT_KEYS = {"files", "signature", "ignore", "rules"}
_TOP_KEYS = {"spec", "dtype", "rename", "layouts", "shapes"}
_FIELD = re.compile(r"\{(\w+)(?::(\w+))?\}")
_PATH_LITERAL = re.compile(r"[A-Za-z0-9_/]*")
LEAF_PATH = re.compile(r"[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*")


def module_path(value: str) -> str:
    """Torch module path -> tree path: `ffn.net.0.proj` -> `ffn/net_0/proj` (CONTRIBUTING.md)."""
    out: list[str] = []
    for part in value.split("."):
        if part.isdigit() and out:
            out[-1] += f"_{part}"
        else:
            out.append(part)
    return "/".join(out)


@dataclass(frozen=True)
class Template:
    """A target path template: literal text with `{group}` or `{group:filter}` fields."""

    text: str
    fields: tuple[tuple[str, str | None], ...]

    @classmethod
    def parse(cls, text: str, where: str) -> Template:
        literal = _FIELD.sub("", text)
        if "{" in literal or "}" in literal or not _PATH_LITERAL.fullmatch(literal):
            raise SpecError(f"{where}: bad target template {text!r} (only letters, digits, _, / and {{group}} fields)")
        return cls(text, tuple((m.group(1), m.group(2)) for m in _FIELD.finditer(text)))

    def render(self, groups: dict[str, str], renames: dict[str, dict[str, str]]) -> str:
        def field_value(m: re.Match) -> str:
            value, flt = groups[m.group(1)], m.group(2)
            if flt is None:
                return value
            if flt == "path":
                return module_path(value)
            if value not in renames[flt]:
                raise KeyError(f"rename table {flt!r} has no entry for {value!r}")
            return renames[flt][value]

        return _FIELD.sub(field_value, self.text)


@dataclass(frozen=True)
class Split:
    axis: int
    parts: tuple[str, ...]
    sizes: tuple[int, ...] | None  # None: equal parts


@dataclass(frozen=True)
class Fuse:
    group: str
    order: tuple[str, ...]
    axis: int


@dataclass(frozen=True)
class Rule:
    """One mapping rule; `index` is its position in the layout (for messages and mutation tests)."""

    layout: str
    index: int
    pattern: re.Pattern
    target: Template
    op: str
    args: dict = field(default_factory=dict, hash=False, compare=False)
    stack: str | None = None
    split: Split | None = None
    fuse: Fuse | None = None
    optional: bool = False

    @property
    def label(self) -> str:
        return f"{self.layout} rule #{self.index} ({self.pattern.pattern!r})"


@dataclass(frozen=True)
class Layout:
    name: str
    files: tuple[str, ...]
    signature: tuple[re.Pattern, ...]
    ignore: tuple[re.Pattern, ...]
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class DtypePolicy:
    default: np.dtype | None  # None = keep the source dtype
    rules: tuple[tuple[re.Pattern, np.dtype | None], ...]

    def for_leaf(self, path: str, default: np.dtype | None) -> np.dtype | None:
        for pattern, dtype in self.rules:
            if pattern.fullmatch(path):
                return dtype
        return default


@dataclass(frozen=True)
class Spec:
    name: str
    component: str
    description: str
    dtype: DtypePolicy
    renames: dict = field(hash=False, compare=False)
    layouts: dict = field(hash=False, compare=False)  # name -> Layout, in file order
    digest: str = ""
    path: Path | None = None
    shapes: dict | None = field(default=None, hash=False, compare=False)  # declared expected tree, if any

    def with_files(self, files: tuple[str, ...]) -> "Spec":
        """This spec with every layout reading `files` (globs) instead of its own: a registry
        component that names its file (a repo holding several releases side by side at its root)."""
        layouts = {name: replace(layout, files=tuple(files)) for name, layout in self.layouts.items()}
        return replace(self, layouts=layouts)


# ----------------------------------------------------------------------------- parsing


def _regex(text: object, where: str) -> re.Pattern:
    if not isinstance(text, str):
        raise SpecError(f"{where}: expected a regex string, got {text!r}")
    try:
        return re.compile(text)
    except re.error as err:
        raise SpecError(f"{where}: invalid regex {text!r} ({err})") from None


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise SpecError(f"{where}: expected a list of strings")
    return tuple(value)


def _unknown_keys(table: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise SpecError(f"{where}: unknown key(s) {', '.join(extra)} (allowed: {', '.join(sorted(allowed))})")


def _parse_split(raw: object, where: str) -> Split:
    if not isinstance(raw, dict) or "parts" not in raw:
        raise SpecError(f"{where}: split needs {{axis, parts[, sizes]}}")
    _unknown_keys(raw, {"axis", "parts", "sizes"}, where + " split")
    sizes = raw.get("sizes")
    if sizes is not None and (len(sizes) != len(raw["parts"]) or not all(isinstance(s, int) for s in sizes)):
        raise SpecError(f"{where}: split sizes must be one integer per part")
    return Split(int(raw.get("axis", 0)), _strings(raw["parts"], where + " split.parts"), tuple(sizes) if sizes else None)


def _parse_fuse(raw: object, where: str) -> Fuse:
    if not isinstance(raw, dict) or not {"group", "order"} <= raw.keys():
        raise SpecError(f"{where}: fuse needs {{group, order[, axis]}}")
    _unknown_keys(raw, {"group", "order", "axis"}, where + " fuse")
    return Fuse(raw["group"], _strings(raw["order"], where + " fuse.order"), int(raw.get("axis", 0)))


def _parse_rule(raw: dict, layout: str, index: int, renames: dict) -> Rule:
    where = f"layout {layout!r} rule #{index}"
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: a rule must be a table")
    _unknown_keys(raw, _RULE_KEYS, where)
    for key in ("match", "target"):
        if key not in raw:
            raise SpecError(f"{where}: missing {key!r}")
    op = raw.get("op", "identity")
    if op not in OPS:
        raise SpecError(f"{where}: unknown op {op!r} (choose from {', '.join(OPS)})")
    args = {k: raw[k] for k in _OP_ARGS[op] if k in raw}
    missing = [k for k in _OP_ARGS[op] if k not in raw]
    stray = [k for k in ("perm", "shape", "axis") if k in raw and k not in _OP_ARGS[op]]
    if missing or stray:
        raise SpecError(f"{where}: op {op!r} takes {list(_OP_ARGS[op]) or 'no arguments'}, got {missing or stray}")
    for key, value in args.items():
        ints = value if key in ("perm", "shape") else [value]
        if not (isinstance(ints, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in ints)):
            raise SpecError(f"{where}: {key} must be {'a list of integers' if key != 'axis' else 'an integer'}, got {value!r}")
    rule = Rule(layout, index, _regex(raw["match"], where + " match"), Template.parse(raw["target"], where), op, args,
                raw.get("stack"), _parse_split(raw["split"], where) if "split" in raw else None,
                _parse_fuse(raw["fuse"], where) if "fuse" in raw else None, bool(raw.get("optional", False)))
    _lint_rule(rule, renames, where)
    return rule


def _lint_rule(rule: Rule, renames: dict, where: str) -> None:
    groups = set(rule.pattern.groupindex)
    consumed = {g for g in (rule.stack, rule.fuse.group if rule.fuse else None) if g}
    for name in consumed - groups:
        raise SpecError(f"{where}: stack/fuse group {name!r} is not a named group of the match")
    if rule.split and rule.fuse:
        raise SpecError(f"{where}: a rule may split or fuse, not both")
    available = (groups - consumed) | ({"part"} if rule.split else set())
    used = {name for name, _ in rule.target.fields}
    for name, flt in rule.target.fields:
        if name not in available:
            raise SpecError(f"{where}: target field {{{name}}} is not an available group ({', '.join(sorted(available)) or 'none'})")
        if flt is not None and flt != "path" and flt not in renames:
            raise SpecError(f"{where}: unknown template filter {flt!r} (use 'path' or a [rename] table)")
    if rule.split and "part" not in used:
        raise SpecError(f"{where}: a split rule's target must contain {{part}}")
    unused = (groups - consumed) - used
    if unused:
        # a group that the target ignores would send different keys to one leaf
        raise SpecError(f"{where}: named group(s) {', '.join(sorted(unused))} unused by target, stack or fuse")
    if can_sample(rule.pattern.pattern) and not samples(rule.pattern.pattern):
        raise SpecError(f"{where}: pattern {rule.pattern.pattern!r} can never match")


def _parse_layout(name: str, raw: dict, renames: dict) -> Layout:
    where = f"layout {name!r}"
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: must be a table")
    _unknown_keys(raw, _LAYOUT_KEYS, where)
    if not raw.get("rules"):
        raise SpecError(f"{where}: has no rules")
    rules = tuple(_parse_rule(r, name, i, renames) for i, r in enumerate(raw["rules"]))
    layout = Layout(name, _strings(raw.get("files", []), where + " files"),
                    tuple(_regex(s, where + " signature") for s in raw.get("signature", [])),
                    tuple(_regex(s, where + " ignore") for s in raw.get("ignore", [])), rules)
    if not layout.signature:
        raise SpecError(f"{where}: needs a signature (key regexes that identify it)")
    _lint_overlaps(layout)
    return layout


def _lint_overlaps(layout: Layout) -> None:
    claims = [(r.label, r.pattern) for r in layout.rules] + [(f"{layout.name} ignore {p.pattern!r}", p) for p in layout.ignore]
    for i, (label, pattern) in enumerate(claims):
        for other_label, other in claims[i + 1:]:
            clash = next((s for s in samples(pattern.pattern) if other.fullmatch(s)), None)
            clash = clash or next((s for s in samples(other.pattern) if pattern.fullmatch(s)), None)
            if clash is not None:
                raise SpecError(f"{label} and {other_label} both claim keys such as {clash!r}")


def _parse_dtype(raw: object) -> DtypePolicy:
    if not isinstance(raw, dict) or "default" not in raw:
        raise SpecError("[dtype] needs a 'default'")
    _unknown_keys(raw, {"default", "rules"}, "[dtype]")
    rules = []
    for i, rule in enumerate(raw.get("rules", [])):
        if not isinstance(rule, dict) or set(rule) != {"match", "dtype"}:
            raise SpecError(f"[dtype] rule #{i}: needs exactly 'match' and 'dtype'")
        rules.append((_regex(rule["match"], f"[dtype] rule #{i}"), policy_dtype(rule["dtype"], f"[dtype] rule #{i}")))
    return DtypePolicy(policy_dtype(raw["default"], "[dtype] default"), tuple(rules))


def _parse_shapes(raw: object) -> dict[str, tuple[int, ...]] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecError("[shapes] must map leaf paths to shapes")
    for path, shape in raw.items():
        if not LEAF_PATH.fullmatch(path) or not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise SpecError(f"[shapes] entry {path!r} = {shape!r}: need a tree path and a list of sizes")
    return {p: tuple(s) for p, s in raw.items()}


def parse_spec(text: str, name: str, path: Path | None = None) -> Spec:
    """Parse and lint spec TOML `text`; `name` is how errors and manifests refer to it."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"spec {name}: invalid TOML ({err})") from None
    try:
        _unknown_keys(raw, _TOP_KEYS, "top level")
        meta = raw.get("spec", {})
        _unknown_keys(meta, {"name", "component", "description"}, "[spec]")
        renames = raw.get("rename", {})
        if not all(isinstance(t, dict) and all(isinstance(v, str) for v in t.values()) for t in renames.values()):
            raise SpecError("[rename] tables must map strings to strings")
        if "path" in renames:
            raise SpecError("[rename.path] clashes with the built-in 'path' filter")
        layouts = {n: _parse_layout(n, l, renames) for n, l in raw.get("layouts", {}).items()}
        if not layouts:
            raise SpecError("no [layouts.<name>] declared")
        dtype = _parse_dtype(raw.get("dtype"))
        shapes = _parse_shapes(raw.get("shapes"))
    except SpecError as err:
        raise SpecError(f"spec {name}: {err}") from None
    return Spec(meta.get("name", name), meta.get("component", name.rsplit("/", 1)[-1]), meta.get("description", ""),
                dtype, renames, layouts, hashlib.sha256(text.encode()).hexdigest(), path, shapes)


def load_spec(name_or_path: str | Path) -> Spec:
    """Load and lint a conversion spec.

    Args:
      name_or_path: a shipped spec name such as ``"wan/transformer"`` (read from
        ``conversion_specs/wan/transformer.toml``) or the path of any spec TOML file.

    Raises:
      SpecError: the spec is missing or fails the linter (the message names the rule).
    """
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.is_file()):
        shipped = SPECS_ROOT / f"{name_or_path}.toml"
        if not shipped.is_file():
            raise SpecError(f"no spec {str(name_or_path)!r} (not a file, and no {shipped.relative_to(SPECS_ROOT.parent)})")
        path = shipped
    resolved = path.resolve()
    name = resolved.relative_to(SPECS_ROOT).with_suffix("").as_posix() if resolved.is_relative_to(SPECS_ROOT) else str(path)
    return parse_spec(path.read_text(), name, path)


def shipped_specs() -> list[str]:
    """Names of every spec under conversion_specs/ (models.toml files are registry data, lora.toml files
    adapter mappings: neither is a spec)."""
    return sorted(p.relative_to(SPECS_ROOT).with_suffix("").as_posix()
                  for p in SPECS_ROOT.rglob("*.toml") if p.name not in ("models.toml", "lora.toml"))
