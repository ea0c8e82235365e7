"""`bench.accelerator.chip.every_dit` on the CPU: its jaxpr FLOP count against hand counts and against the Wan
trainer's analytic count, and one model measured end to end (wan-tiny, the dry run's own step program)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from bench.accelerator.chip import dit_programs, every_dit


def test_jaxpr_flops_counts_products_convolutions_and_loop_bodies():
    a = jnp.zeros((3, 4, 5))
    b = jnp.zeros((3, 5, 6))
    assert every_dit.jaxpr_flops(jax.make_jaxpr(lambda x, y: jnp.einsum("bij,bjk->bik", x, y))(a, b).jaxpr) \
        == 2 * 3 * 4 * 5 * 6
    image, kernel = jnp.zeros((1, 2, 8, 8)), jnp.zeros((7, 2, 3, 3))
    conv = lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), "VALID")  # noqa: E731
    assert every_dit.jaxpr_flops(jax.make_jaxpr(conv)(image, kernel).jaxpr) == 2 * (7 * 6 * 6) * (2 * 3 * 3)
    m = jnp.zeros((4, 4))
    scanned = lambda x: jax.lax.scan(lambda c, _: (c @ x, None), x, None, length=5)[0]  # noqa: E731
    assert every_dit.jaxpr_flops(jax.make_jaxpr(scanned)(m).jaxpr) == 5 * 2 * 4 * 4 * 4


def test_counting_flops_leaves_the_timed_program_its_own_attention_kernel(monkeypatch):
    # jax keeps make_jaxpr's trace of a function and jit(fn).lower reuses it: counting on `fn` itself made the
    # timed program run the blockwise attention the count traced (run G on the chip)
    from vidax.zoo.compute import attention as module

    x = jnp.ones((1, 16, 2, 8))
    fn = lambda q: module.local_attention(q, q, q, None, scale=0.35)  # noqa: E731
    assert every_dit.count_flops(fn, (x,)) == 2 * (2 * 2 * 16 * 16 * 8)
    chosen = []
    real = module.choose_kernel
    monkeypatch.setattr(module, "choose_kernel", lambda *a: chosen.append(real(*a)) or chosen[-1])
    jax.jit(fn).lower(x)
    assert chosen, "the timed program reused the counting trace"


@pytest.fixture(scope="module")
def wan_tiny_row():
    return every_dit.measure("wan-tiny", repeats=1)


def test_wan_tiny_step_flops_match_the_analytic_count(wan_tiny_row):
    from vidax.train.bench import wan_flops
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    cfg = make_pipeline("wan-tiny", GenerateOptions(model="wan-tiny", prompt="")).model.transformer
    linear, attention = wan_flops(cfg, tokens=5 * 8 * 8, text=512, batch=2)  # the dry run's 512 text rows
    # the analytic count leaves out the time embedding's small products (under 0.1% here)
    assert wan_tiny_row["step_flops"] == pytest.approx(linear + attention, rel=1e-3)
    assert wan_tiny_row["step_flops"] > linear + attention


def test_wan_tiny_row_has_every_measure(wan_tiny_row):
    row = wan_tiny_row
    assert row["size"] == "64x64x17" and row["guided"] and row["depths"] == {"blocks": 4}
    assert row["runs"]["1"]["finite"] and row["runs"]["0"]["finite"]
    assert row["runs"]["1"]["xla_temp"] > row["runs"]["0"]["xla_temp"]
    shapes = {(tuple(q), tuple(k)) for q, k, *_ in row["attention_calls"]}
    assert shapes == {((2, 320, 4, 24), (2, 320, 4, 24)), ((2, 320, 4, 24), (2, 512, 4, 24))}  # self, cross
    assert {tuple(a["q"]) for a in row["attention"]} == {(2, 320, 4, 24)}
    assert row["native_depth"] == 4 and row["step_ms_estimate"] > 0


def test_a_step_that_cannot_trace_without_blocks_is_timed_at_depths_one_and_two(monkeypatch):
    # LTX-Video's STG row masks a block by index, so its depth-0 step fails while it is traced: on the chip
    # (2026-12-06, run Q3) that ended the model's row instead of timing depth 2
    real = dit_programs._program

    def program(family, settings, depth):
        fn, args, dit = real(family, settings, depth)
        if depth == 0:
            def fn(*_):
                raise IndexError("index 0 is out of bounds for axis 1 with size 0")
        return fn, args, dit

    monkeypatch.setattr(dit_programs, "_program", program)
    row = every_dit.measure("wan-tiny", repeats=1)
    assert set(row["runs"]) == {"1", "2"}
    assert row["block_flops"] == row["runs"]["2"]["flops"] - row["runs"]["1"]["flops"] > 0
    assert row["step_ms_estimate"] > 0


def test_the_table_keeps_trace_and_lower_apart_from_the_compile(wan_tiny_row, tmp_path):
    # tracing a new shape on a TPU times the attention candidates: inside the compile figure that had made
    # the chip's one-block programs look like 96-148 s compiles (runs O and Q)
    one = wan_tiny_row["runs"]["1"]
    assert one["lower_s"] > 0 and one["compile_s"] > 0
    (tmp_path / "dit-wan-tiny.json").write_text(json.dumps(wan_tiny_row))
    header, rule, row = every_dit.table(tmp_path).splitlines()
    assert header.count("|") == rule.count("|") == row.count("|") == 14
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[-3].startswith(f"{one['compile_s']:.1f} / ") and cells[-2] == f"{one['lower_s']:.1f}"


def test_a_group_compiles_together_and_runs_smallest_first(tmp_path, monkeypatch):
    """Three models planned, compiled by two workers at once (the two the same program once), run in the order
    of their XLA plans (smallest first), each row written as a file; the table names the concurrency."""
    order, compiled = [], []
    real_run, real_compile = dit_programs.run, dit_programs._compile
    monkeypatch.setattr(dit_programs, "run", lambda model, *a, **k: order.append(model.spec) or real_run(model, *a, **k))
    monkeypatch.setattr(dit_programs, "_compile", lambda program: compiled.append(program.key) or real_compile(program))
    specs = ["wan-tiny", "wan-tiny@64x64x9", "wan-tiny@64x64x17"]  # the last is wan-tiny's native size
    rows = dit_programs.measure_group(specs, tmp_path, repeats=1, workers=2)
    assert [r["spec"] for r in rows] == specs and order[0] == "wan-tiny@64x64x9"
    assert sorted(compiled) == sorted(["0", "0", "1", "1"] + ["attention 0", "attention 1"] * 2)
    assert rows[0]["runs"]["1"]["compile_s"] == rows[2]["runs"]["1"]["compile_s"]
    assert all(r["runs"]["1"]["compiled_beside"] == 2 and r["compile_phase"]["programs"] == 8 for r in rows)
    assert len(list(tmp_path.glob("dit-*.json"))) == 3
    assert "compiled beside up to 1 others" in every_dit.table(tmp_path)


def test_models_a_crashed_process_did_not_reach_get_a_fresh_one(tmp_path, monkeypatch):
    """The first process writes one row and dies; the parent starts a second one for the other models only."""
    import subprocess

    seen = []

    def fake_run(cmd, **kwargs):
        specs = cmd[cmd.index("group") + 1:cmd.index("--out-dir")]
        seen.append(specs)
        (tmp_path / every_dit.file_name(specs[0])).write_text(json.dumps({"spec": specs[0], "model": specs[0],
                                                                          "error": "fake"}))
        return subprocess.CompletedProcess(cmd, 1 if len(seen) == 1 else 0)

    monkeypatch.setattr(every_dit.subprocess, "run", fake_run)
    every_dit.run_all(["a", "b", "c"], tmp_path, budget=600, workers=2)
    assert seen == [["a", "b", "c"], ["b", "c"]]
    assert (tmp_path / "every_dit.md").exists()


def test_a_spec_sets_variables_while_its_model_is_traced(monkeypatch):
    import os

    monkeypatch.setenv("VIDAX_HEADS_MAJOR", "0")
    monkeypatch.delenv("VIDAX_BENCH_PROBE", raising=False)
    spec = "wan2.1-t2v-14b@832x480x81+VIDAX_HEADS_MAJOR=1+VIDAX_BENCH_PROBE=x"
    assert dit_programs._split(spec) == ("wan2.1-t2v-14b", (832, 480, 81))
    with dit_programs._environment(spec):
        assert os.environ["VIDAX_HEADS_MAJOR"] == "1" and os.environ["VIDAX_BENCH_PROBE"] == "x"
    assert os.environ["VIDAX_HEADS_MAJOR"] == "0" and "VIDAX_BENCH_PROBE" not in os.environ
    assert every_dit.file_name(spec) == "dit-wan2_1-t2v-14b_832x480x81_VIDAX_HEADS_MAJOR-1_VIDAX_BENCH_PROBE-x.json"
