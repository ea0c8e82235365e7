"""Step caches under `--offload-chunk` (blocks streamed from host memory): a skipped step streams no block
weights, a full step streams them as usual, and the frames and per-step decisions are those of the same cache
with resident weights (fp32).

One tiny perturbed Wan pipeline (two blocks, `test_wan._reference`) saved with `save_pretrained`; with
`--offload-chunk 1` a full DiT call fetches two chunks. Each method's resident run is the reference of its
streamed run; the decisions are also the ones the diffusers / reference-loop tests of these settings pin
(`test_wan.py`, `test_teacache.py`), so that both runs skip some steps and run others. The same resident runs
are the references of TeaCache and EasyCache with the CFG branches split over a dp 2 x tp 2 mesh. TeaCache's
streamed measurement of block 0's weights is checked on HunyuanVideo 1.0's DiT, whose statistic reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

from tests.step_cache.families.test_wan import FIRST_BLOCK, FRAMES, GUIDANCE, HEIGHT, MAG, MAG_RATIOS, NEGATIVE, PROMPT, \
    STEPS, WIDTH, _reference

FRAME_ATOL = 1e-5  # resident against streamed: the same ops, the block stack cut into chunks
CHUNKS_PER_CALL = 2  # two blocks, --offload-chunk 1
METHODS = {
    "magcache": (dict(cache="magcache", **MAG), [True, True, False, False, True, False, False, True]),
    "first-block": (dict(cache="first-block", cache_threshold=FIRST_BLOCK), [True, False] * 4),
    # the time embedding `e` (Wan2.1 T2V 1.3B's published set): test_teacache.py's WAN_E
    "teacache": (dict(cache="teacache", cache_threshold=300.0), [True, False, True, False, True, True, False, True]),
    # test_teacache.py's EASY: the prompt branch decides for both
    "easycache": (dict(cache="easycache", cache_threshold=0.2, cache_start_percent=0.15, cache_end_percent=0.95),
                  [True] * 4 + [False, True, False, True]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("offload_caches")
    _reference(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(3))
    np.save(folder / "latents.npy", latents.numpy())
    np.save(folder / "ratios.npy", np.asarray(MAG_RATIOS, np.float32))
    return folder


@pytest.fixture(scope="module")
def resident(model, tmp_path_factory):
    """Each method's resident run (frames, decisions), made once for the module's tests that need it."""
    runs = {}

    def run(method: str):
        if method not in runs:
            runs[method] = _generate(model, tmp_path_factory.mktemp(method) / "v.npy", **METHODS[method][0])
        return runs[method]

    return run


def _generate(folder: Path, out: Path, **extra):
    if extra.get("cache") == "magcache":
        extra["mag_ratios"] = folder / "ratios.npy"
    options = GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(folder / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                              guidance=GUIDANCE, latents=folder / "latents.npy", out=out, dtype="float32",
                              compile_cache=False, **extra)
    result = generate(options)
    log = json.loads(out.with_suffix(".json").read_text())["step_cache_steps"]
    return result.frames, np.asarray([[entry["full_dit"]["cond"], entry["full_dit"]["uncond"]] for entry in log])


def _fetch_counter(monkeypatch) -> list:
    """Every chunk `StreamedDiT` fetches from host memory, in order (as the TaylorSeer offload test counts)."""
    from vidax.zoo.weights.offload import StreamedDiT

    fetch, fetched = StreamedDiT._fetch, []
    monkeypatch.setattr(StreamedDiT, "_fetch", lambda self, *a: fetched.append(a[0]) or fetch(self, *a))
    return fetched


@pytest.mark.parametrize("method", list(METHODS))
def test_skipped_steps_stream_no_block_weights(model, resident, tmp_path, monkeypatch, method):
    knobs, expected = METHODS[method]
    resident, resident_ran = resident(method)
    fetched = _fetch_counter(monkeypatch)
    streamed, ran = _generate(model, tmp_path / "streamed.npy", offload_chunk=1, **knobs)
    assert ran[:, 0].tolist() == expected and (ran[:, 0] == ran[:, 1]).all()
    np.testing.assert_array_equal(ran, resident_ran)
    full_steps, skipped_steps = int(ran[:, 0].sum()), int((~ran[:, 0]).sum())
    assert skipped_steps > 0
    # both branches run in one call per step on vidax's batched pair; first-block keeps block 0 (chunk 0 here)
    # on the devices, fetched once, and streams the other chunk on full steps only
    expected_fetches = 1 + (CHUNKS_PER_CALL - 1) * full_steps if method == "first-block" else \
        CHUNKS_PER_CALL * full_steps
    assert len(fetched) == expected_fetches, len(fetched)
    np.testing.assert_allclose(streamed, resident, atol=FRAME_ATOL, rtol=0)


def test_first_block_with_block_zero_inside_a_larger_chunk(model, resident, tmp_path, monkeypatch):
    """`--offload-chunk 2` (one chunk holding both blocks): block 0 is cut from the chunk's one fetch and kept;
    a full step fetches the chunk again for block 1, a skipped step fetches nothing; frames and decisions are
    the resident run's."""
    knobs, _ = METHODS["first-block"]
    resident, resident_ran = resident("first-block")
    fetched = _fetch_counter(monkeypatch)
    streamed, ran = _generate(model, tmp_path / "streamed.npy", offload_chunk=2, **knobs)
    np.testing.assert_array_equal(ran, resident_ran)
    assert len(fetched) == 1 + int(ran[:, 0].sum()), len(fetched)
    np.testing.assert_allclose(streamed, resident, atol=FRAME_ATOL, rtol=0)


@pytest.mark.parametrize("method, mesh", [pytest.param(method, mesh, id=f"{method}-{name}")
                                          for method in ("magcache", "teacache", "easycache")
                                          for name, mesh in (("dp2tp2", dict(dp=2, tp=2)), ("dp2sp2", dict(dp=2, sp=2)))])
def test_branches_split_over_a_mesh_take_the_same_decisions(model, resident, tmp_path, monkeypatch, method, mesh):
    """dp 2 x tp 2 (the CFG branches on two device pairs, each branch's statistic or residual a row of the split batch,
    the heads and feed-forward split in two) and dp 2 x sp 2 (the video tokens split too: each statistic, a
    mean over the tokens, spans both devices' halves): the same decisions per branch and the same frames as on
    one device. The reference DiT's two heads allow tp 2 or sp 2, not both."""
    from vidax.zoo.generator import generation

    knobs, expected = METHODS[method]
    meshes, make_run = [], generation.Run
    monkeypatch.setattr(generation, "Run", lambda family, options, mesh, *rest: meshes.append(mesh) or make_run(
        family, options, mesh, *rest))
    frames, ran = _generate(model, tmp_path / "v.npy", **knobs, **mesh)
    axes = {"data": mesh.get("dp", 1), "tensor": mesh.get("tp", 1), "sequence": mesh.get("sp", 1)}
    assert dict(meshes[0].shape) == axes, meshes[0].shape
    one_frames, one_ran = resident(method)
    assert ran[:, 0].tolist() == expected
    np.testing.assert_array_equal(ran, one_ran)
    np.testing.assert_allclose(frames, one_frames, atol=FRAME_ATOL, rtol=0)


def test_teacache_reads_only_block0_modulation_leaves(monkeypatch):
    """HunyuanVideo 1.0's one-block DiT (a dual- and a single-stream group, `--offload-chunk 1`): TeaCache's
    modulated input reads block 0's `norm1` shift and scale; only those leaves are copied to the device, once,
    the steps that skip fetch no chunk, and the log, changes and outputs are the resident run's."""
    import types

    from flax import traverse_util

    from vidax.zoo.parts.dit import place_resident
    from vidax.zoo.weights.offload import stream_blocks
    from vidax.zoo.step_caches.methods import StepCache
    from vidax.zoo.step_caches.tea import TeaCacheConfig

    from tests.quantized.test_weights_dtype_families import _model, _tree
    from tests.step_cache.test_teacache_families import IDENTITY, STEPS as FAMILY_STEPS, _at, _call_dit, _inputs

    model = _model("hunyuan_video")
    flat = _tree(model)
    resident = types.SimpleNamespace(dit=model, params=place_resident(model, traverse_util.unflatten_dict(
        flat, sep="/")), streamed=None)
    params, streamed_dit, host = stream_blocks(model, flat, 1, None)
    streamed = types.SimpleNamespace(dit=model, params=params, streamed=streamed_dit, host_blocks=host)
    steps = [_at("hunyuan_video", _inputs(model, 1, seed=2), k) for k in range(FAMILY_STEPS)]

    def run(denoiser, threshold):
        cache = StepCache(TeaCacheConfig(threshold, "by-hand", "modulated", IDENTITY), ("cond",), FAMILY_STEPS)
        outs = [np.asarray(cache.predict(denoiser, _call_dit, 0, k, None, None, inputs, None))
                for k, inputs in enumerate(steps)]
        return outs, cache.finish("denoise"), cache.state

    _, probe, _ = run(resident, np.inf)  # the changes (they do not depend on the decisions here)
    changes = [entry["change"]["cond"] for entry in probe]
    threshold = changes[1] + changes[2] / 2  # step 1 skips, step 2 runs, step 3 skips, the last step runs
    expected, want_log, _ = run(resident, threshold)
    fetched = _fetch_counter(monkeypatch)
    ours, log, state = run(streamed, threshold)
    assert [entry["full_dit"]["cond"] for entry in log] == [True, False, True, False, True]
    assert [e["full_dit"] for e in log] == [e["full_dit"] for e in want_log]
    np.testing.assert_allclose([e["change"]["cond"] or 0 for e in log], [e["change"]["cond"] or 0 for e in want_log],
                               rtol=1e-5)
    group = state.first_block.layout[0]
    read = [path for path, used in zip(_leaf_paths(host[group[0]].chunks[0]), group[3]) if used]
    assert read and all("norm1" in path for path in read), read
    assert len(fetched) == 3 * 2  # three full steps, two groups of one one-block chunk each
    for k in range(FAMILY_STEPS):
        np.testing.assert_allclose(ours[k], expected[k], atol=1e-5, rtol=0)


def _leaf_paths(tree) -> list[str]:
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return ["/".join(str(getattr(key, "key", key)) for key in path) for path, _ in flat]
