"""Step caches under `--offload-chunk` (blocks streamed from host memory): a skipped step streams no block
weights, a full step streams them as usual, and the frames and per-step decisions are those of the same cache
with resident weights (fp32).

One tiny perturbed Wan pipeline (two blocks, `test_wan._reference`) saved with `save_pretrained`; with
`--offload-chunk 1` a full DiT call fetches two chunks. Each method's resident run is the reference of its
streamed run; the decisions are also the ones the diffusers / reference-loop tests of these settings pin
(`test_wan.py`, `test_teacache.py`), so that both runs skip some steps and run others.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vidax.zoo.pipeline import GenerateOptions, generate

from tests.step_cache.test_wan import FIRST_BLOCK, FRAMES, GUIDANCE, HEIGHT, MAG, MAG_RATIOS, NEGATIVE, PROMPT, \
    STEPS, WIDTH, _reference

FRAME_ATOL = 1e-5  # resident against streamed: the same ops, the block stack cut into chunks
CHUNKS_PER_CALL = 2  # two blocks, --offload-chunk 1
METHODS = {
    "magcache": (dict(cache="magcache", **MAG), [True, True, False, False, True, False, False, True]),
    "first-block": (dict(cache="first-block", cache_threshold=FIRST_BLOCK), [True, False] * 4),
    # the time embedding `e` (Wan2.1 T2V 1.3B's published set): test_teacache.py's WAN_E
    "teacache": (dict(cache="teacache", cache_threshold=300.0), [True, False, True, False, True, True, False, True]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("offload_caches")
    _reference(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(3))
    np.save(folder / "latents.npy", latents.numpy())
    np.save(folder / "ratios.npy", np.asarray(MAG_RATIOS, np.float32))
    return folder


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
    from vidax.zoo.offload import StreamedDiT

    fetch, fetched = StreamedDiT._fetch, []
    monkeypatch.setattr(StreamedDiT, "_fetch", lambda self, *a: fetched.append(a[0]) or fetch(self, *a))
    return fetched


@pytest.mark.parametrize("method", list(METHODS))
def test_skipped_steps_stream_no_block_weights(model, tmp_path, monkeypatch, method):
    knobs, expected = METHODS[method]
    resident, resident_ran = _generate(model, tmp_path / "resident.npy", **knobs)
    fetched = _fetch_counter(monkeypatch)
    streamed, ran = _generate(model, tmp_path / "streamed.npy", offload_chunk=1, **knobs)
    assert ran[:, 0].tolist() == expected and (ran[:, 0] == ran[:, 1]).all()
    np.testing.assert_array_equal(ran, resident_ran)
    full_steps, skipped_steps = int(ran[:, 0].sum()), int((~ran[:, 0]).sum())
    # both branches run in one call per step on vidax's batched pair; first-block fetches the first chunk always
    first_chunks = skipped_steps if method == "first-block" else 0
    assert len(fetched) == CHUNKS_PER_CALL * full_steps + first_chunks, len(fetched)
    np.testing.assert_allclose(streamed, resident, atol=FRAME_ATOL, rtol=0)
