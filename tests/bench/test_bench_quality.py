"""The protocol's pieces that the step-cache, serve and quantization benches share: the load warning at
start, a helper process's CPU counted as the bench's own, and PSNR/SSIM against the exact run (no bench is
run here: they take minutes; each is quick-run by hand, see its docstring)."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `bench` is a top-level folder, not an installed package

from bench import protocol, quality  # noqa: E402


def test_the_load_is_announced_and_a_loaded_machine_warned_or_refused(monkeypatch, capsys):
    monkeypatch.setattr(protocol, "load_average", lambda: 0.4)
    assert protocol.announce_load("bench x") == 0.4
    assert "load average 0.40 at start (quiet)" in capsys.readouterr().out
    monkeypatch.setattr(protocol, "load_average", lambda: 2.5)
    protocol.announce_load("bench x")
    assert "NOT quiet (>= 1.5)" in capsys.readouterr().out
    monkeypatch.setenv("VIDAX_BENCH_QUIET_ONLY", "1")
    with pytest.raises(SystemExit, match="refused, the load average 2.50"):
        protocol.announce_load("bench x")


def test_a_helper_process_cpu_counts_as_the_bench_s_own(monkeypatch):
    """A server the contenders talk to burns CPU while they run: counted as the bench's own it leaves
    `others` at zero; not counted, it reads as another process's load."""
    spinning = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 4\n"
                                 "while time.time() < end: pass"])
    try:
        helper = lambda: protocol.process_cpu_seconds(spinning.pid)  # noqa: E731
        # the machine's busy CPU: exactly this process's and the helper's (no stranger's noise in the test)
        monkeypatch.setattr(protocol, "busy_cpu_seconds", lambda: protocol.own_cpu_seconds() + helper())
        monkeypatch.setenv("VIDAX_BENCH_SETTLE_S", "0")
        wait = {"wait": lambda: time.sleep(0.5)}
        counted = protocol.interleaved(wait, repeats=2, warmup=0, helper_cpu=helper)
        stranger = protocol.interleaved(wait, repeats=2, warmup=0)
        assert counted.others is not None and counted.others < 0.05
        assert stranger.others is not None and stranger.others > 0.1
    finally:
        spinning.kill()
        spinning.wait()


def test_psnr_and_ssim_see_identical_and_different_frames():
    rng = np.random.default_rng(0)
    frames = rng.uniform(0.2, 0.8, (2, 24, 24, 3))
    assert quality.psnr(frames, frames) == float("inf") and quality.ssim(frames, frames) == pytest.approx(1.0)
    near, far = frames + rng.normal(0, 0.01, frames.shape), frames + rng.normal(0, 0.1, frames.shape)
    assert 35 < quality.psnr(near, frames) < 45 and quality.psnr(far, frames) < 25
    assert quality.ssim(far, frames) < quality.ssim(near, frames) < 1.0


def _path(name: str) -> Path:
    """A bench's file, in whichever room of bench/ it lives."""
    (path,) = (ROOT / "bench").rglob(f"{name}.py")
    return path


def _calls(name: str) -> set[str]:
    tree = ast.parse(_path(name).read_text())
    return {getattr(n.func, "id", getattr(n.func, "attr", "")) for n in ast.walk(tree) if isinstance(n, ast.Call)}


@pytest.mark.parametrize("name", ["bench_step_cache", "bench_serve", "bench_quantized"])
def test_the_benches_time_interleaved_and_announce_the_load(name):
    assert {"interleaved", "print_table", "announce_load"} <= _calls(name)


@pytest.mark.parametrize("name", ["bench_step_cache", "bench_quantized"])
def test_the_benches_print_psnr_and_ssim_on_wan_tiny(name):
    assert {"psnr", "ssim", "tiny_run"} <= _calls(name)
    assert "perf_counter" not in _calls(name)  # no contender timed by hand, one after the other


def test_the_quantized_bench_compares_int8_fp8_and_a_gguf_with_the_exact_run():
    source = _path("bench_quantized").read_text()
    assert '"weights_dtype": "int8"' in source and '"weights_dtype": "fp8"' in source
    assert "q8_0_gguf" in _calls("bench_quantized") and '"transformer": str(gguf_file)' in source


def test_the_gguf_the_quantized_bench_writes_is_wan_tiny_s_dit_in_q8_0(tmp_path):
    from safetensors.numpy import load_file

    from bench.runtime import bench_quantized
    from vidax.translator.formats.gguf_io import GGUFFile

    written = GGUFFile(bench_quantized.q8_0_gguf(tmp_path / "tiny.gguf"))
    exact = load_file(quality.tiny_folder() / "transformer" / "diffusion_pytorch_model.safetensors")
    assert written.architecture == "wan" and set(written.tensors) == set(exact)
    q8 = [k for k, (_, kind, _) in written._entries.items() if kind == "Q8_0"]
    assert len(q8) >= 4 * 10 and all(k.startswith("blocks.") for k in q8)  # every block's matrices
    for key, value in exact.items():
        got, want = written.array(key), value.astype(np.float32)
        tolerance = np.abs(want).max() / 127 if key in q8 else 0.0  # Q8_0: one step of the block's scale
        assert got.shape == want.shape and np.abs(got - want).max() <= tolerance + 1e-7, key
