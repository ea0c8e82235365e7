"""`compute.shape_memo.remembered`: the planner's traced shapes kept on disk beside the compile cache, so that a
second process plans without tracing (`python -m bench.bench_plan_start` times the two)."""

from __future__ import annotations

import json

import jax
import pytest

from vidax.zoo.compute import shape_memo


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(shape_memo, "_folder", lambda: tmp_path / shape_memo.FOLDER)
    return tmp_path / shape_memo.FOLDER


def _counting(value):
    calls = []
    return calls, lambda: (calls.append(1), value)[1]


def test_a_value_is_kept_and_read_back_without_computing(folder):
    calls, compute = _counting({"a/kernel": [3, 4]})
    assert shape_memo.remembered("param-shapes", ("Model", "init", "cfg(1)"), compute) == {"a/kernel": [3, 4]}
    assert shape_memo.remembered("param-shapes", ("Model", "init", "cfg(1)"), compute) == {"a/kernel": [3, 4]}
    assert len(calls) == 1 and len(list(folder.iterdir())) == 1
    assert shape_memo.remembered("param-shapes", ("Model", "init", "cfg(2)"), compute)  # another config
    assert len(calls) == 2


def test_an_edit_to_the_sources_makes_another_key(folder, monkeypatch):
    calls, compute = _counting(7)
    shape_memo.remembered("param-count", ("T5",), compute)
    monkeypatch.setattr(shape_memo, "source_fingerprint", lambda: "edited")
    assert shape_memo.remembered("param-count", ("T5",), compute) == 7 and len(calls) == 2


def test_a_key_naming_an_address_or_a_cache_that_is_off_keeps_nothing(folder, monkeypatch):
    calls, compute = _counting(1)
    key = ("Model", object())  # its repr holds an address: another key in every process
    shape_memo.remembered("param-count", key, compute)
    shape_memo.remembered("param-count", key, compute)
    assert len(calls) == 2 and not folder.exists()
    monkeypatch.undo()  # the real `_folder`, with jax's persistent cache switched off
    previous = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        assert shape_memo._folder() is None
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)


def test_an_unreadable_entry_is_computed_again_and_rewritten(folder):
    calls, compute = _counting([1, 2])
    shape_memo.remembered("vae-decode-cache", ("cfg", 480, 832), compute)
    (entry,) = folder.iterdir()
    entry.write_text("{not json")
    assert shape_memo.remembered("vae-decode-cache", ("cfg", 480, 832), compute) == [1, 2] and len(calls) == 2
    assert json.loads(entry.read_text()) == [1, 2]
    assert not [p for p in folder.iterdir() if p.suffix == ".tmp"]


def test_planning_a_model_twice_traces_once(folder, monkeypatch):
    """The planner's inputs for a registry model (its DiT's and VAE's shapes, the text encoder's count) come
    from the folder the second time, with the same plan."""
    from vidax.zoo.compute import planner
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.parts import dit, wan_vae
    from vidax.zoo.registry import make_pipeline

    def new_process():  # the per-process caches in front of the folder emptied, as a fresh process has them
        for cache in (dit._SHAPES_BY_CONFIG, dit._MEMORY_SIZES, dit._ABSTRACT_PARTS, planner._PARAM_COUNTS):
            cache.clear()
        wan_vae.decode_cache_bytes.cache_clear()

    new_process()
    traced = []
    eval_shape = jax.eval_shape
    monkeypatch.setattr(jax, "eval_shape", lambda *a, **k: (traced.append(1), eval_shape(*a, **k))[1])
    options = GenerateOptions(model="wan2.1-t2v-1.3b", prompt="", height=480, width=832, frames=81)
    first = planner.predict(make_pipeline(options.model, options).memory_job(options), planner.Layout())
    assert traced and {p.name.rsplit("-", 1)[0] for p in folder.iterdir()} == {
        "dit-param-shapes", "dit-sizes", "param-count", "param-shapes", "vae-decode-cache"}
    new_process()
    traced.clear()
    again = planner.predict(make_pipeline(options.model, options).memory_job(options), planner.Layout())
    assert again == first and not traced
