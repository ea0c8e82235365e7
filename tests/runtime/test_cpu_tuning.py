"""CPU choices measured once per machine (`vidax.zoo.compute.cpu_tuning`): cached, keyed, overridable, and used by
`layers.project`. Nothing here times a real matmul: measurements are fakes or run on a fake clock."""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.compute import cpu_tuning, layers

ENTRY = "row_blocks float32 1024"


@pytest.fixture(autouse=True)
def tuning(monkeypatch, tmp_path):
    """Tuning on (conftest turns it off for the suite), its file in a fresh cache folder, no override."""
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(cpu_tuning.NO_TUNING_ENV, raising=False)
    monkeypatch.delenv(cpu_tuning.ROW_BLOCK_ENV, raising=False)
    monkeypatch.delenv(cpu_tuning.FP32_RESULT_ENV, raising=False)
    cpu_tuning.forget()
    yield tmp_path / cpu_tuning.CACHE_NAME
    cpu_tuning.forget()


class FakeMeasure:
    """Stands in for `measure_row_blocks`: counts its calls and answers `faster`."""

    def __init__(self, faster: bool):
        self.faster, self.calls = faster, []

    def __call__(self, dtype, block):
        self.calls.append((np.dtype(dtype).name, block))
        return {"faster": self.faster, "median_seconds": {"one call": 1.0, "row blocks": 0.9 if self.faster else 1.1}}


def _never(*args, **kwargs):
    raise AssertionError("measured where the choice was already known")


def _loops(fn, *args) -> int:
    """Loops in a fresh trace of `fn` (jax caches traces per function, not per setting)."""
    return str(jax.make_jaxpr(lambda *a: fn(*a))(*args)).count("scan[")


def test_measured_once_then_read_from_the_file(tuning):
    measure = FakeMeasure(faster=False)
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=measure) is False
    assert measure.calls == [("float32", 1024)]
    stored = json.loads(tuning.read_text())
    assert stored["machines"][cpu_tuning.machine_key()][ENTRY]["faster"] is False
    cpu_tuning.forget()  # as a new process would: the answer comes from the file
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=_never) is False
    assert [p.name for p in tuning.parent.iterdir()] == [cpu_tuning.CACHE_NAME]  # no temporary file left


def test_another_machine_dtype_or_block_measures_again(tuning, monkeypatch):
    measure = FakeMeasure(faster=True)
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=measure)
    assert cpu_tuning.row_blocks_faster(jnp.bfloat16, 1024, measure=measure)
    assert cpu_tuning.row_blocks_faster(jnp.float32, 512, measure=measure)
    here = cpu_tuning.machine_key()
    monkeypatch.setattr(cpu_tuning, "machine_key", lambda: "AMD EPYC 9R14 (AuthenticAMD 25/17/1; avx2) | 2 cores")
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=FakeMeasure(faster=False)) is False
    assert measure.calls == [("float32", 1024), ("bfloat16", 1024), ("float32", 512)]
    machines = json.loads(tuning.read_text())["machines"]
    assert sorted(machines[here]) == ["row_blocks bfloat16 1024", "row_blocks float32 1024", "row_blocks float32 512"]
    assert machines[cpu_tuning.machine_key()] == {ENTRY: {"faster": False, "median_seconds": {
        "one call": 1.0, "row blocks": 1.1}}}


@pytest.mark.parametrize("contents", ["{not json", "[]", '{"format": 1, "machines": {"KEY": []}}',
                                      '{"format": 1, "machines": {"KEY": {"' + ENTRY + '": {}}}}'])
def test_a_corrupt_or_foreign_file_is_measured_again_and_rewritten(tuning, contents):
    tuning.write_text(contents.replace("KEY", cpu_tuning.machine_key()))
    measure = FakeMeasure(faster=True)
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=measure)
    assert len(measure.calls) == 1
    assert json.loads(tuning.read_text())["machines"][cpu_tuning.machine_key()][ENTRY]["faster"] is True


def test_an_unwritable_folder_keeps_the_choice_for_the_run(tuning, monkeypatch, capsys):
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tuning))  # the folder would be a path under a file
    tuning.write_text("")
    measure = FakeMeasure(faster=False)
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=measure) is False
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=measure) is False
    assert len(measure.calls) == 1
    assert "for this run only" in capsys.readouterr().err


def test_the_choice_reaches_project(tuning, monkeypatch):
    """37 rows in blocks of at most 8: row blocks where measured faster, one call where not, the same bits;
    a product within one block never asks."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1, 37, 48), np.float32))
    kernel = jnp.asarray(rng.standard_normal((48, 40), np.float32))
    monkeypatch.setattr(layers, "CPU_ROW_BLOCK", 8)
    monkeypatch.setattr(cpu_tuning, "measure_row_blocks", _never)
    assert _loops(layers.project, x[:, :8], kernel) == 0
    outputs = []
    for faster, loops in ((False, 0), (True, 1)):
        cpu_tuning.forget()
        monkeypatch.setattr(cpu_tuning, "measure_row_blocks", FakeMeasure(faster))
        tuning.unlink(missing_ok=True)
        assert _loops(layers.project, x, kernel) == loops
        assert cpu_tuning.measure_row_blocks.calls == [("float32", 8)]
        outputs.append(np.asarray(jax.jit(lambda a, b: layers.project(a, b))(x, kernel)))  # a fresh trace
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_the_overrides_win_and_measure_nothing(tuning, monkeypatch):
    x, kernel = jnp.ones((1, 37, 16)), jnp.ones((16, 4))
    monkeypatch.setattr(layers, "CPU_ROW_BLOCK", 8)
    monkeypatch.setattr(cpu_tuning, "measure_row_blocks", _never)
    key = cpu_tuning.machine_key()
    tuning.write_text(json.dumps({"format": 1, "machines": {key: {"row_blocks float32 8": {"faster": True}}}}))
    assert _loops(layers.project, x, kernel) == 1  # the file's answer
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "0")
    assert _loops(layers.project, x, kernel) == 0
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "16")  # blocks of 16 rows, not CPU_ROW_BLOCK's 8
    blocked = str(jax.make_jaxpr(lambda a, b: layers.project(a, b))(x, kernel))
    assert blocked.count("scan[") == 1 and "slice_sizes=(16, 16)" in blocked
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "64")  # more than the rows: one call
    assert _loops(layers.project, x, kernel) == 0
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "lots")
    with pytest.raises(cpu_tuning.CpuTuningError, match="VIDAX_CPU_ROW_BLOCK='lots'"):
        layers.project(x, kernel)
    monkeypatch.delenv(cpu_tuning.ROW_BLOCK_ENV)
    tuning.unlink()
    monkeypatch.setenv(cpu_tuning.NO_TUNING_ENV, "1")  # the built-in choice, nothing written
    assert _loops(layers.project, x, kernel) == 1
    assert not tuning.exists()


def test_time_interleaved_takes_turns_and_medians():
    order = []
    contenders = {name: (lambda name=name: order.append(name)) for name in ("one call", "row blocks")}
    durations = [5, 1, 4, 2, 6, 1]  # one call, row blocks, one call, ...: medians 5 and 1
    ends = list(itertools.accumulate(durations))
    ticks = iter(itertools.chain.from_iterable(zip([0, *ends[:-1]], ends)))  # (start, end) of each timed call
    medians = cpu_tuning.time_interleaved(contenders, 3, clock=lambda: next(ticks))
    assert order == ["one call", "row blocks"] * 4  # an untimed call each, then three rounds in turn
    assert medians == {"one call": 5, "row blocks": 1}


def test_measure_row_blocks_runs_eagerly_inside_a_trace():
    """The first big projection of a model being traced decides: the measurement must run, not be staged."""
    results = []
    ticks = iter([0, 3, 3, 4] * 3)  # (start, end) of each timed call: one call 3 s, row blocks 1 s

    def traced(x):
        clock = lambda: next(ticks)  # noqa: E731
        results.append(cpu_tuning.measure_row_blocks(jnp.float32, 16, shape=(40, 8, 8), rounds=3, clock=clock))
        return x + 1

    assert str(jax.make_jaxpr(traced)(jnp.ones(2))).count("dot_general") == 0
    assert results[0]["faster"] is True and results[0]["median_seconds"] == {"one call": 3, "row blocks": 1}


@pytest.mark.parametrize("row_blocks, chosen", [(0.97, True), (0.99, False)])
def test_row_blocks_must_win_by_the_margin(row_blocks, chosen):
    """Within 2% (the noise of a busy machine) the one call stays."""
    ticks = iter([0, 1, 1, 1 + row_blocks] * 3)
    result = cpu_tuning.measure_row_blocks(jnp.float32, 16, shape=(40, 8, 8), rounds=3, clock=lambda: next(ticks))
    assert result["faster"] is chosen


def test_tune_cpu_command_measures_both_dtypes_and_overwrites(tuning, monkeypatch):
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    key = cpu_tuning.machine_key()
    tuning.write_text(json.dumps({"format": 1, "machines": {key: {ENTRY: {"faster": True}}}}))
    measure = FakeMeasure(faster=False)
    monkeypatch.setattr(cpu_tuning, "measure_row_blocks",
                        lambda dtype, block: {**measure(dtype, block), "shape": [8, 8, 8]})
    monkeypatch.setattr(cpu_tuning, "measure_fp32_result", lambda dtype: {
        "faster": True, "median_seconds": {"default": 2.0, "fp32 result": 0.5}, "shape": [8, 8, 8]})
    result = CliRunner().invoke(app, ["--tune-cpu"])
    assert result.exit_code == 0, result.output
    assert measure.calls == [("float32", 1024), ("bfloat16", 1024)]
    assert "bfloat16 8 x 8 x 8: default 2.000 s, fp32 result 0.500 s -> fp32 result" in result.output
    assert key in result.output
    assert "float32 8 x 8 x 8: one call 1.000 s, row blocks 1.100 s -> one call" in result.output
    assert json.loads(tuning.read_text())["machines"][key][ENTRY]["faster"] is False
    assert cpu_tuning.row_blocks_faster(jnp.float32, 1024, measure=_never) is False


def test_cpu_identity_names_the_model_its_numbers_and_matrix_extensions():
    info = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            "model name\t: Intel(R) Xeon(R) Platinum 8481C\nstepping\t: 8\nflags\t\t: fpu avx2 avx512f amx_bf16\n\n"
            "processor\t: 1\nmodel name\t: ignored\n")
    assert cpu_tuning.cpu_identity(info) == ("Intel(R) Xeon(R) Platinum 8481C "
                                             "(GenuineIntel 6/143/8; avx2 avx512f amx_bf16)")


# --- fp32 results for bf16 products ---------------------------------------------------------------


class FakeFp32Measure:
    """Stands in for `measure_fp32_result`: counts its calls and answers `faster`."""

    def __init__(self, faster: bool):
        self.faster, self.calls = faster, []

    def __call__(self, dtype):
        self.calls.append(np.dtype(dtype).name)
        return {"faster": self.faster, "median_seconds": {"default": 1.0, "fp32 result": 0.3}}


@pytest.fixture(scope="module")
def bf16_dense():
    """A bf16 Dense's operands (input, kernel, bias) and the fp32 product of them plus the bias, rounded to bf16."""
    rng = np.random.default_rng(1)
    x, kernel, bias = (jnp.asarray(rng.standard_normal(shape, np.float32), jnp.bfloat16)
                       for shape in ((2, 37, 64), (64, 24), (24,)))
    wide = (np.asarray(x, np.float64) @ np.asarray(kernel, np.float64) + np.asarray(bias, np.float64))
    return x, kernel, bias, np.asarray(jnp.asarray(wide.astype(np.float32), jnp.bfloat16))


def _dense(x, kernel, bias):
    module = layers.Dense(features=kernel.shape[-1])
    return np.asarray(jax.jit(module.apply)({"params": {"kernel": kernel, "bias": bias}}, x))


def test_fp32_result_choice_is_measured_once_cached_and_reaches_dense(tuning, monkeypatch, bf16_dense):
    """Measured faster: a bf16 Dense is the fp32 product of its bf16 operands (plus the bias in fp32)
    rounded to bf16, in one call and in row blocks; the file answers the next process."""
    x, kernel, bias, wide = bf16_dense
    measure = FakeFp32Measure(faster=True)
    monkeypatch.setattr(cpu_tuning, "measure_fp32_result", measure)
    monkeypatch.setattr(cpu_tuning, "measure_row_blocks", FakeMeasure(faster=False))
    out = _dense(x, kernel, bias)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), wide.astype(np.float32))
    assert measure.calls == ["bfloat16"]
    assert json.loads(tuning.read_text())["machines"][cpu_tuning.machine_key()]["fp32_result bfloat16"]["faster"]
    cpu_tuning.forget()
    monkeypatch.setattr(cpu_tuning, "measure_fp32_result", _never)
    assert cpu_tuning.fp32_result_faster(jnp.bfloat16) is True
    monkeypatch.setenv(cpu_tuning.ROW_BLOCK_ENV, "16")  # 74 rows in blocks: the same values
    np.testing.assert_array_equal(_dense(x, kernel, bias).astype(np.float32), wide.astype(np.float32))


def test_fp32_result_not_chosen_keeps_the_default_product(tuning, monkeypatch, bf16_dense):
    x, kernel, bias, wide = bf16_dense
    monkeypatch.setattr(cpu_tuning, "measure_fp32_result", FakeFp32Measure(faster=False))
    monkeypatch.setattr(cpu_tuning, "measure_row_blocks", FakeMeasure(faster=False))
    default = np.asarray(jnp.dot(x, kernel) + bias)  # bf16 result, bf16 bias add: today's product
    out = _dense(x, kernel, bias)
    np.testing.assert_array_equal(out.astype(np.float32), default.astype(np.float32))
    assert not np.array_equal(out.astype(np.float32), wide.astype(np.float32))  # the two forms differ here


def test_fp32_result_overrides_and_fp32_untouched(tuning, monkeypatch, bf16_dense):
    """`VIDAX_CPU_FP32_RESULT` wins over the file and over `VIDAX_NO_CPU_TUNING`; fp32 never asks."""
    x, kernel, bias, wide = bf16_dense
    monkeypatch.setattr(cpu_tuning, "measure_fp32_result", _never)
    monkeypatch.setattr(cpu_tuning, "measure_row_blocks", _never)
    monkeypatch.setenv(cpu_tuning.NO_TUNING_ENV, "1")
    assert cpu_tuning.fp32_result_faster(jnp.bfloat16) is False  # the built-in choice
    monkeypatch.setenv(cpu_tuning.FP32_RESULT_ENV, "1")
    np.testing.assert_array_equal(_dense(x, kernel, bias).astype(np.float32), wide.astype(np.float32))
    monkeypatch.delenv(cpu_tuning.NO_TUNING_ENV)
    key = cpu_tuning.machine_key()
    tuning.write_text(json.dumps({"format": 1, "machines": {key: {"fp32_result bfloat16": {"faster": True}}}}))
    monkeypatch.setenv(cpu_tuning.FP32_RESULT_ENV, "0")
    assert cpu_tuning.fp32_result_faster(jnp.bfloat16) is False
    assert "preferred_element_type=float32" not in str(jax.make_jaxpr(lambda a: layers.project(a, kernel))(x))
    monkeypatch.setenv(cpu_tuning.FP32_RESULT_ENV, "maybe")
    with pytest.raises(cpu_tuning.CpuTuningError, match="VIDAX_CPU_FP32_RESULT='maybe'"):
        layers.project(x, kernel)
    f32_programs = []
    for choice in ("0", "1"):
        monkeypatch.setenv(cpu_tuning.FP32_RESULT_ENV, choice)
        f32_programs.append(str(jax.make_jaxpr(lambda a: layers.project(a, jnp.ones((8, 4)), jnp.ones(4)))(
            jnp.ones((3, 8), jnp.float32))))
    assert "preferred_element_type=float32" in str(jax.make_jaxpr(lambda a: layers.project(a, kernel))(x))
    assert f32_programs[0] == f32_programs[1] and layers.cpu_fp32_result(jnp.float32) is False


def test_measure_fp32_result_times_both_forms_by_the_margin():
    ticks = iter([0, 1, 1, 1.5] * 3)  # default 1 s, fp32 result 0.5 s
    result = cpu_tuning.measure_fp32_result(jnp.bfloat16, shape=(16, 8, 8), rounds=3, clock=lambda: next(ticks))
    assert result["faster"] is True and result["median_seconds"] == {"default": 1, "fp32 result": 0.5}
