"""`vidax.zoo.cpu_tuning`: a CPU choice measured once per machine, stored beside the compile cache, overridable.
The logic (precedence, storage, the choice from timings) is tested; the timing itself is not."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import pytest

from vidax.zoo import cpu_tuning, layers


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder with the compile cache on (the suite runs with it off), no override set."""
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path / "vidax" / "jax"))
    monkeypatch.delenv("VIDAX_NO_COMPILE_CACHE", raising=False)
    monkeypatch.delenv(cpu_tuning.ROW_BLOCK_ENV, raising=False)
    cpu_tuning.stored.cache_clear()
    yield tmp_path / "vidax" / cpu_tuning.FILE_NAME
    cpu_tuning.stored.cache_clear()


def _loops(x, kernel) -> int:
    return str(jax.make_jaxpr(lambda a, b: layers.project(a, b))(x, kernel)).count("scan[")


def test_the_stored_choice_is_kept_beside_the_compile_cache_per_machine(cache):
    assert cpu_tuning.tuning_file() == cache
    assert cpu_tuning.row_block(1024) == 1024  # nothing measured yet: the default
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"another CPU | 64 cores | jax 0": {"row_block": 256}}))
    assert cpu_tuning.save({"row_block": None}) == cache
    table = json.loads(cache.read_text())
    assert table[cpu_tuning.machine_key()] == {"row_block": None}
    assert table["another CPU | 64 cores | jax 0"] == {"row_block": 256}  # other machines' entries kept
    assert cpu_tuning.row_block(1024) is None  # this machine measured one call faster
    x, kernel = jnp.ones((2, 2048, 8)), jnp.ones((8, 4))
    assert _loops(x, kernel) == 0  # and `project` follows it
    cpu_tuning.save({"row_block": 512})
    assert cpu_tuning.row_block(1024) == 512 and _loops(x, kernel) == 1


def test_the_environment_overrides_the_stored_choice(cache, monkeypatch):
    cpu_tuning.save({"row_block": None})
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "700")
    assert cpu_tuning.row_block(1024) == 700
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "off")
    assert cpu_tuning.row_block(1024) is None
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "-3")
    with pytest.raises(cpu_tuning.TuningError, match="positive row count, or 'off'"):
        cpu_tuning.row_block(1024)


def test_with_the_compile_cache_off_the_stored_file_is_not_read(cache, monkeypatch):
    cpu_tuning.save({"row_block": 64})
    monkeypatch.setenv("VIDAX_NO_COMPILE_CACHE", "1")
    cpu_tuning.stored.cache_clear()
    assert cpu_tuning.row_block(1024) == 1024


def test_a_corrupt_file_reads_as_nothing_measured(cache):
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    assert cpu_tuning.row_block(1024) == 1024
    cpu_tuning.save({"row_block": 128})  # and is replaced whole
    assert cpu_tuning.row_block(1024) == 128


def test_row_blocks_are_chosen_only_when_clearly_faster():
    assert cpu_tuning.choose_row_block(1.00, 0.90, 1024) == 1024
    assert cpu_tuning.choose_row_block(1.00, 0.99, 1024) is None  # within the noise margin
    assert cpu_tuning.choose_row_block(1.00, 1.08, 1024) is None


def test_measuring_compares_one_call_with_row_blocks(monkeypatch):
    """A fake clock: every timed call takes one tick, so neither wins and one call is kept; both variants ran."""
    ticks = iter(range(1000))
    choice, whole, blocked = cpu_tuning.measure_row_block(8, shapes=((37, 16, 8),), repeats=2,
                                                          clock=lambda: float(next(ticks)))
    assert (choice, whole, blocked) == (None, 1.0, 1.0)
    assert cpu_tuning.ROW_BLOCK_ENV not in os.environ  # the forced setting was undone
