"""The TPU attention choice: override, built-in table (a first run times nothing), measured only when asked and
kept; the kernels' block maps never leak a tracer from one program into the next."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.compute.attention import local_attention
from vidax.zoo.compute.kernels import tpu_blocks, tpu_vmem
from vidax.zoo.compute.kernels.pallas_tpu import TpuAttention


def test_override_parses_and_bad_values_are_one_line(monkeypatch):
    monkeypatch.setenv(tpu_blocks.CHOICE_ENV, "flash:512,1024,256")
    assert tpu_blocks.override() == TpuAttention("flash", 512, 1024, 256)
    monkeypatch.setenv(tpu_blocks.CHOICE_ENV, "exp2_bounded:2048,4096,1024")
    assert tpu_blocks.override() == TpuAttention("exp2_bounded", 2048, 4096, 1024)
    for bad in ("splash:1000,2048,1024", "magic:128,128,128", "splash:1024,2048", "splash:1024,1024,2048"):
        with pytest.raises(tpu_blocks.TpuAttentionChoiceError, match=tpu_blocks.CHOICE_ENV):
            tpu_blocks.parse(bad)


def test_built_in_table_by_chip(monkeypatch):
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "")  # libtpu's default scoped VMEM
    assert tpu_blocks.default_for("TPU v5 lite") == TpuAttention("splash", 1024, 2048, 1024)
    assert tpu_blocks.default_for("TPU v6 lite") == TpuAttention("splash", 2048, 2048, 1024)
    assert tpu_blocks.default_for("cpu") == tpu_blocks.FALLBACK


def test_the_scoped_vmem_limit_picks_the_larger_blocks_and_keys_the_cache(monkeypatch):
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536")
    assert tpu_blocks.default_for("TPU v5 lite") == TpuAttention("splash", 2048, 4096, 1024)
    assert tpu_blocks.default_for("TPU v4") == TpuAttention("splash", 1024, 1024, 512)  # no larger-VMEM entry
    with_limit = tpu_blocks.machine_key("TPU v5 lite")
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "")
    assert tpu_blocks.machine_key("TPU v5 lite") != with_limit


def test_the_runtime_raises_the_limit_only_before_the_backend_starts(monkeypatch):
    """Importing `vidax.zoo.compute.runtime` in a fresh process sets the flag; a variable naming it, or
    VIDAX_TPU_SCOPED_VMEM_KIB=0, is left as it is; after the backend started nothing changes."""
    import subprocess
    import sys

    code = ("import os, jax; {pre}; import vidax.zoo.compute.runtime; print(os.environ.get('LIBTPU_INIT_ARGS', ''))")
    env = {k: v for k, v in os.environ.items() if k not in ("LIBTPU_INIT_ARGS", tpu_vmem.VMEM_ENV)}
    env["JAX_PLATFORMS"] = "cpu"

    def run(pre="pass", **extra):
        done = subprocess.run([sys.executable, "-c", code.format(pre=pre)], env={**env, **extra},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    assert run() == "--xla_tpu_scoped_vmem_limit_kib=65536"
    assert run(LIBTPU_INIT_ARGS="--xla_tpu_scoped_vmem_limit_kib=32768") == "--xla_tpu_scoped_vmem_limit_kib=32768"
    assert run(**{tpu_vmem.VMEM_ENV: "0"}) == ""
    assert run(pre="jax.devices()") == ""


def test_the_table_by_kind_of_keys_and_padding(monkeypatch):
    """Short keys (cross-attention to text) take the flash row; long ones the splash row, block_q halved where that
    pads the queries less (HunyuanVideo-1.5's 51,275 joint tokens: 52,224 at 1024, 53,248 at 2048), not where it
    pads the same (Wan's 32,760: 32,768 either way). Every row says where it comes from."""
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536")

    def shapes(sq, skv):
        return jax.ShapeDtypeStruct((2, sq, 4, 128), jnp.bfloat16), jax.ShapeDtypeStruct((2, skv, 4, 128), jnp.bfloat16)

    assert tpu_blocks.table_choice("TPU v5 lite", *shapes(32760, 512), None) == TpuAttention("flash", 1024, 1024, 512)
    assert tpu_blocks.table_choice("TPU v5 lite", *shapes(32760, 32760), None) == TpuAttention("splash", 2048, 4096, 1024)
    assert tpu_blocks.table_choice("TPU v5 lite", *shapes(51275, 51275), True) == TpuAttention("splash", 1024, 4096, 1024)
    assert tpu_blocks.table_choice("some chip", *shapes(51275, 51275), None) == tpu_blocks.FALLBACK
    assert all(row.source.startswith(("measured", "untimed")) for row in tpu_blocks.TABLE)
    monkeypatch.setenv(tpu_blocks.LONG_CHOICE_ENV, "exp2_bounded:2048,4096,1024")  # long keys only
    assert tpu_blocks.table_choice("TPU v5 lite", *shapes(51275, 51275), True) == TpuAttention("exp2_bounded", 1024, 4096, 1024)
    assert tpu_blocks.table_choice("some chip", *shapes(32760, 32760), None) == TpuAttention("exp2_bounded", 2048, 4096, 1024)
    assert tpu_blocks.table_choice("TPU v5 lite", *shapes(32760, 512), None) == TpuAttention("flash", 1024, 1024, 512)
    assert {row.chip for row in tpu_blocks.TABLE if row.source.startswith("measured")} == {"TPU v5 lite", "TPU v5e"}


def test_blocks_fit_short_sequences():
    """Cross attention to 300 text tokens runs as one 384-key block; blocks never exceed the padded length."""
    fitted = TpuAttention("splash", 1024, 2048, 1024).fitted(32760, 300)
    assert fitted == TpuAttention("splash", 1024, 384, 384)
    assert TpuAttention("splash", 1024, 2048, 1024).fitted(200, 640) == TpuAttention("splash", 256, 640, 640)


@pytest.fixture
def tuning_file(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(tpu_blocks.CHOICE_ENV, raising=False)
    monkeypatch.delenv(tpu_blocks.NO_TUNING_ENV, raising=False)
    monkeypatch.delenv(tpu_blocks.TUNING_ENV, raising=False)
    tpu_blocks.forget()
    yield tmp_path / tpu_blocks.CACHE_NAME
    tpu_blocks.forget()


def test_a_first_trace_times_nothing(tuning_file, monkeypatch):
    """Unasked, the first trace of a shape takes the table's choice: nothing is timed, nothing written."""
    monkeypatch.setattr(tpu_blocks, "measure", lambda *a, **k: pytest.fail("timed while tracing"))
    q = jnp.ones((1, 300, 2, 64), jnp.bfloat16)
    chosen = []
    jax.jit(lambda q: chosen.append(tpu_blocks.choose(q, q, None)) or q)(q)
    assert chosen == [tpu_blocks.table_choice(jax.devices()[0].device_kind, q, q, None)]
    assert not tuning_file.exists()


def test_measured_when_asked_inside_a_trace_then_read_from_the_file(tuning_file, monkeypatch):
    """Asked (`VIDAX_TPU_TUNING=1`), the first call of a shape times the candidates (here in Pallas' interpreter)
    while a program is being traced, keeps the fastest in the file, and a new process's call reads it without
    timing, asked or not."""
    monkeypatch.setenv(tpu_blocks.TUNING_ENV, "1")
    calls = []
    real_measure = tpu_blocks.measure

    def measure(*args, **kwargs):
        calls.append(args[:2])
        return real_measure(*args, **kwargs, interpret=True)

    monkeypatch.setattr(tpu_blocks, "measure", measure)
    q = jnp.ones((1, 300, 2, 64), jnp.bfloat16)
    chosen = []
    jax.jit(lambda q: chosen.append(tpu_blocks.choose(q, q, None)) or q)(q)
    assert calls == [((1, 300, 2, 64), 300)]
    stored = json.loads(tuning_file.read_text())
    (entries,) = stored["machines"].values()
    assert entries["b1 h2 sq300 skv300 d64 bfloat16 open"]["choice"] == chosen[0].label()
    tpu_blocks.forget()  # as a new process
    assert tpu_blocks.choose(q, q, None) == chosen[0] and len(calls) == 1
    monkeypatch.delenv(tpu_blocks.TUNING_ENV)
    tpu_blocks.forget()
    assert tpu_blocks.choose(q, q, None) == chosen[0] and len(calls) == 1


def test_no_tuning_and_override_measure_nothing(tuning_file, monkeypatch):
    monkeypatch.setattr(tpu_blocks, "measure", lambda *a, **k: pytest.fail("measured"))
    q = jnp.ones((1, 300, 2, 64), jnp.bfloat16)
    monkeypatch.setenv(tpu_blocks.NO_TUNING_ENV, "1")
    monkeypatch.setenv(tpu_blocks.TUNING_ENV, "1")  # the table alone wins over asking
    assert tpu_blocks.choose(q, q, None) == tpu_blocks.default_for(jax.devices()[0].device_kind)
    monkeypatch.setenv(tpu_blocks.CHOICE_ENV, "flash:256,256,128")
    assert tpu_blocks.choose(q, q, None) == TpuAttention("flash", 256, 256, 128)
    assert not tuning_file.exists()


def test_a_kernel_reused_by_two_programs_holds_no_tracer(rng):
    """The splash kernel for a shape is built once; two programs (and a grad) that trace it both run."""
    q = jnp.asarray(rng.standard_normal((1, 200, 2, 128)), jnp.float32)
    first = jax.jit(lambda q: local_attention(q, q, q, scale=0.1, implementation="splash_interpret"))(q)
    second = jax.jit(lambda q: 2 * local_attention(q, q, q, scale=0.1, implementation="splash_interpret"))(q)
    np.testing.assert_allclose(np.asarray(second), 2 * np.asarray(first), rtol=1e-6)
    jax.jit(jax.grad(lambda q: local_attention(q, q, q, scale=0.1, implementation="splash_interpret").sum()))(q)
