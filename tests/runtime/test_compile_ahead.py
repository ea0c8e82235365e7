"""The decode's programs compiled ahead (`vidax.zoo.plan.ahead`): a generation's decode stage then obtains no
program itself, and the sidecar says what each stage compiled or loaded on its own thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from vidax.zoo.api import generate
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.plan import ahead


def _options(tmp_path, size: int) -> GenerateOptions:
    # sizes no other test decodes at, so that no program of the decode is in this process's caches already
    return GenerateOptions(model="wan-tiny", prompt="a kite", height=size, width=size + 16, frames=9, steps=2,
                           out=tmp_path / f"{size}.npy", compile_cache=False)


def _decode_programs(result) -> int:
    figures = result.settings["programs_by_stage"]["decode"]
    return figures["compiled"] + figures["loaded"]


def test_the_decode_compiles_none_of_its_units_when_they_compiled_ahead(tmp_path, monkeypatch):
    """At two sizes (no program of either decode in the process yet): without compiling ahead the decode stage
    obtains its twelve units and the small eager programs around them (un-normalising, chunking, joining); with
    it, the eager ones alone."""
    from vidax.zoo import api

    compiled = []

    def recording(*args):
        compiled.append(ahead.compile_ahead(*args))
        return compiled[-1]

    monkeypatch.setattr(api, "compile_ahead", recording)
    monkeypatch.setenv(ahead.AHEAD_ENV, "1")  # a CPU run compiles ahead only when asked
    monkeypatch.setattr(ahead, "compile_threads", lambda: 3)  # a pool, whatever this host's cores
    with_ahead = generate(_options(tmp_path, 48))
    assert compiled[0].error is None and len(compiled[0].compiled) == 12  # six units per chunk kind
    assert with_ahead.settings["programs_by_stage"]["denoise"]["compiled"] > 0  # the stage's own thread counts
    figures = with_ahead.settings["compile_ahead"]
    assert figures["units"] == 12 and figures["error"] is None and figures["waited_s"] <= figures["seconds"]
    assert len(figures["unit_s"]) == 12 and all(s > 0 for s in figures["unit_s"].values())

    monkeypatch.setenv(ahead.AHEAD_ENV, "0")
    without = generate(_options(tmp_path, 64))
    assert compiled[1].thread is None
    assert _decode_programs(without) - _decode_programs(with_ahead) == 12


@pytest.mark.parametrize("cores, threads", [(1, 1), (2, 1), (13, 11)])
def test_compile_threads_leave_the_run_its_cores(monkeypatch, cores, threads):
    monkeypatch.setattr(ahead.os, "cpu_count", lambda: cores)
    assert ahead.compile_threads() == threads


def test_the_background_compile_waits_for_the_first_step_and_stops_with_a_failed_run(tmp_path, monkeypatch):
    """Nothing is lowered before the first denoise step; a run that fails before its decode cancels the units."""
    from vidax.zoo import api, samplers

    seen = []
    monkeypatch.setattr(api, "compile_ahead", lambda *args: seen.append(ahead.compile_ahead(*args)) or seen[-1])
    monkeypatch.setenv(ahead.AHEAD_ENV, "1")

    def failing_sample(*args, **kwargs):
        assert not seen[0].go.is_set()  # encoded, not sampled yet: the thread still waits
        raise RuntimeError("sampling failed")

    monkeypatch.setattr(samplers, "sample", failing_sample)
    with pytest.raises(RuntimeError, match="sampling failed"):
        generate(_options(tmp_path, 32))
    seen[0].thread.join(30)
    assert seen[0].cancelled and not seen[0].thread.is_alive() and seen[0].compiled == []


def test_a_cpu_run_compiles_ahead_only_when_asked(monkeypatch):
    options = _options(Path("."), 32)
    monkeypatch.delenv(ahead.AHEAD_ENV, raising=False)
    assert not ahead.enabled(options)
    monkeypatch.setenv(ahead.AHEAD_ENV, "1")
    assert ahead.enabled(options)
    monkeypatch.setattr("vidax.zoo.compute.runtime.platform", lambda: "tpu")
    monkeypatch.setenv(ahead.AHEAD_ENV, "0")
    assert not ahead.enabled(options)
    monkeypatch.delenv(ahead.AHEAD_ENV)
    assert ahead.enabled(options)


def test_compile_threads_run_at_a_lower_priority_than_the_run():
    """The pool's threads are niced (Linux keeps a nice value per thread): the host loop feeding the chip comes
    first on the cores."""
    import os
    import threading

    seen = {}

    def worker():
        ahead.lower_priority()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["nice"] == min(19, before + ahead.COMPILE_NICENESS)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # the caller's own is unchanged
