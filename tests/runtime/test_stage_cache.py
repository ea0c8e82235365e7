"""A long-lived process keeps placed weights between generations (`StageCache`, what vidax-serve holds):
the second run reads no weights and places nothing, and makes the same frames as a run without it."""

from __future__ import annotations

import numpy as np

from vidax.zoo.generator.contract import Family
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate
from vidax.zoo.generator.stages import StageCache

SIZE = dict(height=32, width=32, frames=5, steps=2)


def test_a_cache_keeps_every_weight_placed_for_the_next_run(tmp_path, monkeypatch):
    loads = []
    original = Family.load_tree
    monkeypatch.setattr(Family, "load_tree", lambda self, *a, **k: loads.append(a[0]) or original(self, *a, **k))
    options = GenerateOptions(model="wan-tiny", prompt="a red kite", out=tmp_path / "a.npy", compile_cache=False,
                              **SIZE)
    plain = generate(options).frames
    assert loads, "the uncached run read its weights"
    cache = StageCache()
    generate(options, cache=cache)
    loads.clear()
    again = generate(options.__class__(**{**options.__dict__, "out": tmp_path / "b.npy"}), cache=cache).frames
    assert loads == []  # no checkpoint read, nothing placed: the cache served every stage
    assert cache.weights and cache.denoisers
    np.testing.assert_array_equal(again, plain)
    cache.release()
    assert not cache.weights and not cache.denoisers
