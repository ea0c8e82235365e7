"""`vidax.zoo.plan.dry_run_cache`: a dry run's stages found again serialized, without tracing, with XLA's same figures;
another run (another size) compiles its own."""

from __future__ import annotations

import pytest

from vidax.zoo.plan import dry_run_cache
from vidax.zoo.plan.dry_run import dry_run
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.compute.planner import GIB, Layout
from vidax.zoo.registry import make_pipeline

MODEL = "wan-tiny"


def _run(frames: int, stages: tuple[str, ...] = ("text", "dit", "vae")):
    options = GenerateOptions(model=MODEL, prompt="", dtype="float32", frames=frames, height=64, width=64)
    return dry_run(make_pipeline(MODEL, options), options, Layout(), 1, GIB, stages=stages).stages


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dry-run-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dry_run_cache, "cache_folder", lambda: folder)
        cold = _run(9)
        written = len(list(folder.iterdir()))
        warm, other = _run(9), _run(13, ("dit",))
    return written, cold, warm, other


def test_a_second_run_loads_every_stage_with_the_same_figures(runs):
    written, cold, warm, _ = runs
    assert len(cold) >= 3 and written == len(cold)
    assert not any(stage.loaded for stage in cold) and all(stage.loaded for stage in warm)
    figures = lambda s: (s.stage, s.argument, s.output, s.temp, s.alias, s.planned, s.flops)  # noqa: E731
    assert [figures(s) for s in warm] == [figures(s) for s in cold]


def test_another_size_is_compiled_not_loaded(runs):
    _, cold, _, other = runs
    assert not any(stage.loaded for stage in other)
    assert other[0].stage.startswith("dit step") and other[0].temp != next(s.temp for s in cold if s.stage.startswith("dit step"))


def test_no_run_context_no_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(dry_run_cache, "cache_folder", lambda: tmp_path)
    assert dry_run_cache.stage_key("dit step", (), donate=(), static=(), keep_unused=False) is None


def test_the_cpu_row_block_choice_is_in_the_key(monkeypatch):
    """Row blocks change the compiled program without changing a source file: another choice, another entry."""
    monkeypatch.delenv("VIDAX_CPU_ROW_BLOCK", raising=False)
    with dry_run_cache.run_context("run"):
        key = lambda: dry_run_cache.stage_key("dit step", (), donate=(), static=(), keep_unused=False)  # noqa: E731
        plain = key()
        monkeypatch.setenv("VIDAX_CPU_ROW_BLOCK", "0")
        assert key() not in (None, plain)


# --- the figure book: XLA's figures of programs compiled before, by the lowered program's text ------------


def _stage(width: int):
    import jax
    import jax.numpy as jnp

    from vidax.zoo.plan.dry_run import compile_stage

    x = jax.ShapeDtypeStruct((64, width), jnp.float32)
    return compile_stage("probe", lambda a: jnp.tanh(a @ a.T) @ a, (x,))


def test_a_program_in_the_book_is_not_compiled_again(monkeypatch):
    import jax

    book = dry_run_cache.FigureBook()
    monkeypatch.setattr(dry_run_cache, "_BOOK", book)
    first = _stage(32)
    assert len(book.added) == 1 and (book.hits, book.misses) == (0, 1)

    def refuse(self, *args, **kwargs):
        raise AssertionError("compiled a program the book holds")

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)
    again = _stage(32)
    assert (book.hits, book.misses) == (1, 1)
    figures = lambda s: (s.argument, s.output, s.temp, s.alias, s.flops)  # noqa: E731
    assert figures(again) == figures(first) and first.temp > 0 and first.flops > 0
    with pytest.raises(AssertionError, match="the book holds"):  # another program: not in the book, compiled
        _stage(48)


def test_the_book_is_the_figures_it_holds(monkeypatch):
    """What a recorded entry says is what the stage reports (the suite's planner checks read it)."""
    book = dry_run_cache.FigureBook()
    monkeypatch.setattr(dry_run_cache, "_BOOK", book)
    _stage(32)
    (key,) = book.added
    book.entries[key] = {**book.entries[key], "temp": 12345}
    assert _stage(32).temp == 12345


def test_an_open_executable_cache_keeps_the_book_out(tmp_path, monkeypatch):
    book = dry_run_cache.FigureBook()
    monkeypatch.setattr(dry_run_cache, "_BOOK", book)
    monkeypatch.setattr(dry_run_cache, "cache_folder", lambda: tmp_path)
    _stage(32)
    assert not book.added and (book.hits, book.misses) == (0, 0)
