"""The benchmark protocol's arithmetic: the work counted on the reference and the floor it sets."""

from __future__ import annotations

import pytest
import torch

from bench.protocol import Timing, Timings, gemm_peak, print_table, reference_flops


def test_reference_flops_counts_matmuls_and_cpu_attention():
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    q, k, v = torch.randn(1, 2, 40, 8), torch.randn(1, 2, 24, 8), torch.randn(1, 2, 24, 8)

    def work():
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return x @ w

    # one 64x32x16 matmul, and per head QK^T (40x8x24) and PV (40x24x8), two FLOPs a multiply-add
    assert reference_flops(work) == 2 * 64 * 32 * 16 + 2 * 2 * (2 * 40 * 8 * 24)


def test_gemm_peak_measures_each_library():
    peak = gemm_peak(shapes=((64, 128, 256), (32, 16, 8)), repeats=1)
    assert set(peak) == {"XLA", "torch"}
    assert all(rate > 1e8 for rate in peak.values())


def test_table_prints_rates_and_the_floor(capsys):
    timings = Timings(results={"ours": Timing((2.0, 2.5), (4.0, 5.0)), "ref": Timing((4.0, 4.0), (8.0, 8.0))},
                      load_before=0.5, load_after=1.9, outputs={}, others=0.01,
                      flops=300e9, gemm_peak={"XLA": 100e9, "torch": 120e9})
    print_table("t", timings, reference="ref")
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].split()[-2:] == ["150", "125%"]  # 300 GFLOP in 2 s against a 120 GFLOP/s peak
    assert rows[3].split()[-2:] == ["75", "62%"]
    assert rows[4].startswith("floor: 0.300 TFLOP") and rows[4].endswith("take 2.500 s = 0.62x ref's best")


def test_a_contender_doing_less_work_is_rated_on_its_own_count(capsys):
    timings = Timings(results={"trimmed": Timing((1.5,), (3.0,)), "ref": Timing((4.0,), (8.0,))},
                      load_before=0.5, load_after=1.9, outputs={}, flops=300e9, gemm_peak={"XLA": 120e9},
                      work={"trimmed": 150e9})
    print_table("t", timings, reference="ref")
    rows = capsys.readouterr().out.splitlines()
    assert rows[2].split()[-3:] == ["0.38x", "100", "83%"]  # 150 GFLOP in 1.5 s, not 300
    assert rows[3].split()[-2:] == ["75", "62%"]
    assert rows[5] == ("trimmed does 0.150 TFLOP per call (50% of the reference's; its own count, used for its "
                       "GFLOP/s), so the floor does not bound it")


def test_table_without_work_has_no_floor(capsys):
    timings = Timings(results={"a": Timing((1.0,), (1.0,))}, load_before=0.5, load_after=1.0, outputs={})
    print_table("t", timings)
    assert "floor" not in capsys.readouterr().out


def test_peak_is_flops_over_best_time(monkeypatch):
    ticks = iter(range(1000))
    monkeypatch.setattr("bench.protocol.time.perf_counter", lambda: float(next(ticks)))
    # every timed call spans one fake second: the larger of the two shapes' work sets the peak
    peak = gemm_peak(shapes=((64, 32, 16), (8, 8, 8)), repeats=2)
    assert all(rate == pytest.approx(2 * 64 * 32 * 16) for rate in peak.values())
