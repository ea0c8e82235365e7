"""The accelerator benchmark (bench/accelerator) end to end at toy sizes on CPU, so that it cannot rot.

One run of `python -m bench.accelerator --profile toy` in a fresh process (one CPU device, the
diffusers side on CPU) drives every part through the code the GPU run uses; the tests read its
JSON and table. The FLOPs it divides by are checked against XLA's own count of the same forward.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backend_level import xla_flags  # the test processes' level, one device

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `bench` is a top-level folder, not an installed package

from bench.accelerator import cases, report  # noqa: E402
from bench.accelerator.timing import Budget  # noqa: E402


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("accelerator")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "VIDAX_NO_COMPILE_CACHE")}
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", XLA_FLAGS=xla_flags())
    cmd = [sys.executable, "-m", "bench.accelerator", "--profile", "toy", "--torch-device", "cpu",
           "--out", str(out / "table.md"), "--artifacts", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out, json.loads((out / "table.json").read_text()), (out / "table.md").read_text()


def test_every_part_ran_on_both_sides(toy_run):
    _, results, _ = toy_run
    profile = cases.profile("toy")
    assert results["skipped"] == [] and results["errors"] == []
    assert [name for name, *_ in results["timeline"]] == [
        "calibration", *(f"dit {c.key}" for c in profile.dits), "compile warm", "attention", "offload",
        *(f"vae {c.key}" for c in profile.vaes)]
    for section, keys in (("dit", [c.key for c in profile.dits]), ("vae", [c.key for c in profile.vaes])):
        for key in keys:
            for side in ("vidax", "diffusers"):
                assert "error" not in results[section][key][side], (section, key, side)
    for key in (c.key for c in profile.attention):
        for side in ("vidax", "diffusers"):
            rows = results["attention"][key][side]["rows"]
            assert rows and not any("error" in row for row in rows.values()), (key, side, rows)
    offload = results["offload"]["rows"]
    assert set(offload) == {"resident", *(f"chunk {n}" for n in profile.offload_chunks)}
    assert offload["chunk 1"]["chunks"] == profile.offload_depth


def test_dit_figures_and_the_kernel_choice(toy_run):
    _, results, _ = toy_run
    for entry in results["dit"].values():
        ours = report.dit_figures(entry, "vidax", None)
        assert ours["step"] > 0 and ours["peak_gb"] > 0
        assert entry["vidax"]["attention_kernel"] == "plain"  # toy sequences are short; on a GPU: cudnn
        assert entry["vidax"]["fmha_calls"] == 0
    assert results["attention"]["long"]["vidax"]["chosen"] == "blockwise"  # CPU, past the plain kernel's size


def test_persistent_cache_serves_the_second_process(toy_run):
    _, results, _ = toy_run
    compile_ = results["compile"]
    assert compile_["cold"]["misses"] >= 1 and compile_["cold"]["hits"] == 0
    assert compile_["warm"]["hits"] >= 1 and compile_["warm"]["misses"] == 0


def test_table_and_artifacts(toy_run):
    out, results, table = toy_run
    for heading in ("## DiT step", "## Compile", "## Attention alone", "## Streamed offload", "## VAE decode"):
        assert heading in table
    for entry in results["dit"].values():
        assert entry["case"]["label"] in table
    assert (out / "table.json").exists()
    assert {p.name for p in out.glob("hlo_*.txt.gz")} == {f"hlo_{c.key}.txt.gz" for c in cases.profile("toy").dits}
    assert (out / "profile_wan-480p.tar.gz").stat().st_size > 0


def test_real_shapes():
    dits = {c.key: c for c in cases.profile("real").dits}
    assert (dits["wan-480p"].tokens, dits["wan-720p"].tokens) == (32760, 75600)
    assert (dits["hv15-480p"].tokens, dits["hv15-720p"].tokens) == (49290, 111600)
    assert dits["hv15-480p"].text_tokens == 1985 and dits["wan-480p"].text_tokens == 512
    assert all(c.batch == 2 for c in dits.values())
    assert {c.depth for c in dits.values()} == {30, 40, 54}
    assert dits["wan13-480p"].run_depth == dits["wan13-480p"].depth == 30  # the whole 1.3B step
    assert cases.peak_tflops("NVIDIA H200") == 989.0 and cases.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert cases.peak_tflops("TPU v5 lite") == 197.0 and cases.peak_tflops("cpu") is None
    assert cases.peak_tflops("NVIDIA H200", override=900.0) == 900.0


def test_counted_flops_match_xla_cost_analysis(monkeypatch):
    """Matmul and attention FLOPs from the shapes vs XLA's count of the one-block forward (which adds
    the elementwise FLOPs, so it is a little larger), at sizes where matmuls dominate. The program is
    the accelerator's: dense layers in one call (XLA counts a loop's body once, so CPU row blocks
    would hide most of a layer's work from it)."""
    import jax
    from flax.traverse_util import unflatten_dict

    from bench.accelerator import vidax_side
    from vidax.zoo.compute import layers

    monkeypatch.setattr(layers, "CPU_ROW_BLOCK", 1 << 30)

    def in_a_scan(block, stacked, hidden, ctx):
        # the stack as a loop, as a deep model runs it: `scan_blocks` applies a one-layer stack directly, and
        # jax then drops that last block's text-stream work (HunyuanVideo-1.5's head reads video tokens only)
        def body(h, layer_params):
            return block.apply({"params": layer_params}, h, ctx), None

        return jax.lax.scan(body, hidden, stacked)[0]

    monkeypatch.setattr(vidax_side, "scan_blocks", in_a_scan)

    hv_text = dict(mllm=64, mllm_valid=64, byt5=16, byt5_valid=16, image=8)
    wan = cases.DitCase("wan", "wan", "wan", dict(cases.WAN_TOY, num_attention_heads=4, attention_head_dim=64,
                                                  ffn_dim=1024, text_dim=256, num_layers=1), 9, 256, 256, 1, text=64)
    hv = cases.DitCase("hv", "hunyuan_video15", "hv", dict(cases.HV15_TOY, num_attention_heads=4, attention_head_dim=64,
                                                num_layers=1, rope_axes_dim=(16, 24, 24), text_embed_dim=256,
                                                text_embed_2_dim=64, image_embed_dim=64), 9, 128, 128, 1, text=hv_text)
    for case in (wan, hv):
        model, spec = vidax_side.build_model(case)
        layout = vidax_side.param_dtypes(model, spec)
        params = unflatten_dict({p: jax.ShapeDtypeStruct(s, d) for p, (s, d) in layout.items()}, sep="/")
        lowered = vidax_side.dit_forward.lower(model, True, params, *vidax_side.abstract_inputs(case))
        cost = lowered.cost_analysis()  # of the program as traced: no compile, nothing optimised away
        xla = (cost[0] if isinstance(cost, list) else cost)["flops"]
        counted = cases.dit_flops(case)["step"]
        assert counted <= xla <= 1.1 * counted, (case.family, counted, xla)


def test_budget_skips_what_does_not_fit():
    now = [100.0]
    budget = Budget(60, clock=lambda: now[0])
    assert budget.allows("a", 50)
    now[0] += 30
    assert not budget.allows("b", 40) and budget.allows("c", 20)
    assert budget.skipped == ["b: needs ~40 s, 30 s left of 60 s"]


def test_step_is_scaled_from_the_block_difference():
    entry = {"case": {"run_depth": 2, "depth": 40}, "flops": {"step": 8e15, "block": 2e14},
             "vidax": {"full": {"median": 1.0}, "outside": {"median": 0.2}, "plan_bytes": 3e9,
                       "block_weight_bytes": 1e9}}
    fig = report.dit_figures(entry, "vidax", 1000.0)
    assert fig["per_block"] == pytest.approx(0.4) and fig["step"] == pytest.approx(16.2)
    assert fig["tflops"] == pytest.approx(8e15 / 16.2 / 1e12) and fig["mfu"] == pytest.approx(fig["tflops"] / 1000)
    assert fig["full_gb"] == pytest.approx(3 + 38)


def test_block_time_is_split_into_attention_and_the_rest():
    dit = {"case": {"label": "Wan", "run_depth": 2, "depth": 40, "tokens": 10, "text_tokens": 2},
           "flops": {"step": 8e15, "block": 2e14},
           "vidax": {"full": {"median": 1.0}, "outside": {"median": 0.2}, "plan_bytes": 3e9,
                     "block_weight_bytes": 1e9, "attention_kernel": "cudnn", "fmha_calls": 2}}
    attention = {"case": {"label": "Wan self-attn", "batch": 2, "tokens": 10, "heads": 1, "head_dim": 8},
                 "flops": 1e14, "vidax": {"chosen": "cudnn", "rows": {"vidax entry point (cudnn)": {"median": 0.25}}}}
    table = report.render({"meta": {"peak_tflops": 1000.0}, "dit": {"wan": dit}, "attention": {"wan": attention}})
    # block 400 ms: attention 250 ms (62%, 400 TFLOP/s), the rest 150 ms doing 1e14 FLOPs (667 TFLOP/s)
    assert "| Wan | 400.0 | 250.0 (cudnn) | 62% | 400.0 | 150.0 | 666.7 |" in table


def test_warm_compile_in_the_same_process(tmp_path):
    """On a TPU (one process holds the chip) the warm compile is the bench's own process with its
    in-memory caches dropped: the persistent cache folder alone serves it."""
    script = (
        "import json, sys\n"
        "from vidax.zoo.compute.runtime import configure_compile_cache\n"
        "from bench.accelerator import vidax_side\n"
        f"configure_compile_cache(True, {str(tmp_path)!r}, min_compile_secs=0)\n"
        "cold = vidax_side._timed_compile('toy', 'wan-480p')\n"
        "warm = vidax_side.probe_here('toy', 'wan-480p')\n"
        "print(json.dumps([cold, warm]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "VIDAX_NO_COMPILE_CACHE")}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags())
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cold, warm = json.loads(done.stdout.strip().splitlines()[-1])
    assert cold["misses"] >= 1 and cold["hits"] == 0
    assert warm["hits"] >= 1 and warm["misses"] == 0
