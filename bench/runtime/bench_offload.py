"""Streamed offload vs resident weights: per-forward time, transfer time per chunk, resident bytes.

A Wan-shaped toy DiT (the test model of tests/fit, at benchmark width) runs one forward with all
block weights resident, then with its blocks streamed from host memory in chunks of N. On CPU the
"transfer" is a host-to-host copy, so this shows the overlap machinery costs little; on an
accelerator the same script measures real host-to-device streaming.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fit.toy_dit import ToyDiT  # noqa: E402
from vidax.zoo.parts.dit import forward  # noqa: E402
from vidax.zoo.weights.offload import StreamedDiT, chunk_bytes  # noqa: E402

DIM, HEADS, DEPTH, TOKENS, REPEATS = 1024, 8, 8, 2048, 3


def _best_of(fn, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    model = ToyDiT(dim=DIM, heads=HEADS, depth=DEPTH, channels=16)
    x = jax.random.normal(jax.random.key(1), (2, TOKENS, 16))
    t = jax.random.normal(jax.random.key(2), (2, 16))
    params = model.init(jax.random.key(0), x, t)
    resident_fn = jax.jit(lambda p, x, t: forward(model, p, x, t))
    jax.block_until_ready(resident_fn(params, x, t))
    resident = _best_of(lambda: resident_fn(params, x, t))
    blocks = jax.tree.map(np.asarray, params["blocks"])
    others = {k: v for k, v in params.items() if k != "blocks"}
    block_bytes = sum(a.nbytes for a in jax.tree.leaves(blocks))
    print(f"toy DiT: dim {DIM}, {DEPTH} blocks, {TOKENS} tokens, batch 2, fp32; block weights {block_bytes / 2**20:.0f} MiB")
    print(f"{'config':<22}{'s/forward':>11}{'vs resident':>13}{'chunk MiB':>11}{'transfer ms/chunk':>19}")
    print(f"{'resident':<22}{resident:>11.3f}{1.0:>13.2f}{'-':>11}{'-':>19}")
    for chunk in (1, 3, DEPTH):
        streamed = StreamedDiT(model, chunk)
        host = streamed.offload({"blocks": blocks})
        jax.block_until_ready(streamed(others, host, x, t))
        elapsed = _best_of(lambda: streamed(others, host, x, t))
        transfer = _best_of(lambda: streamed._fetch("blocks", host["blocks"].chunks[0]), repeats=5)
        print(
            f"{f'offload chunk {chunk}':<22}{elapsed:>11.3f}{elapsed / resident:>13.2f}"
            f"{chunk_bytes(host['blocks'])[0] / 2**20:>11.0f}{transfer * 1e3:>19.1f}"
        )
    print(f"devices: {jax.devices()}; target: offloaded within 1.15x of resident")


if __name__ == "__main__":
    main()
