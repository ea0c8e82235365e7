"""Every shipped spec must fail loudly when any one rule is deleted or any transpose becomes identity.

Specs are found by globbing conversion_specs/**/*.toml; their test checkpoints come from the
factories registered in tests/**/*spec_fixtures.py (see vidax.translator.testing).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vidax.translator import TranslatorError, convert, load_spec
from vidax.translator.spec import shipped_specs
from vidax.translator.testing import discover, mismatches

TESTS_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = discover(TESTS_ROOT)
TRANSPOSING = ("linear", "conv", "transpose")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = FIXTURES[name](tmp_path_factory.mktemp(name.replace("/", "-")))
        return cache[name]

    return get


def _mutants(spec):
    for layout in spec.layouts.values():
        for rule in layout.rules:
            rules = tuple(r for r in layout.rules if r is not rule)
            yield f"delete {rule.label}", layout, rules
            if rule.op in TRANSPOSING:
                swapped = dataclasses.replace(rule, op="identity", args={})
                yield f"identity for {rule.label}", layout, tuple(swapped if r is rule else r for r in layout.rules)


def _fails(spec, cases) -> bool:
    for case in cases:
        try:
            tree = convert(spec, case.source, dtype=case.dtype)
        except TranslatorError:
            return True
        if mismatches(tree, case.expected):
            return True
    return False


@pytest.mark.parametrize("name", shipped_specs())
def test_every_shipped_spec_has_test_checkpoints(name):
    assert name in FIXTURES, f"spec {name} has no registered test checkpoints (add a *spec_fixtures.py, see vidax.translator.testing)"


@pytest.mark.parametrize("name", [n for n in shipped_specs() if n in FIXTURES])
def test_single_rule_mutations_are_caught(name, built):
    spec = load_spec(name)
    cases = built(name)
    for case in cases:  # the unmutated spec converts every case exactly
        assert mismatches(convert(spec, case.source, dtype=case.dtype), case.expected) == [], case.name
    survivors = []
    for label, layout, rules in _mutants(spec):
        mutant = dataclasses.replace(spec, layouts={**spec.layouts, layout.name: dataclasses.replace(layout, rules=rules)})
        if not _fails(mutant, cases):
            survivors.append(label)
    assert survivors == [], f"mutations of {name} that still convert: {survivors}"
