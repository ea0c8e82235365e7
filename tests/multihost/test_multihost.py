"""Two processes on JAX's multi-controller runtime (gloo collectives on CPU), one mesh over both.

Each process is `tests/multihost/worker.py`, launched with its own fake CPU devices; they join
through `--coordinator`-style arguments and run the same generations. Frames must equal the same
layout run in this one process (8 fake devices) to 1e-6 at fp32; each process must read only the
weight slices its own devices hold; a failure on one process must stop the other with an error in
bounded time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.hunyuan_video15.pipelines import saved, towers  # noqa: F401  (the tiny HunyuanVideo-1.5 pipeline)
from tests.multihost.launch import death_time, error_line, launch
from vidax.translator.models import ConvertOptions, convert_model
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

PROMPT = "a red kite over a grey sea"
WAN = dict(height=32, width=48, frames=5, steps=2, guidance=4.0, negative_prompt="blurry", dtype="float32",
           compile_cache=False, save_latents=True)
WAN_LAYOUTS = {"dp2_tp2_sp2_first_block": dict(dp=2, tp=2, sp=2, cache="first-block", cache_threshold=10.0), "tp2_sp4": dict(tp=2, sp=4), "sp8": dict(sp=8),
               "tp2_sp4_offload_lora": dict(tp=2, sp=4, offload_chunk=1),
               # TeaCache reads its statistic to the host each step; 4 steps: its first and last always run
               "dp2_tp2_sp2_teacache": dict(dp=2, tp=2, sp=2, steps=4, cache="teacache", cache_threshold=1e4),
               # EasyCache reads its flags the same way; its first three steps run (the rate needs two), then skips
               "dp2_tp2_sp2_easycache": dict(dp=2, tp=2, sp=2, steps=5, cache="easycache", cache_threshold=1e4,
                                             cache_start_percent=0.0, cache_end_percent=1.0)}
LORA_LAYOUT = "tp2_sp4_offload_lora"  # a LoRA merged on each process, then streamed by offload over two hosts


def layout_options(base: dict, folder: Path, layout: str) -> dict:
    lora = {"lora": (f"{folder / 'lora.safetensors'}=0.7",)} if layout == LORA_LAYOUT else {}
    return {**base, **WAN_LAYOUTS[layout], **lora}


@pytest.fixture(scope="module")
def wan_folder(tmp_path_factory):
    """A tiny Wan2.1 T2V pipeline with 8 heads (so tp x sp can reach 8), converted by vidax-convert."""
    import diffusers
    import torch
    import transformers

    from tests.oracle import perturb
    from tests.tiny_references import umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae
    from vidax.zoo.wan.tiny import build_tokenizer

    root = tmp_path_factory.mktemp("multihost_wan")
    torch.manual_seed(0)
    build_tokenizer(root / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(root / "tokenizer_source")
    dit = diffusers.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=8, attention_head_dim=8,
                                          in_channels=16, out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64,
                                          num_layers=2, rope_max_seq_len=64).eval()
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), transformer=dit, vae=wan_pipeline_vae())
    for seed, module in enumerate(parts.values()):
        perturb(module, 40 + seed)
    diffusers.WanPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), **parts).save_pretrained(root / "model")
    convert_model(ConvertOptions("wan2.1-t2v-1.3b", source=str(root / "model"), out=root / "converted", dtype="float32"))
    from tests.lora.formats import low_rank_factors, wan_modules, write_peft

    write_peft(root / "lora.safetensors", low_rank_factors(dit.state_dict(), wan_modules(2), rank=4, seed=3), alpha=2.0)
    np.save(root / "latents.npy", np.random.default_rng(0).standard_normal((1, 16, 2, 4, 6)).astype(np.float32))
    return root


@pytest.fixture(scope="module")
def wan_run(wan_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("multihost_wan_out")
    base = dict(model="wan2.1-t2v-1.3b", prompt=PROMPT, weights=str(wan_folder / "converted"),
                latents=str(wan_folder / "latents.npy"), **WAN)
    results, seconds = launch({name: layout_options(base, wan_folder, name) for name in WAN_LAYOUTS}, out, 4)
    for code, output in results:
        assert code == 0, output[-4000:]
    return base, out


@pytest.mark.parametrize("layout", list(WAN_LAYOUTS))
def test_wan_frames_equal_the_single_process_run(wan_run, layout, tmp_path):
    base, out = wan_run
    options = {**layout_options(base, Path(base["weights"]).parent, layout), "latents": Path(base["latents"])}
    expected = generate(GenerateOptions(**options, out=tmp_path / "one.npy"))
    np.testing.assert_array_equal(np.load(out / f"{layout}.latents.npy"), expected.latents)
    np.testing.assert_allclose(np.load(out / f"{layout}.npy"), expected.frames, atol=1e-6, rtol=0)
    assert not (out / f"{layout}.p1.npy").exists()  # only process 0 writes
    if "cache" in options:  # a step skipped: every process took the same decisions as the one-process run
        log = json.loads((tmp_path / "one.json").read_text())["step_cache_steps"]
        assert not all(all(entry["full_dit"].values()) for entry in log), log
        assert json.loads((out / f"{layout}.json").read_text())["step_cache_steps"] == log
    if layout == LORA_LAYOUT:  # the LoRA reached the frames (the same layout without it differs)
        assert np.abs(np.load(out / f"{layout}.npy") - np.load(out / "tp2_sp4.npy")).max() > 1e-3


def test_each_process_reads_only_its_own_slices(wan_run, wan_folder):
    """tp=2 x sp=4 over two processes of 4 devices: each process reads the replicated leaves once and
    one tensor-parallel half of the sharded ones, never a whole sharded weight; one process holding
    all 8 devices reads both halves."""
    from flax import traverse_util
    from jax.sharding import PartitionSpec

    from vidax.translator import load
    from vidax.zoo.compute.sharding import TRANSFORMER_RULES, slice_bytes_read, to_mesh_spec
    from vidax.zoo.wan.config import WanTransformerConfig
    from vidax.zoo.wan.transformer import WanTransformer

    base, out = wan_run
    dit = WanTransformer(WanTransformerConfig.from_hf_config(
        json.loads((wan_folder / "model" / "transformer" / "config.json").read_text())))
    specs = traverse_util.flatten_dict(dit.logical_specs(), sep="/", is_leaf=lambda _, x: isinstance(x, PartitionSpec))
    tree = load(wan_folder / "converted" / "transformer")
    split = {p: "tensor" in to_mesh_spec(specs[p], TRANSFORMER_RULES) for p in tree}
    replicated = sum(a.nbytes for p, a in tree.items() if not split[p])
    sharded = sum(a.nbytes for p, a in tree.items() if split[p])
    assert replicated and sharded
    per_process = [json.loads((out / f"tp2_sp4.p{i}.json").read_text())["bytes"] for i in range(2)]
    assert per_process == [replicated + sharded // 2] * 2
    before = slice_bytes_read()
    generate(GenerateOptions(**{**base, **WAN_LAYOUTS["tp2_sp4"], "latents": Path(base["latents"])},
                             out=out / "again.npy"))
    assert slice_bytes_read() - before == replicated + sharded


def test_a_process_that_fails_to_prepare_stops_both(wan_folder, tmp_path):
    """Bad input on one process only (its --latents file is missing): both stop, with one clear line."""
    base = dict(model="wan2.1-t2v-1.3b", prompt=PROMPT, weights=str(wan_folder / "converted"), sp=8, **WAN)
    cases = {"bad": {**base, "latents": str(wan_folder / "latents.npy"), "latents_missing_on_process": 1}}
    results, seconds = launch(cases, tmp_path, 4, timeout=300)
    (code0, out0), (code1, out1) = results
    assert code0 == 1 and code1 == 1
    assert "process 1 failed during preparation" in error_line(out0)
    assert "latents file not found" in error_line(out1)
    assert seconds < 240


@pytest.mark.parametrize("dying", [1, 0], ids=["peer", "coordinator"])
def test_a_peer_killed_mid_run_ends_the_survivor(wan_folder, tmp_path, dying):
    """A process exits hard after one sampling step: the other must stop with one line and exit code 1
    at once (the heartbeat timeout is 60 s; unchecked, it ended with SIGABRT after it), writing nothing.
    Process 1 loses process 0's coordinator; process 0 sees process 1's connection close."""
    base = dict(model="wan2.1-t2v-1.3b", prompt=PROMPT, weights=str(wan_folder / "converted"), sp=8,
                latents=str(wan_folder / "latents.npy"), **{**WAN, "steps": 6})
    ends: list[float] = []
    results, _ = launch({"killed": {**base, "die_after_step": 1, "dying_process": dying}}, tmp_path, 4,
                        heartbeat=60, timeout=150, ends=ends)
    assert results[dying][0] == 9, results[dying][1][-4000:]
    code, output = results[1 - dying]
    assert code == 1, output[-4000:]
    line = error_line(output)
    assert "died" in line or "lost a process" in line
    assert ends[1 - dying] - death_time(results[dying][1]) < 10
    assert not (tmp_path / "killed.npy").exists()


@pytest.mark.parametrize("differing", ["request", "resolved"])
def test_processes_asked_for_different_runs_stop_together(wan_folder, tmp_path, differing):
    """Process 1 is given --steps 3 where process 0 has 2 (request), or resolves 3 steps from the same
    options (as another vidax version might): both stop before sampling, with one line naming the field
    and both values, and write nothing (unchecked, they wrote a wrong video and then both hung)."""
    base = dict(model="wan2.1-t2v-1.3b", prompt=PROMPT, weights=str(wan_folder / "converted"), sp=8,
                latents=str(wan_folder / "latents.npy"), **WAN)
    key = {"request": "on_process", "resolved": "resolved_on_process"}[differing]
    field = {"request": "steps", "resolved": "resolved.steps"}[differing]
    results, seconds = launch({"steps": {**base, key: {"1": {"steps": 3}}}}, tmp_path, 4, timeout=120)
    for code, output in results:
        assert code == 1, output[-4000:]
        assert f"{field} is 2 on process 0 but 3 on process 1" in error_line(output)
    assert not (tmp_path / "steps.npy").exists()
    assert seconds < 90


@pytest.fixture(scope="module")
def hunyuan_converted(saved, tmp_path_factory):  # noqa: F811
    _, root = saved
    out = tmp_path_factory.mktemp("multihost_hv15") / "converted"
    convert_model(ConvertOptions("hunyuanvideo-1.5", source=str(root), out=out, dtype="float32"))
    return out


def test_hunyuan_video15_across_processes(hunyuan_converted, tmp_path):
    """HunyuanVideo-1.5 (joint text+video attention) with tp, sp (Ulysses across hosts) and dp, one
    device per process, and offload; frames equal this process's runs of the same layouts."""
    latents = tmp_path / "noise.npy"
    np.save(latents, np.random.default_rng(1).standard_normal((1, 4, 2, 2, 3)).astype(np.float32))
    base = dict(model="hunyuanvideo-1.5", prompt='a neon sign that says "OPEN"', weights=str(hunyuan_converted),
                height=32, width=48, frames=5, steps=2, dtype="float32", compile_cache=False, latents=str(latents),
                save_latents=True)
    layouts = {"tp2": dict(tp=2), "sp2": dict(sp=2), "dp2_offload": dict(dp=2, offload_chunk=1)}
    results, _ = launch({name: {**base, **layout} for name, layout in layouts.items()}, tmp_path, 1)
    for code, output in results:
        assert code == 0, output[-4000:]
    for name, layout in layouts.items():
        options = GenerateOptions(**{**base, **layout, "latents": latents}, out=tmp_path / f"{name}-one.npy")
        one = generate(options)
        # the sampled latents (all the cross-process work) are bit for bit this process's; the decode
        # then runs on one device of a CPU client with 1 (there) or 8 (here) devices, whose threaded
        # convolutions sum in another order: 1.2e-6 at most in [0, 1] frames
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.latents.npy"), one.latents)
        np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), one.frames, atol=2e-6, rtol=0)
